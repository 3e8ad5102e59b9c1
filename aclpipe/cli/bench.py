"""``aclpipe bench``: compare pipeline configurations on the ready graphs with the simulator's
timing model, then run the benchmark scripts in ``benchmarks/`` and tabulate them.

The comparison reads modelled device time from a trace, so it measures the schedule (how
well streams, depth and workspaces let the engines overlap), not how fast this host runs
Python.  ``--quick`` runs fewer graphs and batches and passes each script its quick options.

Some scripts need packages beyond aclpipe's own (onnx and onnxruntime for ``bench_onnx.py``,
Ray for ``bench_ray.py``): a script whose packages are missing is skipped, with the one
``pip install`` line that adds them, instead of failing on a bare ``ModuleNotFoundError``.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import numpy as np
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.rule import Rule
from rich.table import Table

from .._extras import install_hint, is_installed
from ..pipeline import Pipeline
from ..runtime import open_device
from ..trace import format_seconds
from .common import (
    EXIT_FAILED,
    EXIT_OK,
    CommandError,
    add_sanitizer_argument,
    bind_shapes,
    load_any_graph,
    output_console,
    positive_float,
    positive_int,
    random_inputs,
    reporting_errors,
    say,
)
from .measure import measure

__all__ = ["CONFIGS", "HELP", "NAME", "Config", "configure", "find_folder", "run", "script_needs"]

NAME = "bench"
HELP = "compare pipeline configurations on the ready graphs, then run the benchmark scripts"
ALL_GRAPHS, QUICK_GRAPHS = ("mlp", "transformer", "cnn", "branchy"), ("mlp", "branchy")
#: Quick options for scripts that do not declare ``QUICK_ARGS = [...]`` themselves.
KNOWN_QUICK_ARGS = {"bench_workspace.py": ["--ops", "200", "--repeats", "1"]}
#: Packages (import names) that scripts not declaring ``NEEDS = [...]`` themselves import beyond
#: aclpipe's dependencies.
KNOWN_NEEDS = {"bench_onnx.py": ["onnx", "onnxruntime"], "bench_ray.py": ["ray"]}


@dataclass(frozen=True)
class Config:
    streams: int
    depth: int
    workspace: str

    def __str__(self) -> str:
        return f"{self.streams} stream(s), depth {self.depth}, {self.workspace} workspaces"


#: Serial first (the baseline), then independent branches on streams, then runs in flight, then the
#: naive per-call workspaces with everything else the same.
CONFIGS = (Config(1, 1, "pool"), Config(4, 1, "pool"), Config(4, 3, "pool"), Config(4, 3, "per-call"))


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``bench`` arguments to ``parser``."""
    parser.add_argument("--quick", action="store_true", help="fewer graphs and batches; scripts' quick options")
    parser.add_argument("--graphs", default=None, metavar="G,G,...",
                        help=f"graph names in graphs/ or paths (default {','.join(ALL_GRAPHS)}; "
                             f"quick: {','.join(QUICK_GRAPHS)})")
    parser.add_argument("--batch", type=positive_int, default=32, help="batch size (default 32)")
    parser.add_argument("--runs", type=positive_int, default=None, help="batches per configuration "
                                                                        "(default 20; quick: 6)")
    parser.add_argument("--time-scale", type=positive_float, default=1000.0, metavar="X",
                        help="wall seconds per modelled device second (default 1000)")
    parser.add_argument("--no-scripts", dest="scripts", action="store_false", help="skip benchmarks/*.py")
    parser.add_argument("--no-graphs", dest="graph_bench", action="store_false",
                        help="skip the pipeline comparison")
    parser.add_argument("--script-timeout", type=positive_int, default=600, metavar="S",
                        help="seconds each script may run (default 600)")
    add_sanitizer_argument(parser, default=False)  # off: it would time the checks, not the schedule



def find_folder(name: str) -> Path | None:
    """``./name`` when it exists, else the one beside the installed package (a source checkout)."""
    for base in (Path.cwd(), Path(__file__).resolve().parents[2]):
        if (base / name).is_dir():
            return base / name
    return None


def _graph_paths(args: argparse.Namespace) -> list[Path]:
    names = args.graphs.split(",") if args.graphs else list(QUICK_GRAPHS if args.quick else ALL_GRAPHS)
    folder = find_folder("graphs")
    paths = []
    for name in (n.strip() for n in names if n.strip()):
        path = Path(name)
        if path.suffix:
            paths.append(path)
        elif folder is not None:
            paths.append(folder / f"{name}.yaml")
        else:
            raise CommandError(f"graph {name!r}: no graphs/ folder here; give a path to a graph file")
    return paths


# -- the pipeline comparison -----------------------------------------------------------------------
async def _bench_config(graph: Any, shapes: dict[str, tuple[int, ...]], batches: list[dict[str, np.ndarray]],
                        config: Config, time_scale: float, sanitizer: bool) -> tuple[float, float, float]:
    """(median device seconds per run, samples per device second, overlap share)."""
    device = open_device("sim", timing=True, time_scale=time_scale, sanitizer=sanitizer)
    try:
        async with Pipeline(graph, device, streams=config.streams, depth=config.depth,
                            workspace=config.workspace) as pipe:
            pipe.prepare(**shapes)
            await pipe.run(**batches[0])  # warm-up: worker threads, first workspaces, numpy caches
            measured = await measure(pipe, batches, trace=True)
    finally:
        device.close()
    stats = measured.trace_stats
    assert stats is not None
    samples = len(batches) * next(iter(shapes.values()))[0]
    return float(np.median(stats.run_latencies())), samples / stats.span, stats.overlap_share


def _compare_graphs(args: argparse.Namespace, console: Console) -> None:
    runs = args.runs or (6 if args.quick else 20)
    table = Table(title=f"pipeline configurations (timing model, batch {args.batch}, {runs} runs each)",
                  header_style="bold", box=box.SIMPLE_HEAVY, pad_edge=False)
    for column in ("graph", "streams x depth", "workspace", "time/run", "samples/s", "overlap", "speed-up"):
        table.add_column(column, justify="left" if column in ("graph", "workspace") else "right", no_wrap=True)
    for path in _graph_paths(args):
        graph = load_any_graph(str(path))
        shapes = bind_shapes(graph, args.batch)
        rng = np.random.default_rng(0)
        batches = [random_inputs(graph, shapes, rng) for _ in range(runs)]
        baseline = None
        for config in CONFIGS:
            with console.status(f"{graph.name}: {config}"):
                latency, throughput, overlap = anyio.run(_bench_config, graph, shapes, batches, config,
                                                         args.time_scale, args.sanitizer)
            baseline = baseline or throughput
            table.add_row(graph.name, f"{config.streams} x {config.depth}", config.workspace,
                          format_seconds(latency), _compact(throughput), f"{overlap:.0%}",
                          f"{throughput / baseline:.2f}x")
        table.add_section()
    console.print(table)
    say(console, "time/run: median modelled device time from a run's first copy in to its last copy out "
                 "(deeper pipelines queue more, so it grows while samples/s improves); samples/s: over the "
                 "whole trace; overlap: share of the time two or more engines were busy; speed-up: samples/s "
                 "against the first (serial) configuration")


def _compact(value: float) -> str:
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= limit:
            return f"{value / limit:.2f}{suffix}"
    return f"{value:.0f}"


# -- the scripts ------------------------------------------------------------------------------------
def _declared(source: str, name: str) -> list[str] | None:
    """The list a script assigns to ``name`` at module level (``QUICK_ARGS = [...]``), if any."""
    for statement in ast.parse(source).body:
        if isinstance(statement, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in statement.targets):
            return [str(item) for item in ast.literal_eval(statement.value)]
    return None


def quick_args(script: Path) -> list[str]:
    """A script's quick options: its own ``QUICK_ARGS = [...]``, else a known table entry, else
    ``--quick`` when its source mentions that option, else none."""
    source = script.read_text(encoding="utf-8")
    declared = _declared(source, "QUICK_ARGS")
    if declared is not None:
        return declared
    if script.name in KNOWN_QUICK_ARGS:
        return KNOWN_QUICK_ARGS[script.name]
    return ["--quick"] if '"--quick"' in source or "'--quick'" in source else []


def script_needs(script: Path) -> list[str]:
    """The packages a script imports beyond aclpipe's dependencies: its own ``NEEDS = [...]``,
    else a known table entry, else none."""
    declared = _declared(script.read_text(encoding="utf-8"), "NEEDS")
    return declared if declared is not None else KNOWN_NEEDS.get(script.name, [])


def _run_scripts(args: argparse.Namespace, console: Console) -> bool:
    folder = find_folder("benchmarks")
    scripts = sorted(folder.glob("bench_*.py")) if folder is not None else []
    if not scripts:
        say(console, "no benchmark scripts found (benchmarks/bench_*.py)", style="yellow")
        return True
    rows, skipped, missing_all = [], [], set()
    for script in scripts:
        missing = [module for module in script_needs(script) if not is_installed(module)]
        if missing:
            rows.append((script.name, "skipped", 0.0, f"needs {', '.join(missing)}: {install_hint(*missing)}"))
            skipped.append(script.name)
            missing_all.update(missing)
        else:
            rows.append(_run_script(script, args, console))
    table = Table(title="benchmark scripts", header_style="bold")
    for column in ("script", "status", "seconds", "last line"):
        table.add_column(column)
    for name, status, seconds, last in rows:
        colour = {"ok": "", "skipped": "yellow"}.get(status, "red")
        table.add_row(name, f"[{colour}]{status}[/]" if colour else status, f"{seconds:.1f}", escape(last))
    console.print(table)
    if skipped:
        say(console, f"skipped for missing packages: {', '.join(skipped)}; {install_hint(*missing_all)} runs "
                     "them too", style="yellow")
    return all(status in ("ok", "skipped") for _, status, _, _ in rows)


def _run_script(script: Path, args: argparse.Namespace, console: Console) -> tuple[str, str, float, str]:
    """Run one script and show its output: (name, status, seconds, its last line)."""
    command = [sys.executable, str(script), *(quick_args(script) if args.quick else [])]
    console.print(Rule(" ".join(["python", script.name, *command[2:]])))
    start = time.perf_counter()
    with console.status(f"running {script.name}"):
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=args.script_timeout,
                                  check=False)
            status, output = ("ok" if done.returncode == 0 else f"exit {done.returncode}"), done.stdout
            output += done.stderr if done.returncode else ""
        except subprocess.TimeoutExpired as expired:
            status, output = f"timeout ({args.script_timeout} s)", str(expired.stdout or "")
    say(console, output.rstrip())
    lines = [line for line in output.splitlines() if line.strip()]
    return script.name, status, time.perf_counter() - start, lines[-1] if lines else ""


@reporting_errors
def run(args: argparse.Namespace, console: Console | None = None) -> int:
    """Run ``aclpipe bench``; returns the exit status (0 ok, 1 failures found, 2 bad input)."""
    console = output_console(console)
    if args.graph_bench:
        _compare_graphs(args, console)
    scripts_ok = _run_scripts(args, console) if args.scripts else True
    return EXIT_OK if scripts_ok else EXIT_FAILED
