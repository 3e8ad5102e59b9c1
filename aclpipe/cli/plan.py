"""``aclpipe plan GRAPH``: print the plan for a graph file (per stream its nodes, waits and
records; arena offsets and the peak against the live-set lower bound), the workspace each
node's phase one asks for, whether requests may be batched into one run (and if not, the
node that mixes their rows), the streams and events a pipeline and each of its programs hold
at ``--depth`` (both are limited per device), and write the plan as Graphviz DOT.

``--input`` takes files as ``aclpipe run`` does: their arrays fix the input shapes, and an
imported model's host values (inputs whose contents decide the graph, such as a Reshape's
shape) are planned for the contents given.

.. code-block:: text

    aclpipe plan graphs/transformer.yaml --batch 8 --streams 4 --dot transformer.dot
    dot -Tsvg transformer.dot -o transformer.svg
    aclpipe plan model.onnx --input inputs.npz
"""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.table import Table

from ..backends.sim.engines import ATLAS_A2
from ..errors import AclpipeError
from ..ops import get_op
from ..pipeline.program import events_per_slot, model_streams_per_slot
from ..plan import Plan, batchable, make_plan
from ..plan.plan import COPY_OPS
from ..plan.render import format_bytes
from ..trace import plan_dot
from .arrays import input_assignment, load_inputs
from .common import (
    EXIT_OK,
    MAX_STREAMS,
    add_graph_arguments,
    bind_inputs,
    check_writable,
    describe_shapes,
    int_at_most,
    load_any_graph,
    output_console,
    reporting_errors,
    say,
)

__all__ = ["HELP", "NAME", "configure", "device_budget", "run", "workspace_sizes"]

NAME = "plan"
HELP = "print a graph's plan (streams, events, memory, workspaces) and write it as DOT"


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``plan`` arguments to ``parser``."""
    add_graph_arguments(parser, batch=8)
    parser.add_argument("--streams", type=int_at_most(MAX_STREAMS), default=4,
                        help=f"compute streams at most, 1 to {MAX_STREAMS} (default 4)")
    parser.add_argument("--depth", type=int_at_most(64), default=2,
                        help="runs in flight (slots) to count streams and events for, 1 to 64 (default 2)")
    parser.add_argument("--dot", metavar="OUT.dot", help="write the plan as Graphviz DOT (render: dot -Tsvg)")
    parser.add_argument("--input", type=input_assignment, action="append", default=[], metavar="NAME=FILE.npy",
                        help="input NAME from a .npy file, or every input from a .npz (FILE.npz), as for run: "
                             "fixes its shape, and a host value's contents; repeatable")



def workspace_sizes(plan: Plan) -> dict[str, int | str]:
    """Node name -> the workspace bytes its phase one asks for (no device needed: the catalog's
    own ``prepare``), or the phase-one error text for a node that refuses."""
    sizes: dict[str, int | str] = {}
    for node in plan.nodes:
        if node.op in COPY_OPS or node.op == "Loop":  # a Loop's body is prepared by the pipeline
            continue
        inputs = [plan.values[v].desc if v is not None else None for v in node.inputs]
        outputs = [plan.values[v].desc if v is not None else None for v in node.outputs]
        try:
            sizes[node.name] = int(get_op(node.op).prepare(inputs, outputs, dict(node.attrs)).workspace_size)
        except (AclpipeError, ValueError, TypeError) as error:
            sizes[node.name] = f"refused: {error}"
    return sizes


def workspace_table(plan: Plan, sizes: dict[str, int | str]) -> Table:
    table = Table(title="workspaces (phase one)", header_style="bold")
    for column in ("stream", "nodes needing one", "largest", "sum"):
        table.add_column(column, justify="left" if column in ("stream", "nodes needing one") else "right")
    for stream in range(plan.num_streams):
        needing = [(n.name, sizes[n.name]) for n in plan.nodes_on(stream)
                   if isinstance(sizes.get(n.name), int) and sizes[n.name]]
        listed = ", ".join(f"{name} ({format_bytes(int(size))})" for name, size in needing) or "-"
        largest = max((int(size) for _, size in needing), default=0)
        total = sum(int(size) for _, size in needing)
        table.add_row(str(stream), listed, format_bytes(largest), format_bytes(total))
    return table


def device_budget(plan: Plan, streams: int, depth: int) -> str:
    """What a pipeline of ``plan`` holds of the device's limited streams and events (see
    :mod:`aclpipe.pipeline.budget`), against an Atlas A2's limits."""
    own = pipeline_streams = streams + depth + 2
    per_slot = model_streams_per_slot(plan, pipeline_streams)
    events = events_per_slot(plan, pipeline_streams, done_joins=True)
    return (f"device budget at depth {depth}: the pipeline holds {own} streams of its own ({streams} "
            f"compute, {depth} replay, H2D, D2H); each program, captured, {depth} x {per_slot} = {depth * per_slot} "
            f"model streams and {depth} x {events} = {depth * events} events (an Atlas A2 allows "
            f"{ATLAS_A2.max_streams} streams and {ATLAS_A2.max_events} events; idle programs are freed for new "
            "captures, and a program that still does not fit runs uncaptured)")


@reporting_errors
def run(args: argparse.Namespace, console: Console | None = None) -> int:
    """Run ``aclpipe plan``; returns the exit status (0 ok, 1 failures found, 2 bad input)."""
    console = output_console(console)
    dot_path = check_writable(args.dot, "--dot") if args.dot else None  # before any work
    graph = load_any_graph(args.graph)
    given, notes = load_inputs(graph, args.input, random_rest=True)  # the rest take --batch and --dim: no values
    shapes, _, bound = bind_inputs(graph, args.batch, dict(args.dim), given)
    for note in notes:
        print(f"aclpipe: note: {note}", file=sys.stderr)
    plan = make_plan(bound, streams=args.streams)
    say(console, f"inputs {describe_shapes(shapes)}")
    # Whether a server may stack requests into one run (aclpipe.plan.batch_axis).
    say(console, f"batchable: {batchable(graph, **shapes)}")
    say(console, plan.summary())
    say(console, device_budget(plan, args.streams, args.depth))
    sizes = workspace_sizes(plan)
    console.print(workspace_table(plan, sizes))
    static = sum(max((int(s) for n in plan.nodes_on(k) if isinstance(s := sizes.get(n.name), int)), default=0)
                 for k in range(plan.num_streams))
    say(console, f"workspace strategy 'static' would hold {format_bytes(static)} (the largest per stream); "
                 "'pool' defaults to twice that")
    for node in plan.nodes:
        if node.op == "Loop":
            say(console, f"node {node.name!r}: runs as control flow, {node.attrs['region']!r}; the pipeline plans "
                         "and prepares the body once and runs it per iteration")
    for name, size in sizes.items():
        if isinstance(size, str):
            say(console, f"node {name!r}: phase one {size}", style="yellow")
    if dot_path is not None:
        path = dot_path
        path.write_text(plan_dot(plan), encoding="utf-8")
        say(console, f"dot: {path} ({plan.stream_count} stream clusters, {plan.num_waits} event edges; "
                     f"render with: dot -Tsvg {path} -o {path.with_suffix('.svg')})")
    return EXIT_OK
