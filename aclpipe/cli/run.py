"""``aclpipe run GRAPH``: run a graph file on a device with seeded random inputs and report
latency, throughput, engine use and overlap (from a device trace), memory and sync counts.

.. code-block:: text

    aclpipe run graphs/mlp.yaml --batch 32 --runs 20 --streams 4 --depth 2 --timing \\
        --trace mlp.json --gantt mlp.png
"""

from __future__ import annotations

import argparse
from typing import Any

import anyio
import numpy as np
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from ..backends import parse_device
from ..pipeline import Pipeline
from ..plan import Plan
from ..plan.render import format_bytes
from ..runtime import Device, open_device
from ..runtime.workspaces import STRATEGIES
from ..trace import format_seconds
from .common import (
    EXIT_OK,
    CommandError,
    add_graph_arguments,
    describe_shapes,
    load_graph_arguments,
    output_console,
    positive_int,
    random_inputs,
    reporting_errors,
    say,
)
from .measure import Measurement, measure, percentile

__all__ = ["HELP", "NAME", "configure", "device_options", "run"]

NAME = "run"
HELP = "run a graph file on seeded random inputs and report latency, throughput and overlap"


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``run`` arguments to ``parser``."""
    add_graph_arguments(parser, batch=8)
    parser.add_argument("--device", default=None, help="device, e.g. 'sim' or 'ascend:0' (default: "
                                                       "$ACLPIPE_DEVICE, else sim)")
    parser.add_argument("--runs", type=positive_int, default=20, help="batches to run (default 20)")
    parser.add_argument("--streams", type=positive_int, default=4, help="compute streams at most (default 4)")
    parser.add_argument("--depth", type=positive_int, default=2, help="runs in flight (default 2)")
    parser.add_argument("--workspace", choices=STRATEGIES, default="pool", help="workspace strategy")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    add_sim_arguments(parser)
    parser.add_argument("--trace", metavar="OUT.json", help="write a Chrome trace (open in ui.perfetto.dev)")
    parser.add_argument("--gantt", metavar="OUT.png", help="draw a Gantt chart (needs matplotlib)")


def add_sim_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--timing", action="store_true",
                        help="sim: turn the timing model on (times are then modelled device time)")
    parser.add_argument("--time-scale", type=float, default=1000.0, metavar="X",
                        help="sim with --timing: wall seconds per modelled device second (default 1000)")
    parser.add_argument("--sanitizer", action="store_true", help="sim: check every access for happens-before")



def device_options(args: argparse.Namespace) -> tuple[str | None, dict[str, Any]]:
    """The device name and its open options; simulator options on another backend are an error."""
    backend, _ = parse_device(args.device)
    if backend != "sim":
        if args.timing or args.sanitizer:
            raise CommandError(f"--timing and --sanitizer apply to the sim backend only, not {backend!r}")
        return args.device, {}
    if args.time_scale <= 0:
        raise CommandError(f"--time-scale must be positive, got {args.time_scale}")
    options: dict[str, Any] = {"timing": args.timing, "time_scale": args.time_scale}
    if args.sanitizer:
        options["sanitizer"] = True
    return args.device, options


@reporting_errors
def run(args: argparse.Namespace, console: Console | None = None) -> int:
    """Run ``aclpipe run``; returns the exit status (0 ok, 1 failures found, 2 bad input)."""
    console = output_console(console)
    graph, shapes, _ = load_graph_arguments(args)  # shape errors now, before a device is opened
    if args.gantt:
        _need_matplotlib()
    name, options = device_options(args)
    rng = np.random.default_rng(args.seed)
    batches = [random_inputs(graph, shapes, rng) for _ in range(args.runs)]
    device = open_device(name, **options)
    try:
        if (args.trace or args.gantt) and not device.capabilities.tracing:
            raise CommandError(f"--trace and --gantt need a device that records timelines (sim), not {device.name}")
        say(console, f"{graph.name} ({args.graph}) on {device.describe()}", style="bold")
        say(console, f"inputs {describe_shapes(shapes)}; {args.runs} runs, {args.streams} stream(s) at most, "
                     f"depth {args.depth}, workspace {args.workspace}")
        plan, measured = anyio.run(_run_pipeline, graph, device, args, shapes, batches, console)
    finally:
        device.close()
    console.print(report_table(graph.name, plan, measured, args, options, batch=_samples(shapes)))
    _write_outputs(measured, args, console, title=f"{graph.name}: {describe_shapes(shapes)}")
    return EXIT_OK


async def _run_pipeline(graph: Any, device: Device, args: argparse.Namespace, shapes: dict[str, tuple[int, ...]],
                        batches: list[dict[str, np.ndarray]], console: Console) -> tuple[Plan, Measurement]:
    async with Pipeline(graph, device, streams=args.streams, depth=args.depth, workspace=args.workspace) as pipe:
        plan = pipe.prepare(**shapes)
        columns = (TextColumn("running"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=True) as progress:
            task = progress.add_task("runs", total=len(batches))
            measured = await measure(pipe, batches, trace=True,
                                     on_result=lambda: progress.advance(task))
    return plan, measured


def _samples(shapes: dict[str, tuple[int, ...]]) -> int:
    first = next(iter(shapes.values()))
    return first[0] if first else 1


def report_table(name: str, plan: Plan, measured: Measurement, args: argparse.Namespace,
                 options: dict[str, Any], batch: int) -> Table:
    """The results as a two-column rich table."""
    timed = bool(options.get("timing"))
    stats, trace_stats = measured.stats, measured.trace_stats
    table = Table(title=f"aclpipe run: {name}", show_header=True, header_style="bold")
    table.add_column("measure", no_wrap=True)
    table.add_column("value")
    runs = len(measured.latencies)
    if timed and trace_stats is not None and trace_stats.run_spans:
        device_latency = trace_stats.run_latencies()
        table.add_row("latency p50 / p99", f"{format_seconds(percentile(device_latency, 50))} / "
                      f"{format_seconds(percentile(device_latency, 99))}  (modelled device time, first copy in "
                      "to last copy out)")
        span = trace_stats.span
        table.add_row("throughput", f"{runs * batch / span:,.0f} samples/s, {runs / span:,.0f} runs/s "
                      f"(modelled device time over {format_seconds(span)})")
    else:
        table.add_row("latency p50 / p99", f"{format_seconds(percentile(measured.latencies, 50))} / "
                      f"{format_seconds(percentile(measured.latencies, 99))}  (host, batch taken to result)")
        table.add_row("throughput", f"{runs * batch / measured.wall:,.0f} samples/s, {runs / measured.wall:,.1f} "
                      "runs/s (host wall time)")
    table.add_row("wall time", f"{format_seconds(measured.wall)} for {runs} runs"
                  + (f" (time scale x{options['time_scale']:g})" if timed else ""))
    if trace_stats is not None:
        shares = ", ".join(f"{engine} {share:.0%}" for engine, share in trace_stats.share.items())
        table.add_row("engine busy", shares + ("" if timed else "  (timing model off: numpy speed)"))
        table.add_row("overlap", f"{trace_stats.overlap_share:.0%} of the time two or more engines busy; "
                      f"{trace_stats.copy_hidden:.0%} of copy time hidden under compute; "
                      f"up to {trace_stats.max_concurrent_kernels} kernels at once")
    table.add_row("streams", f"{plan.num_streams} compute (of {args.streams} allowed) + H2D + D2H")
    table.add_row("events per run", f"{stats.events_per_run} recorded, {stats.waits_per_run} waits "
                  f"(one per cross-stream edge would be {plan.cross_stream_edges})")
    table.add_row("memory", f"arena {format_bytes(plan.arena_size)} per slot x {args.depth} "
                  f"(live-set lower bound {format_bytes(plan.lower_bound)}), constants "
                  f"{format_bytes(stats.constant_bytes)}, device peak "
                  f"{format_bytes(stats.device_peak_bytes) if stats.device_peak_bytes is not None else 'n/a'}")
    table.add_row("executors", f"{stats.executors} prepared up front for {stats.signatures} input signature(s); "
                  f"prepare cache: {stats.prepare_hits} hits")
    workspace = dict(stats.workspace)
    table.add_row("workspace", ", ".join(f"{key}={value}" for key, value in workspace.items()))
    if stats.failed_runs:
        table.add_row("[red]failed runs[/]", str(stats.failed_runs))
    return table


def _need_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise CommandError("--gantt needs matplotlib: pip install 'aclpipe[plot]'") from None


def _write_outputs(measured: Measurement, args: argparse.Namespace, console: Console, title: str) -> None:
    trace = measured.trace
    if trace is None:
        return
    if args.trace:
        path = trace.save_chrome(args.trace)
        say(console, f"trace: {path} ({len(trace)} tasks; open in https://ui.perfetto.dev or chrome://tracing)")
    if args.gantt:
        path = trace.save_gantt(args.gantt, title=title)
        say(console, f"gantt: {path}")
