"""Control flow: ``If``, ``Loop`` and ``Scan``.

- ``If``: when the condition is known (it folds from shapes or constants, or comes from a
  host-value input), only the chosen branch is emitted.  Otherwise both branches are emitted
  and each output is selected on the device with ``Where`` (the branches must then give
  outputs of one shape and dtype).
- ``Loop`` and ``Scan`` of more than :data:`UNROLL_TRIPS` iterations become one ``Loop``
  node holding the body, imported once (:mod:`aclpipe.onnx.loop_region`), which the Pipeline
  runs as control flow (:mod:`aclpipe.pipeline.loop`): the graph grows with the model, not
  with the trip count, and an exit computed on the device is read back once per block of
  iterations.
- Shorter ones, and those the region form cannot hold (the body needs the iteration number on
  the host, a carried value changes shape, a device-computed exit with scan outputs), are
  *unrolled*: the body is emitted once per iteration, with the iteration number and the
  loop-carried values of that iteration.  Each iteration then folds (the iteration number is
  a constant, so shape arithmetic on it disappears) and the planner overlaps independent work
  of neighbouring iterations across streams.  Its cost is graph size, bounded by
  ``OnnxLimits.iterations`` and ``OnnxLimits.graph_nodes``.  An unrolled Loop whose condition
  is computed on the device has no scan outputs: all ``M`` iterations are emitted, and a
  running device flag (``Where``) freezes the loop-carried values once the condition turns
  false.

A Loop's trip count must be known at specialization (a constant, shape arithmetic, or a host
value); ``Scan``'s is the length of its scan inputs, always known.  Subgraphs read outer
values by name through ``node.scope`` (nested ones too).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from ..dtypes import DType
from .context import (
    BuildContext,
    OnnxNode,
    UnsupportedFeature,
    normalize_axis,
    onnx_dtype,
    static_ints,
)
from .convert_math import cast_to
from .graph_context import GraphContext, HostValueNeeded
from .loop_region import loop_as_region, scan_as_region
from .mapping import converts

__all__: list[str] = []

_VERSIONS = (11, 13, 16, 19, 21, 23, 24, 25)
_SCAN_VERSIONS = (11, 16, 19, 21, 23, 24, 25)
#: A Loop without a trip count runs until its condition turns false; this bounds it where the
#: context sets no limit of its own (the eager evaluator), and as a Loop node.
_UNBOUNDED_LOOP_LIMIT = 1_000_000
#: Loops of at most this many trips are unrolled (each iteration folds on its own, and the
#: planner overlaps neighbouring iterations); longer ones become one ``Loop`` node.
UNROLL_TRIPS = 16


# -- If ----------------------------------------------------------------------------------------
@converts("If", *_VERSIONS)
def convert_if(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    condition = _known_flag(ctx, node, inputs[0], "If's condition")
    then_branch, else_branch = node.attr("then_branch"), node.attr("else_branch")
    if condition is not None:
        chosen, label = (then_branch, "then") if condition else (else_branch, "else")
        return _check_count(node, ctx.subgraph(chosen, {}, node.scope, label), chosen)
    then_values = _check_count(node, ctx.subgraph(then_branch, {}, node.scope, "then"), then_branch)
    else_values = _check_count(node, ctx.subgraph(else_branch, {}, node.scope, "else"), else_branch)
    flag = _scalar_flag(ctx, node, inputs[0])
    selected = []
    for index, (taken, other) in enumerate(zip(then_values, else_values)):
        if ctx.shape(taken) != ctx.shape(other) or ctx.dtype(taken) != ctx.dtype(other):
            raise node.unsupported(
                f"output {index}: the condition is computed on the device, so both branches run and the result "
                f"is selected there, which needs one shape and dtype; then gives {ctx.dtype(taken).name}"
                f"{list(ctx.shape(taken))}, else {ctx.dtype(other).name}{list(ctx.shape(other))} (make the "
                "condition a host value: an input, or computed from shapes)")
        selected.append(ctx.op("Where", flag, taken, other))
    return selected


def _check_count(node: OnnxNode, values: list[Any], branch: onnx.GraphProto) -> list[Any]:
    if len(values) != node.num_outputs:
        raise ValueError(f"{node.describe()}: branch {branch.name!r} has {len(values)} outputs, the node "
                         f"{node.num_outputs}")
    return values


# -- Loop --------------------------------------------------------------------------------------
@converts("Loop", *_VERSIONS)
def convert_loop(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    body: onnx.GraphProto = node.attr("body")
    trip_value = inputs[0] if inputs else None
    condition = inputs[1] if len(inputs) > 1 else None
    carried = list(inputs[2:])
    scan_count = len(body.output) - 1 - len(carried)
    if len(body.input) != 2 + len(carried) or scan_count < 0:
        raise ValueError(f"{node.describe()}: the body takes {len(body.input)} inputs and gives {len(body.output)} "
                         f"outputs; with {len(carried)} loop-carried values it must take {2 + len(carried)} "
                         f"and give at least {1 + len(carried)}")
    trips = None if trip_value is None else _trip_count(ctx, node, trip_value)
    if trips is not None and trips > UNROLL_TRIPS:
        outputs = _as_region(ctx, node, body, trips, condition, carried)
        if outputs is not None:
            return outputs
    initial = (condition, carried)
    loop = _Unrolled(ctx, node, body, carried, scan_count)
    known = True if condition is None else _known_flag(ctx, node, condition, "Loop's condition")
    if known is None:
        if trips is None and (outputs := _as_region(ctx, node, body, None, *initial)) is not None:
            return outputs
        loop.start_masking(condition, trips)
    # ``known`` is None once the condition is computed on the device: then all M iterations run.
    while known is not False and (trips is None or loop.iteration < trips):
        if loop.iteration >= _UNBOUNDED_LOOP_LIMIT:
            raise ValueError(f"{node.describe()}: more than {_UNBOUNDED_LOOP_LIMIT} iterations")
        new_condition = loop.step(condition)
        condition = new_condition
        if loop.running is None:
            known = _known_flag(ctx, node, new_condition, "Loop's condition")
            if known is None:
                # Without M, the exit turned out to be computed on the device: the whole loop
                # runs as a Loop node instead (what was unrolled so far is pruned).
                if trips is None and (outputs := _as_region(ctx, node, body, None, *initial)) is not None:
                    return outputs
                loop.start_masking(new_condition, trips)
    return loop.outputs()


def _as_region(ctx: BuildContext, node: OnnxNode, body: onnx.GraphProto, trips: int | None, condition: Any,
               carried: list[Any]) -> list[Any] | None:
    """The loop as one Loop node, or None where it must unroll (see the module docs).  Without
    ``trips`` only an exit computed on the device takes it (a folded one decides the count)."""
    if not isinstance(ctx, GraphContext):
        return None
    start = True if condition is None else _known_flag(ctx, node, condition, "Loop's condition")
    if start is False:
        return None
    return loop_as_region(ctx, node, body, _UNBOUNDED_LOOP_LIMIT if trips is None else trips,
                          None if start else condition, carried, device_exit_only=trips is None)


def _trip_count(ctx: BuildContext, node: OnnxNode, value: Any) -> int:
    try:
        (trips,) = static_ints(ctx, value, "Loop's trip count M")
    except ValueError:
        raise ValueError(f"{node.describe()}: the trip count M must hold one element") from None
    return max(trips, 0)


class _Unrolled:
    """A Loop being unrolled: the carried values, the scan outputs so far, and (once the
    condition is computed on the device) the running device flag."""

    def __init__(self, ctx: BuildContext, node: OnnxNode, body: onnx.GraphProto, carried: list[Any],
                 scan_count: int):
        self.ctx, self.node, self.body = ctx, node, body
        self.carried = carried
        self.scans: list[list[Any]] = [[] for _ in range(scan_count)]
        self.running: Any = None
        self.iteration = 0

    def start_masking(self, condition: Any, trips: int | None) -> None:
        if self.scans or trips is None:
            what = "it has scan outputs" if self.scans else "it has no trip count M"
            raise self.node.unsupported(f"the loop condition is computed on the device and {what}, so its "
                                        "iteration count is data-dependent; aclpipe prepares whole graphs "
                                        "(make the condition a host value, or give M)")
        self.running = _scalar_flag(self.ctx, self.node, condition)

    def step(self, condition: Any) -> Any:
        ctx, names = self.ctx, [value.name for value in self.body.input]
        flag = condition if self.running is None else self.running
        feeds = {names[0]: ctx.constant(np.array(self.iteration, np.int64)),
                 names[1]: flag if flag is not None else ctx.constant(np.array(True))}
        feeds.update(zip(names[2:], self.carried))
        outputs = ctx.subgraph(self.body, feeds, self.node.scope, f"iter{self.iteration}")
        new_condition, count = outputs[0], len(self.carried)
        if self.running is None:
            self.carried = list(outputs[1:1 + count])
        else:
            self.carried = [self._keep_while_running(index, new, old)
                            for index, (new, old) in enumerate(zip(outputs[1:1 + count], self.carried))]
            self.running = ctx.op("LogicalAnd", self.running, _scalar_flag(ctx, self.node, new_condition))
        for values, value in zip(self.scans, outputs[1 + count:]):
            values.append(value)
        self.iteration += 1
        return new_condition

    def _keep_while_running(self, index: int, new: Any, old: Any) -> Any:
        ctx = self.ctx
        if ctx.shape(new) != ctx.shape(old) or ctx.dtype(new) != ctx.dtype(old):
            raise self.node.unsupported(f"loop-carried value {index} changes from {ctx.dtype(old).name}"
                                        f"{list(ctx.shape(old))} to {ctx.dtype(new).name}{list(ctx.shape(new))}, "
                                        "and the loop condition is computed on the device")
        return ctx.op("Where", self.running, new, old)

    def outputs(self) -> list[Any]:
        declared = self.body.output[1 + len(self.carried):]
        return self.carried + [_stack(self.ctx, self.node, values, 0, info)
                               for values, info in zip(self.scans, declared)]


# -- Scan --------------------------------------------------------------------------------------
@converts("Scan", *_SCAN_VERSIONS)
def convert_scan(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    body: onnx.GraphProto = node.attr("body")
    scan_count = int(node.attr("num_scan_inputs"))
    state_count = len(inputs) - scan_count
    output_count = len(body.output) - state_count
    if scan_count < 1 or state_count < 0 or output_count < 0 or len(body.input) != len(inputs):
        raise ValueError(f"{node.describe()}: {len(inputs)} inputs with num_scan_inputs={scan_count} do not fit a "
                         f"body of {len(body.input)} inputs and {len(body.output)} outputs")
    states, sequences = list(inputs[:state_count]), inputs[state_count:]
    in_axes = _per_item(node, "scan_input_axes", scan_count)
    in_axes = [normalize_axis(node, axis, len(ctx.shape(x)), "scan_input_axes") for axis, x in zip(in_axes, sequences)]
    in_reverse = _per_item(node, "scan_input_directions", scan_count)
    lengths = {ctx.shape(x)[axis] for x, axis in zip(sequences, in_axes)}
    if len(lengths) != 1:
        raise ValueError(f"{node.describe()}: the scan inputs have different lengths {sorted(lengths)}")
    steps = lengths.pop()
    out_axes = _per_item(node, "scan_output_axes", output_count)
    out_reverse = _per_item(node, "scan_output_directions", output_count)
    if isinstance(ctx, GraphContext) and steps > UNROLL_TRIPS:
        outputs = scan_as_region(ctx, node, body, states, sequences, in_axes, in_reverse, out_axes, out_reverse,
                                 steps)
        if outputs is not None:
            return outputs
    names = [value.name for value in body.input]
    collected: list[list[Any]] = [[] for _ in range(output_count)]
    for step in range(steps):
        items = [_take(ctx, x, axis, steps - 1 - step if reverse else step)
                 for x, axis, reverse in zip(sequences, in_axes, in_reverse)]
        outputs = ctx.subgraph(body, dict(zip(names, states + items)), node.scope, f"iter{step}")
        states = list(outputs[:state_count])
        for values, value in zip(collected, outputs[state_count:]):
            values.append(value)
    scanned = [_stack(ctx, node, values[::-1] if reverse else values, axis, info)
               for values, axis, reverse, info in zip(collected, out_axes, out_reverse, body.output[state_count:])]
    return states + scanned


def _per_item(node: OnnxNode, name: str, count: int) -> list[int]:
    values = node.attr(name)
    items = [0] * count if values is None else [int(value) for value in values]
    if len(items) != count:
        raise ValueError(f"{node.describe()}: {name} has {len(items)} entries, expected {count}")
    return items


def _take(ctx: BuildContext, x: Any, axis: int, index: int) -> Any:
    """``x``'s slice ``index`` along ``axis``, with that axis dropped."""
    shape = list(ctx.shape(x))
    picked = ctx.op("Slice", x, dim=axis, start=index, end=index + 1, step=1)
    return ctx.op("Reshape", picked, shape=shape[:axis] + shape[axis + 1:])


# -- shared ------------------------------------------------------------------------------------
def _stack(ctx: BuildContext, node: OnnxNode, values: Sequence[Any], axis: int, info: onnx.ValueInfoProto) -> Any:
    """The per-iteration ``values`` stacked along a new ``axis`` (a scan output)."""
    if not values:
        return ctx.constant(_empty_scan_output(node, info))
    shapes = {tuple(ctx.shape(value)) for value in values}
    if len(shapes) != 1:
        raise ValueError(f"{node.describe()}: scan output {info.name!r} changes shape across iterations "
                         f"({sorted(shapes)})")
    shape = list(shapes.pop())
    axis = normalize_axis(node, axis, len(shape) + 1, "scan_output_axes")
    expanded = shape[:axis] + [1] + shape[axis:]
    pieces = [ctx.op("Reshape", value, shape=expanded) for value in values]
    return pieces[0] if len(pieces) == 1 else ctx.op("Cat", *pieces, dim=axis)


def _empty_scan_output(node: OnnxNode, info: onnx.ValueInfoProto) -> np.ndarray:
    """A scan output of zero iterations: its shape must be declared in the body."""
    tensor = info.type.tensor_type
    fixed = all(dim.WhichOneof("value") == "dim_value" and dim.dim_value >= 0 for dim in tensor.shape.dim)
    if not tensor.HasField("shape") or not fixed:
        raise node.unsupported(f"scan output {info.name!r} of a loop that runs zero times: its per-iteration "
                               "shape is not declared in the body")
    return np.zeros([0, *(int(dim.dim_value) for dim in tensor.shape.dim)], onnx_dtype(tensor.elem_type, node).numpy)


def _known_flag(ctx: BuildContext, node: OnnxNode, value: Any, what: str) -> bool | None:
    """A one-element condition's truth when the context knows it, else None (computed on the
    device).  A condition that a host value would settle makes that input a host value."""
    try:
        array = np.asarray(ctx.static_value(value, what))
    except HostValueNeeded:
        raise
    except UnsupportedFeature:
        return None
    if array.size != 1:
        raise ValueError(f"{node.describe()}: {what} must hold one element, it has shape {list(array.shape)}")
    return bool(array.reshape(-1)[0])


def _scalar_flag(ctx: BuildContext, node: OnnxNode, value: Any) -> Any:
    """A device condition as a rank-0 bool (``Where`` broadcasts it over any output)."""
    shape = list(ctx.shape(value))
    if int(np.prod(shape)) != 1:
        raise ValueError(f"{node.describe()}: the condition must hold one element, it has shape {shape}")
    value = cast_to(ctx, value, DType.bool)
    return value if not shape else ctx.op("Reshape", value, shape=[])
