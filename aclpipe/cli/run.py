"""``aclpipe run GRAPH``: run a graph file on a device and show its outputs, with latency,
throughput, engine use and overlap (from a device trace), memory and sync counts.

Inputs come from ``--input NAME=FILE.npy`` / ``--input FILE.npz`` (every run feeds the same
arrays; inputs they leave out are refused unless ``--random``), else they are seeded random
batches of ``--batch`` rows.  Each output's name, shape, dtype and first values are printed;
``--output out.npz`` saves them (``out.npy``: the one output of a graph with one).  Every
argument, output path and the memory one run needs are checked before the device is opened
or anything runs.

.. code-block:: text

    aclpipe run graphs/mlp.yaml --input x=batch.npy --output out.npz --runs 20 --streams 4 \\
        --depth 2 --timing --trace mlp.json --gantt mlp.png
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
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

from .._extras import require
from ..backends import parse_device
from ..graph import Graph
from ..pipeline import Pipeline
from ..plan import Plan, make_plan
from ..plan.render import format_bytes
from ..runtime import Device
from ..runtime.workspaces import STRATEGIES
from ..trace import format_seconds
from .arrays import check_output_format, input_assignment, load_inputs, outputs_table, save_outputs
from .common import (
    EXIT_OK,
    MAX_DEPTH,
    MAX_STREAMS,
    CommandError,
    add_graph_arguments,
    add_sanitizer_argument,
    bind_inputs,
    check_writable,
    describe_shapes,
    int_at_most,
    load_any_graph,
    open_device_for,
    output_console,
    positive_float,
    positive_int,
    random_inputs,
    reporting_errors,
    sanitizer_option,
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
    parser.add_argument("--streams", type=int_at_most(MAX_STREAMS), default=4,
                        help=f"compute streams at most, 1 to {MAX_STREAMS} (default 4)")
    parser.add_argument("--depth", type=int_at_most(MAX_DEPTH), default=2,
                        help=f"runs in flight, 1 to {MAX_DEPTH} (default 2)")
    parser.add_argument("--workspace", choices=STRATEGIES, default="pool", help="workspace strategy")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    parser.add_argument("--input", type=input_assignment, action="append", default=[], metavar="NAME=FILE.npy",
                        help="feed input NAME from a .npy file, or every input from a .npz (FILE.npz); "
                             "repeatable; inputs not given are refused unless --random")
    parser.add_argument("--random", action="store_true",
                        help="feed seeded random values to the inputs --input does not give (without --input, "
                             "every input is seeded random)")
    parser.add_argument("--output", metavar="OUT.npz", help="save the outputs of the last run: OUT.npz holds "
                                                             "every output, OUT.npy the one output of a graph "
                                                             "with one")
    add_sim_arguments(parser)
    parser.add_argument("--trace", metavar="OUT.json", help="write a Chrome trace (open in ui.perfetto.dev)")
    parser.add_argument("--gantt", metavar="OUT.png", help="draw a Gantt chart (needs matplotlib)")


def add_sim_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--timing", action="store_true",
                        help="sim: turn the timing model on (times are then modelled device time)")
    parser.add_argument("--time-scale", type=positive_float, default=1000.0, metavar="X",
                        help="sim with --timing: wall seconds per modelled device second (default 1000)")
    add_sanitizer_argument(parser)



def device_options(args: argparse.Namespace) -> tuple[str | None, dict[str, Any]]:
    """The device name and its open options; simulator options on another backend are an error."""
    backend, _ = parse_device(args.device)
    if backend != "sim":
        if args.timing or args.sanitizer is not None:
            raise CommandError(f"--timing and --sanitizer/--no-sanitizer apply to the sim backend only, not "
                               f"{backend!r}")
        return args.device, {}
    options: dict[str, Any] = {"timing": args.timing, "time_scale": args.time_scale, **sanitizer_option(args)}
    return args.device, options


@reporting_errors
def run(args: argparse.Namespace, console: Console | None = None) -> int:
    """Run ``aclpipe run``; returns the exit status (0 ok, 1 failures found, 2 bad input)."""
    console = output_console(console)
    graph, shapes, arguments, given = _graph_and_inputs(args)  # shape errors now, before a device is opened
    outputs_path = _check_output_paths(args)
    if outputs_path is not None:
        check_output_format(outputs_path, list(graph.outputs))
    name, options = device_options(args)
    device = open_device_for(name, **options)
    try:
        if (args.trace or args.gantt) and not device.capabilities.tracing:
            raise CommandError(f"--trace and --gantt need a device that records timelines (sim), not {device.name}")
        plan = make_plan(graph.bind(**arguments), streams=args.streams)
        _check_fits(plan, device, args.depth)
        say(console, f"{graph.name} ({args.graph}) on {device.describe()}", style="bold")
        source = (f"{', '.join(given)} from --input" + (", the rest seeded random" if len(given) < len(shapes) else "")
                  if given else "seeded random")
        say(console, f"inputs {describe_shapes(shapes)} ({source}); {args.runs} runs, {args.streams} stream(s) "
                     f"at most, depth {args.depth}, workspace {args.workspace}")
        batches = _batches(graph, shapes, given, args)
        plan, measured = anyio.run(_run_pipeline, graph, device, args, arguments, batches, console)
    finally:
        device.close()
    console.print(report_table(graph.name, plan, measured, args, options, batch=_samples(shapes)))
    _show_outputs(measured, args, console, outputs_path)
    _write_outputs(measured, args, console, title=f"{graph.name}: {describe_shapes(shapes)}")
    return EXIT_OK


def _graph_and_inputs(args: argparse.Namespace
                      ) -> tuple[Graph, dict[str, tuple[int, ...]], dict[str, Any], dict[str, np.ndarray]]:
    """The graph, every input's shape (given arrays fix theirs and the named dims they carry),
    what ``graph.bind`` and ``Pipeline.prepare`` take (the given inputs as their arrays, so that
    a host value is its contents), and the arrays ``--input`` named."""
    graph = load_any_graph(args.graph)
    given, notes = load_inputs(graph, args.input, random_rest=args.random)
    shapes, arguments, _ = bind_inputs(graph, args.batch, dict(args.dim), given)
    for note in notes:
        print(f"aclpipe: note: {note}", file=sys.stderr)
    return graph, shapes, arguments, given


def _check_output_paths(args: argparse.Namespace) -> Path | None:
    if args.gantt:
        _need_matplotlib()
    for option, value in (("--trace", args.trace), ("--gantt", args.gantt)):
        if value:
            check_writable(value, option)
    return check_writable(args.output, "--output") if args.output else None


def _check_fits(plan: Plan, device: Device, depth: int) -> None:
    """Refuse a run that cannot fit before allocating any of it (a huge --batch, say)."""
    need = plan.arena_size * depth + sum(int(np.asarray(array).nbytes) for array in plan.constants.values())
    total = device.mem_info().total
    if need > total:
        raise CommandError(f"one run needs {format_bytes(need)} of device memory ({depth} slot(s) of "
                           f"{format_bytes(plan.arena_size)} plus constants), more than {device.name}'s "
                           f"{format_bytes(total)}; use a smaller --batch or --depth")
    staged = sum(plan.values[name].desc.nbytes for name in plan.inputs) * (depth + 1)
    available = _host_memory()
    if available is not None and staged > available:
        raise CommandError(f"one batch of inputs staged {depth + 1} times needs {format_bytes(staged)} of host "
                           f"memory, more than the {format_bytes(available)} available; use a smaller --batch")


def _host_memory() -> int | None:
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def _batches(graph: Graph, shapes: dict[str, tuple[int, ...]], given: dict[str, np.ndarray],
             args: argparse.Namespace) -> Iterator[dict[str, np.ndarray]]:
    """One batch per run, made as it is needed: the given arrays, random ones for the rest."""
    rng = np.random.default_rng(args.seed)
    missing = [name for name in graph.inputs if name not in given]
    for _ in range(args.runs):
        yield {**given, **random_inputs(graph, shapes, rng, missing)}


async def _run_pipeline(graph: Any, device: Device, args: argparse.Namespace, arguments: dict[str, Any],
                        batches: Iterable[dict[str, np.ndarray]], console: Console) -> tuple[Plan, Measurement]:
    async with Pipeline(graph, device, streams=args.streams, depth=args.depth, workspace=args.workspace) as pipe:
        plan = pipe.prepare(**arguments)
        columns = (TextColumn("running"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=True) as progress:
            task = progress.add_task("runs", total=args.runs)
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
    require("matplotlib", "--gantt (a Gantt chart)")


def _show_outputs(measured: Measurement, args: argparse.Namespace, console: Console, path: Path | None) -> None:
    last = measured.last
    if last is None:
        return
    console.print(outputs_table(last, title=f"outputs of run {len(measured.latencies)}"))
    if path is not None:
        save_outputs(path, last)
        say(console, f"outputs: {path} ({', '.join(last)}; read with numpy.load)")


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
