"""An ONNX ``Loop`` as one control node: its body imported once, as a graph of its own.

:func:`loop_as_region` emits the body through a :class:`GraphContext` of its own (so the body's
nodes are counted and named once, whatever the trip count) and adds one ``Loop`` node
(:class:`~aclpipe.graph.region.LoopRegion`) to the enclosing graph.  What the body reads from
enclosing graphs becomes an *invariant* input of the region when it is computed on the device,
and stays a folded constant when it is known.

The body is built twice at most: first with the loop condition known to be true (a loop
without a condition, or whose body passes a true condition on); when the body's next condition
is then still computed on the device, it is built again with the condition as a *running*
flag carried on the device, and every carried value kept (``Where``) once the flag is false.

It declines (returns None, and the caller unrolls the loop) when the body cannot be one graph
for every iteration: a carried value changes shape, the body needs the iteration number on the
host (shape arithmetic on it), or the body's next condition is known to be false.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import onnx

from ..dtypes import DType
from ..graph import Graph, Value
from ..graph.region import LoopRegion
from .context import OnnxNode, UnsupportedFeature
from .convert_math import cast_to
from .fold import Folded
from .graph_context import GraphContext

__all__ = ["loop_as_region"]

_ITERATION, _RUNNING = "loop.iteration", "loop.running"


class _OuterScope(Mapping[str, Any]):
    """The enclosing graphs' values as the body sees them: known ones as they are, device
    values as invariant inputs of the body graph (declared on first read)."""

    def __init__(self, outer: Mapping[str, Any], body: Graph):
        self.outer, self.body = outer, body
        #: body input name -> the enclosing graph's value it stands for
        self.invariants: dict[str, Any] = {}
        self._seen: dict[str, Value] = {}

    def __getitem__(self, name: str) -> Any:
        value = self.outer[name]
        if not isinstance(value, Value):
            return value
        found = self._seen.get(name)
        if found is None:
            assert value.desc is not None  # outer values are concrete once specialized
            input_name = f"loop.outer{len(self._seen)}"
            found = self._seen[name] = self.body.input(input_name, value.desc.shape, value.desc.dtype)
            self.invariants[input_name] = value
        return found

    def __contains__(self, name: object) -> bool:
        return name in self.outer

    def __iter__(self) -> Iterator[str]:
        return iter(self.outer)

    def __len__(self) -> int:
        return len(self.outer)


class _Body:
    """One build of the body: its graph, context, outer scope and the values of its outputs."""

    def __init__(self, ctx: GraphContext, node: OnnxNode, body: onnx.GraphProto, carried: list[Any],
                 running: bool):
        self.graph = Graph(f"{ctx.label}/body")
        self.ctx = GraphContext(self.graph, limits=ctx.limits, opsets=ctx.opsets)
        self.ctx.label = ctx.label
        self.scope = _OuterScope(node.scope, self.graph)
        names = [value.name for value in body.input]
        self.iteration = self.graph.input(_ITERATION, (), DType.int64)
        self.running = self.graph.input(_RUNNING, (), DType.bool) if running else None
        self.carried = [self.graph.input(f"loop.carried{k}", ctx.shape(value), ctx.dtype(value))
                        for k, value in enumerate(carried)]
        feeds: dict[str, Any] = {names[0]: self.iteration,
                                 names[1]: self.running if running else Folded.of(np.array(True))}
        feeds.update(zip(names[2:], self.carried))
        outputs = self.ctx.subgraph(body, feeds, self.scope, "body")
        self.condition, self.new = outputs[0], outputs[1:1 + len(carried)]
        self.scans = outputs[1 + len(carried):]

    def reads_iteration(self) -> bool:
        return any(_ITERATION in node.inputs for node in self.graph.nodes)


def loop_as_region(ctx: GraphContext, node: OnnxNode, body: onnx.GraphProto, trips: int, condition: Any,
                   carried: list[Any]) -> list[Any] | None:
    """The Loop's outputs through one ``Loop`` node, or None when the loop must be unrolled
    (see the module docs).  ``condition`` is the loop's initial condition (None: true)."""
    initial_known = condition is None or isinstance(condition, Folded)
    try:
        built = _Body(ctx, node, body, carried, running=not initial_known)
        if built.running is None and not isinstance(built.condition, Folded):
            built = _Body(ctx, node, body, carried, running=True)
    except UnsupportedFeature:
        return None  # e.g. the iteration number is needed on the host: only unrolling gives it
    if isinstance(built.condition, Folded) and not bool(np.asarray(built.condition.array).reshape(-1)[0]):
        return None  # one iteration: unrolling folds it
    if built.running is not None and built.scans:
        return None  # scan outputs of a data-dependent length: the unrolled form explains the refusal
    if any(built.ctx.shape(new) != built.ctx.shape(old) or built.ctx.dtype(new) != built.ctx.dtype(old)
           for new, old in zip(built.new, built.carried)):
        return None  # a carried value changes shape between iterations
    region, initial = _region(ctx, built, trips, condition, carried)
    outputs = ctx.op("Loop", *initial, *built.scope.invariants.values(), outputs=len(region.output_descs),
                     region=region)
    produced = list(outputs) if isinstance(outputs, tuple) else [outputs]
    extra = len(region.carried_inputs) - len(carried)
    return produced[extra:]


def _region(ctx: GraphContext, built: _Body, trips: int, condition: Any, carried: list[Any]
            ) -> tuple[LoopRegion, list[Any]]:
    """The region (the body graph's outputs declared) and the initial values of its carried inputs."""
    body, graph = built.ctx, built.graph
    carried_in: list[str] = []
    carried_out: list[str] = []
    initial: list[Any] = []
    new_values = list(built.new)
    if built.running is not None:
        running = built.running
        new_values = [body.op("Where", running, new, old) for new, old in zip(new_values, built.carried)]
        flag = cast_to(body, built.condition, DType.bool)
        if body.shape(flag):
            flag = body.op("Reshape", flag, shape=[])
        _declare(body, graph, "loop.running_next", body.op("LogicalAnd", running, flag))
        carried_in.append(_RUNNING)
        carried_out.append("loop.running_next")
        start = Folded.of(np.array(True)) if condition is None else cast_to(ctx, condition, DType.bool)
        if ctx.shape(start):
            start = ctx.op("Reshape", start, shape=[])
        initial.append(start)
    if built.reads_iteration():
        _declare(body, graph, "loop.iteration_next", body.op("Add", built.iteration, Folded.of(np.array(1, np.int64))))
        carried_in.append(_ITERATION)
        carried_out.append("loop.iteration_next")
        initial.append(Folded.of(np.array(0, np.int64)))
    for k, (value, start) in enumerate(zip(new_values, carried)):
        _declare(body, graph, f"loop.carried{k}_next", value)
        carried_in.append(f"loop.carried{k}")
        carried_out.append(f"loop.carried{k}_next")
        initial.append(start)
    scans = []
    for k, value in enumerate(built.scans):
        _declare(body, graph, f"loop.scan{k}", value)
        scans.append(f"loop.scan{k}")
    region = LoopRegion(graph, tuple(carried_in), tuple(carried_out), tuple(built.scope.invariants),
                        tuple(scans), trips, "loop.running_next" if built.running is not None else None)
    return region, initial


def _declare(body: GraphContext, graph: Graph, name: str, value: Any) -> None:
    """``value`` as the body output ``name``, written by a node of the body (a constant, an input
    or another output's value is copied: every output then has storage of its own)."""
    produced = body.device_value(value)
    if produced.kind in ("input", "constant") or produced.name in graph.outputs.values():
        label, body.label = body.label, f"{body.label}/{name}"
        copied = body.op("InplaceCopy", produced)
        body.label = label
        assert isinstance(copied, Value)
        produced = copied
    graph.output(name, produced)
