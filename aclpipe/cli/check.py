"""``aclpipe check GRAPH``: run a graph under the simulator's sanitizer in many configurations
(stream counts x depths x workspace strategies) on the same seeded inputs, and report any
happens-before hazard, any failure, and any configuration whose outputs differ from the first.

A hazard means two accesses to the same device bytes were not ordered by events: a planner
or pipeline bug that would read garbage on a real device only sometimes.  Outputs must agree
across configurations because the same kernels run on the same data: only the schedule varies.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import anyio
import numpy as np
from rich.console import Console
from rich.table import Table

from ..errors import AclpipeError, HazardError
from ..graph import Graph
from ..pipeline import Pipeline
from ..runtime import open_device
from ..runtime.workspaces import STRATEGIES
from .common import (
    EXIT_FAILED,
    EXIT_OK,
    MAX_STREAMS,
    add_graph_arguments,
    describe_shapes,
    load_graph_arguments,
    output_console,
    positive_int,
    random_inputs,
    reporting_errors,
    say,
)
from .measure import measure

__all__ = ["HELP", "NAME", "Outcome", "check_configuration", "configure", "run"]

NAME = "check"
HELP = "run a graph under the sanitizer across stream counts, depths and workspaces; report hazards"
RTOL, ATOL = 1e-5, 1e-6


def int_list(text: str) -> list[int]:
    """argparse type: ``1,2,4``."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}") from None
    if not values or any(value < 1 for value in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    if max(values) > MAX_STREAMS:  # streams and depths alike: device streams, or prepared copies
        raise argparse.ArgumentTypeError(f"expected values from 1 to {MAX_STREAMS}, got {text!r}")
    return values


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``check`` arguments to ``parser``."""
    add_graph_arguments(parser, batch=4)
    parser.add_argument("--streams", type=int_list, default=[1, 2, 4], metavar="N,N,...",
                        help="stream counts to try (default 1,2,4)")
    parser.add_argument("--depths", type=int_list, default=[1, 2, 3], metavar="N,N,...",
                        help="depths (runs in flight) to try (default 1,2,3)")
    parser.add_argument("--workspace", choices=(*STRATEGIES, "all"), default="all",
                        help="workspace strategy to use, or 'all' to try each (default all)")
    parser.add_argument("--runs", type=positive_int, default=4, help="batches per configuration (default 4)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")



@dataclass
class Outcome:
    """One configuration's result: ``status`` is ``"ok"``, ``"hazard"``, ``"error"`` or ``"mismatch"``."""

    streams: int
    depth: int
    workspace: str
    status: str = "ok"
    detail: str = ""
    outputs: list[dict[str, np.ndarray]] | None = None
    events: int = 0
    waits: int = 0
    max_difference: float = 0.0


async def check_configuration(graph: Graph, batches: list[dict[str, np.ndarray]], streams: int, depth: int,
                              workspace: str) -> Outcome:
    """Run ``batches`` on a fresh simulated device with the sanitizer on."""
    outcome = Outcome(streams, depth, workspace)
    device = open_device("sim", sanitizer=True)
    try:
        async with Pipeline(graph, device, streams=streams, depth=depth, workspace=workspace) as pipe:
            measured = await measure(pipe, batches, trace=False, keep_outputs=True)
        outcome.outputs = measured.outputs
        outcome.events, outcome.waits = measured.stats.events_per_run, measured.stats.waits_per_run
    except HazardError as error:
        outcome.status, outcome.detail = "hazard", " ".join(str(error).split())
    except AclpipeError as error:
        outcome.status, outcome.detail = "error", f"{type(error).__name__}: {' '.join(str(error).split())}"
    finally:
        device.close()
    return outcome


def compare(reference: Outcome, outcome: Outcome) -> None:
    """Mark ``outcome`` a mismatch when its outputs differ from ``reference``'s beyond tolerance."""
    if reference.outputs is None or outcome.outputs is None:
        raise ValueError(f"compare needs two outcomes that produced outputs, got a {reference.status!r} and a "
                         f"{outcome.status!r} one; compare only configurations that ran")
    worst, where = 0.0, ""
    for index, (expected, seen) in enumerate(zip(reference.outputs, outcome.outputs)):
        for name, value in expected.items():
            difference = float(np.max(np.abs(seen[name].astype(np.float64) - value.astype(np.float64)),
                                      initial=0.0))
            if difference > worst:
                worst, where = difference, f"batch {index} output {name!r}"
            if not np.allclose(seen[name], value, rtol=RTOL, atol=ATOL, equal_nan=True):
                outcome.status = "mismatch"
                outcome.detail = f"{where}: max |difference| {worst:.3g} against the first configuration"
    outcome.max_difference = worst


def _table(outcomes: list[Outcome]) -> Table:
    table = Table(title="sanitizer check", header_style="bold")
    for column in ("streams", "depth", "workspace", "events/waits", "result", "max |diff|", "detail"):
        table.add_column(column, no_wrap=column != "detail")
    colours = {"ok": "green", "hazard": "red", "error": "red", "mismatch": "yellow"}
    for o in outcomes:
        table.add_row(str(o.streams), str(o.depth), o.workspace, f"{o.events}/{o.waits}",
                      f"[{colours[o.status]}]{o.status}[/]", f"{o.max_difference:.3g}" if o.outputs else "-",
                      o.detail)
    return table


@reporting_errors
def run(args: argparse.Namespace, console: Console | None = None) -> int:
    """Run ``aclpipe check``; returns the exit status (0 ok, 1 failures found, 2 bad input)."""
    console = output_console(console)
    graph, shapes, _ = load_graph_arguments(args)  # shape errors now, before any configuration runs
    rng = np.random.default_rng(args.seed)
    batches = [random_inputs(graph, shapes, rng) for _ in range(args.runs)]
    workspaces = STRATEGIES if args.workspace == "all" else (args.workspace,)
    configurations = [(s, d, w) for w in workspaces for s in args.streams for d in args.depths]
    say(console, f"{graph.name}: inputs {describe_shapes(shapes)}, {args.runs} batches, "
                 f"{len(configurations)} configurations, sanitizer on")
    outcomes = [anyio.run(check_configuration, graph, batches, *config) for config in configurations]
    reference = next((o for o in outcomes if o.outputs is not None), None)
    for outcome in outcomes:
        if reference is not None and outcome.outputs is not None and outcome is not reference:
            compare(reference, outcome)
    console.print(_table(outcomes))
    bad = [o for o in outcomes if o.status != "ok"]
    if not bad:
        say(console, f"no hazards: {len(outcomes)} configurations ran clean under the sanitizer, and their "
                     "outputs agree", style="green")
        return EXIT_OK
    kinds = sorted({o.status for o in bad})
    say(console, f"{len(bad)} of {len(outcomes)} configurations failed ({', '.join(kinds)})", style="red")
    return EXIT_FAILED
