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
host (shape arithmetic on it), or the body's next condition is known to be false; and when
nothing in the loop comes from the device (constant carried values, no outer device values,
no device exit), since unrolling then folds the whole loop into constants.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from ..dtypes import DType
from ..graph import Graph, Value
from ..graph.region import LoopRegion
from .context import OnnxNode, UnsupportedFeature, normalize_axis
from .convert_math import cast_to
from .fold import Folded
from .graph_context import GraphContext

__all__ = ["loop_as_region", "scan_as_region"]

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
    """A body graph being built: its graph, context and outer scope."""

    def __init__(self, ctx: GraphContext, node: OnnxNode):
        self.graph = Graph(f"{ctx.label}/body")
        self.ctx = GraphContext(self.graph, limits=ctx.limits, opsets=ctx.opsets)
        self.ctx.label = ctx.label
        self.scope = _OuterScope(node.scope, self.graph)
        self.carried_in: list[str] = []
        self.carried_out: list[str] = []
        self.scans: list[str] = []

    def emit(self, body: onnx.GraphProto, feeds: Mapping[str, Any]) -> list[Any]:
        """The ONNX body's outputs, its inputs bound to ``feeds``."""
        return self.ctx.subgraph(body, feeds, self.scope, "body")

    def carry(self, name_in: str, value: Any) -> None:
        """Body input ``name_in`` becomes ``value`` for the next iteration."""
        name_out = f"{name_in}_next"
        self._declare(name_out, value)
        self.carried_in.append(name_in)
        self.carried_out.append(name_out)

    def scan(self, value: Any) -> None:
        """``value`` is stacked over the iterations (the next scan output)."""
        name = f"loop.scan{len(self.scans)}"
        self._declare(name, value)
        self.scans.append(name)

    def keeps_shapes(self, new: Sequence[Any], old: Sequence[Any]) -> bool:
        ctx = self.ctx
        return all(ctx.shape(a) == ctx.shape(b) and ctx.dtype(a) == ctx.dtype(b) for a, b in zip(new, old))

    def _declare(self, name: str, value: Any) -> None:
        """``value`` as the body output ``name``, written by a node of the body (a constant, an
        input or another output's value is copied: every output then has storage of its own)."""
        body, graph = self.ctx, self.graph
        produced = body.device_value(value)
        if produced.kind in ("input", "constant") or produced.name in graph.outputs.values():
            label, body.label = body.label, f"{body.label}/{name}"
            copied = body.op("InplaceCopy", produced)
            body.label = label
            assert isinstance(copied, Value)
            produced = copied
        graph.output(name, produced)


class _LoopBody(_Body):
    """A Loop's body: ``(iteration, condition, carried...) -> (condition, carried..., scans...)``."""

    def __init__(self, ctx: GraphContext, node: OnnxNode, body: onnx.GraphProto, carried: list[Any],
                 running: bool):
        super().__init__(ctx, node)
        names = [value.name for value in body.input]
        self.iteration = self.graph.input(_ITERATION, (), DType.int64)
        self.running = self.graph.input(_RUNNING, (), DType.bool) if running else None
        self.carried = [self.graph.input(f"loop.carried{k}", ctx.shape(value), ctx.dtype(value))
                        for k, value in enumerate(carried)]
        feeds: dict[str, Any] = {names[0]: self.iteration,
                                 names[1]: self.running if running else Folded.of(np.array(True))}
        feeds.update(zip(names[2:], self.carried))
        outputs = self.emit(body, feeds)
        self.condition, self.new = outputs[0], outputs[1:1 + len(carried)]
        self.scan_values = outputs[1 + len(carried):]

    def reads_iteration(self) -> bool:
        return any(_ITERATION in node.inputs for node in self.graph.nodes)


def loop_as_region(ctx: GraphContext, node: OnnxNode, body: onnx.GraphProto, trips: int, condition: Any,
                   carried: list[Any], *, device_exit_only: bool = False) -> list[Any] | None:
    """The Loop's outputs through one ``Loop`` node, or None when the loop must be unrolled
    (see the module docs).  ``condition`` is the loop's initial condition (None: true);
    ``device_exit_only``: None as well unless the exit is computed on the device (a loop without
    a trip count whose condition folds runs as long as folding says)."""
    initial_known = condition is None or isinstance(condition, Folded)
    try:
        built = _LoopBody(ctx, node, body, carried, running=not initial_known)
        if built.running is None and not isinstance(built.condition, Folded):
            built = _LoopBody(ctx, node, body, carried, running=True)
    except UnsupportedFeature:
        return None  # e.g. the iteration number is needed on the host: only unrolling gives it
    if device_exit_only and built.running is None:
        return None
    if (built.running is None and not built.scope.invariants and all(isinstance(v, Folded) for v in carried)
            and trips <= ctx.limits.iterations):
        return None  # nothing in it comes from the device: unrolling folds the whole loop
    if isinstance(built.condition, Folded) and not bool(np.asarray(built.condition.array).reshape(-1)[0]):
        return None  # one iteration: unrolling folds it
    if built.running is not None and built.scan_values:
        return None  # scan outputs of a data-dependent length: the unrolled form explains the refusal
    if not built.keeps_shapes(built.new, built.carried):
        return None  # a carried value changes shape between iterations
    initial = _declare_loop(ctx, built, condition, carried)
    region = LoopRegion(built.graph, tuple(built.carried_in), tuple(built.carried_out), tuple(built.scope.invariants),
                        tuple(built.scans), trips, "loop.running_next" if built.running is not None else None)
    outputs = ctx.op("Loop", *initial, *built.scope.invariants.values(), outputs=len(region.output_descs),
                     region=region)
    produced = list(outputs) if isinstance(outputs, tuple) else [outputs]
    return produced[len(region.carried_inputs) - len(carried):]


def _declare_loop(ctx: GraphContext, built: _LoopBody, condition: Any, carried: list[Any]) -> list[Any]:
    """Declare the body's outputs (the running flag and the kept values when the exit is on the
    device, the iteration counter when the body reads it); returns the carried inputs' initial values."""
    body, initial = built.ctx, []
    new_values = list(built.new)
    if built.running is not None:
        running = built.running
        new_values = [body.op("Where", running, new, old) for new, old in zip(new_values, built.carried)]
        flag = cast_to(body, built.condition, DType.bool)
        if body.shape(flag):
            flag = body.op("Reshape", flag, shape=[])
        built.carry(_RUNNING, body.op("LogicalAnd", running, flag))
        start = Folded.of(np.array(True)) if condition is None else cast_to(ctx, condition, DType.bool)
        initial.append(ctx.op("Reshape", start, shape=[]) if ctx.shape(start) else start)
    if built.reads_iteration():
        built.carry(_ITERATION, body.op("Add", built.iteration, Folded.of(np.array(1, np.int64))))
        initial.append(Folded.of(np.array(0, np.int64)))
    for k, (value, start) in enumerate(zip(new_values, carried)):
        built.carry(f"loop.carried{k}", value)
        initial.append(start)
    for value in built.scan_values:
        built.scan(value)
    return initial


def scan_as_region(ctx: GraphContext, node: OnnxNode, body: onnx.GraphProto, states: list[Any],
                   sequences: Sequence[Any], in_axes: Sequence[int], in_reverse: Sequence[int],
                   out_axes: Sequence[int], out_reverse: Sequence[int], steps: int) -> list[Any] | None:
    """A Scan's outputs through one ``Loop`` node fed one slice of each sequence per iteration,
    or None when it must be unrolled (see the module docs)."""
    built = _Body(ctx, node)
    graph = built.graph
    carried = [graph.input(f"loop.carried{k}", ctx.shape(value), ctx.dtype(value)) for k, value in enumerate(states)]
    slices = []
    for j, (sequence, axis) in enumerate(zip(sequences, in_axes)):
        shape = list(ctx.shape(sequence))
        slices.append(graph.input(f"loop.slice{j}", shape[:axis] + shape[axis + 1:], ctx.dtype(sequence)))
    try:
        outputs = built.emit(body, dict(zip([value.name for value in body.input], carried + slices)))
    except UnsupportedFeature:
        return None
    new, scans = outputs[:len(states)], outputs[len(states):]
    if not built.keeps_shapes(new, carried):
        return None
    for k, value in enumerate(new):
        built.carry(f"loop.carried{k}", value)
    for value in scans:
        built.scan(value)
    axes = [normalize_axis(node, axis, len(built.ctx.shape(value)) + 1, "scan_output_axes")
            for axis, value in zip(out_axes, scans)]
    region = LoopRegion(graph, tuple(built.carried_in), tuple(built.carried_out), tuple(built.scope.invariants),
                        tuple(built.scans), steps, None, scan_inputs=tuple(value.name for value in slices),
                        scan_input_axes=tuple(in_axes), scan_input_reverse=tuple(bool(r) for r in in_reverse))
    produced = ctx.op("Loop", *states, *built.scope.invariants.values(), *sequences,
                      outputs=len(region.output_descs), region=region)
    values = list(produced) if isinstance(produced, tuple) else [produced]
    stacked = [_placed(ctx, value, axis, bool(reverse), steps)
               for value, axis, reverse in zip(values[len(states):], axes, out_reverse)]
    return values[:len(states)] + stacked


def _placed(ctx: GraphContext, stacked: Any, axis: int, reverse: bool, steps: int) -> Any:
    """A scan output stacked first to last on axis 0, moved where the Scan puts it."""
    if reverse:
        stacked = ctx.op("IndexSelect", stacked, ctx.constant(np.arange(steps - 1, -1, -1, dtype=np.int64)), dim=0)
    if axis:
        rank = len(ctx.shape(stacked))
        stacked = ctx.op("Permute", stacked, dims=[*range(1, axis + 1), 0, *range(axis + 1, rank)])
    return stacked
