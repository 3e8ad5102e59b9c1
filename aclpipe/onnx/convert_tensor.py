"""Converters for ONNX data movement, indexing, reductions and constants.

Inputs that decide structure (Reshape's ``shape``, Slice's ``starts``/``ends``/``axes``/``steps``,
Split's ``split``, Reduce ``axes``, Expand's ``shape``, Squeeze/Unsqueeze ``axes``) are read at
build time with :meth:`BuildContext.static_value`; shapes are always known, so Shape, Size and
ConstantOfShape fold into constants.

Bridged differences: ONNX ``Gather`` takes any index shape and negative indices (the catalog's
``IndexSelect`` takes a 1-D index in ``[0, size)``, so indices are flattened and wrapped with
integer arithmetic on the device); ``Slice`` with a negative step selects its indices with
``IndexSelect``; ``Expand`` broadcasts both ways; empty ``ReduceMax`` gives the lowest value.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..dtypes import DType
from .context import BuildContext, OnnxNode, normalize_axes, normalize_axis, onnx_dtype, static_ints
from .convert_math import cast_to
from .mapping import converts

__all__: list[str] = []

_NEWER = (21, 23, 24, 25)  # versions that only added element types (Cast also has 28: float6)


# -- casts -----------------------------------------------------------------------------------
def _check_round_mode(node: OnnxNode) -> None:
    if node.attr("round_mode", "up") != "up":
        raise node.unsupported(f"round_mode={node.attr('round_mode')!r} (only for float8/float4 targets)")


@converts("Cast", 9, 13, 19, *_NEWER, 28)
def convert_cast(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    _check_round_mode(node)
    return [cast_to(ctx, inputs[0], onnx_dtype(int(node.attr("to")), node))]


@converts("CastLike", 15, 19, *_NEWER)
def convert_cast_like(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    _check_round_mode(node)
    return [cast_to(ctx, inputs[0], ctx.dtype(inputs[1]))]


# -- layout ----------------------------------------------------------------------------------
@converts("Transpose", 1, 13, *_NEWER)
def convert_transpose(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    rank = len(ctx.shape(inputs[0]))
    perm = node.attr("perm")
    perm = list(range(rank))[::-1] if perm is None else [int(p) for p in perm]
    if sorted(normalize_axes(node, perm, rank, "perm")) != list(range(rank)):
        raise ValueError(f"{node.describe()}: perm {perm} is not a permutation of {rank} dims")
    return [ctx.op("Permute", inputs[0], dims=perm)]


def _reshape(ctx: BuildContext, x: Any, shape: list[int] | tuple[int, ...]) -> Any:
    return x if tuple(ctx.shape(x)) == tuple(shape) else ctx.op("Reshape", x, shape=list(shape))


@converts("Reshape", 5, 13, 14, 19, *_NEWER)
def convert_reshape(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    x, shape_value = inputs
    source = ctx.shape(x)
    wanted = static_ints(ctx, shape_value, "Reshape's shape")
    allow_zero = node.since_version >= 14 and bool(node.attr("allowzero", 0))
    shape = [source[i] if dim == 0 and not allow_zero else dim for i, dim in enumerate(wanted)]
    if shape.count(-1) == 1:
        known = math.prod(d for d in shape if d != -1)
        shape[shape.index(-1)] = math.prod(source) // known if known else 0
    return [_reshape(ctx, x, shape)]


@converts("Flatten", 11, 13, *_NEWER)
def convert_flatten(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    shape = ctx.shape(inputs[0])
    axis = int(node.attr("axis", 1))
    if not -len(shape) <= axis <= len(shape):
        raise ValueError(f"{node.describe()}: axis {axis} is out of range for rank {len(shape)}")
    axis += len(shape) if axis < 0 else 0
    return [_reshape(ctx, inputs[0], [math.prod(shape[:axis]), math.prod(shape[axis:])])]


def _axes(ctx: BuildContext, node: OnnxNode, inputs: list[Any], input_since: int, what: str) -> list[int] | None:
    """``axes`` from the attribute (before ``input_since``) or the optional second input."""
    if node.since_version < input_since:
        axes = node.attr("axes")
        return None if axes is None else [int(a) for a in axes]
    if len(inputs) < 2 or inputs[1] is None:
        return None
    return static_ints(ctx, inputs[1], what)


@converts("Squeeze", 11, 13, *_NEWER)
def convert_squeeze(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    shape = ctx.shape(inputs[0])
    axes = _axes(ctx, node, inputs, 13, "Squeeze's axes")
    removed = {i for i, d in enumerate(shape) if d == 1} if axes is None else set(
        normalize_axes(node, axes, len(shape)))
    if any(shape[axis] != 1 for axis in removed):
        raise ValueError(f"{node.describe()}: cannot squeeze axes {sorted(removed)} of {list(shape)}")
    return [_reshape(ctx, inputs[0], [d for i, d in enumerate(shape) if i not in removed])]


@converts("Unsqueeze", 11, 13, *_NEWER)
def convert_unsqueeze(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    shape = list(ctx.shape(inputs[0]))
    axes = _axes(ctx, node, inputs, 13, "Unsqueeze's axes")
    if not axes:
        raise ValueError(f"{node.describe()}: axes are required")
    rank = len(shape) + len(axes)
    inserted = sorted(normalize_axes(node, axes, rank))
    for axis in inserted:
        shape.insert(axis, 1)
    return [_reshape(ctx, inputs[0], shape)]


@converts("Expand", 8, 13)
def convert_expand(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    x, shape_value = inputs
    target = np.broadcast_shapes(tuple(ctx.shape(x)), tuple(static_ints(ctx, shape_value, "Expand's shape")))
    if tuple(target) == tuple(ctx.shape(x)):
        return [x]
    return [ctx.op("Expand", x, size=list(target))]


@converts("Concat", 11, 13)
def convert_concat(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    present = [value for value in inputs if value is not None]
    axis = normalize_axis(node, int(node.attr("axis")), len(ctx.shape(present[0])))
    return [ctx.op("Cat", *present, dim=axis)]


@converts("Split", 11, 13, 18)
def convert_split(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    x = inputs[0]
    shape = ctx.shape(x)
    axis = normalize_axis(node, int(node.attr("axis", 0)), len(shape))
    if node.since_version < 13:
        sizes = node.attr("split")
    else:
        sizes = static_ints(ctx, inputs[1], "Split's split") if len(inputs) > 1 and inputs[1] is not None else None
    count = node.num_outputs
    if sizes is None:
        if node.since_version >= 18 and node.attr("num_outputs") is not None:
            count = int(node.attr("num_outputs"))
            chunk = -(-shape[axis] // count)
            sizes = [min(chunk, max(shape[axis] - chunk * i, 0)) for i in range(count)]
        elif shape[axis] % count:
            raise ValueError(f"{node.describe()}: dim {shape[axis]} does not split into {count} equal parts")
        else:
            sizes = [shape[axis] // count] * count
    sizes = [int(s) for s in sizes]
    parts = ctx.op("Split", x, outputs=len(sizes), splitSections=sizes, dim=axis)
    return list(parts) if len(sizes) > 1 else [parts]


def _slice_indices(start: int, end: int, step: int, size: int) -> range:
    """ONNX Slice's clamping: negatives wrap once, then clamp to the valid range for the step."""
    start += size if start < 0 else 0
    end += size if end < 0 else 0
    if step > 0:
        return range(min(max(start, 0), size), min(max(end, 0), size), step)
    return range(min(max(start, 0), size - 1), min(max(end, -1), size - 1), step)


@converts("Slice", 11, 13)
def convert_slice(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    x, starts, ends = inputs[0], inputs[1], inputs[2]
    axes_value = inputs[3] if len(inputs) > 3 else None
    steps_value = inputs[4] if len(inputs) > 4 else None
    starts = static_ints(ctx, starts, "Slice's starts")
    ends = static_ints(ctx, ends, "Slice's ends")
    rank = len(ctx.shape(x))
    axes = list(range(len(starts))) if axes_value is None else static_ints(ctx, axes_value, "Slice's axes")
    steps = [1] * len(starts) if steps_value is None else static_ints(ctx, steps_value, "Slice's steps")
    for axis, start, end, step in zip(normalize_axes(node, axes, rank), starts, ends, steps):
        if step == 0:
            raise ValueError(f"{node.describe()}: steps must not be 0")
        size = ctx.shape(x)[axis]
        picked = _slice_indices(start, end, step, size)
        if step > 0:
            if (picked.start, picked.stop, picked.step) != (0, size, 1):
                x = ctx.op("Slice", x, dim=axis, start=picked.start, end=max(picked.stop, picked.start),
                           step=step)
        else:
            x = ctx.op("IndexSelect", x, ctx.constant(np.array(list(picked), dtype=np.int64)), dim=axis)
    return [x]


# -- indexing ----------------------------------------------------------------------------------
@converts("Gather", 11, 13)
def convert_gather(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    data, indices = inputs
    shape, index_shape = ctx.shape(data), ctx.shape(indices)
    axis = normalize_axis(node, int(node.attr("axis", 0)), len(shape))
    flat = _reshape(ctx, indices, [math.prod(index_shape)])
    flat = _wrap_negative(ctx, flat, shape[axis])
    picked = ctx.op("IndexSelect", data, flat, dim=axis)
    return [_reshape(ctx, picked, [*shape[:axis], *index_shape, *shape[axis + 1:]])]


def _wrap_negative(ctx: BuildContext, index: Any, size: int) -> Any:
    """``index + size * (index < 0)`` with integer ops: ``min(-min(index, 0), 1)`` is 1 exactly
    for negative indices."""
    dtype = ctx.dtype(index).numpy
    zero, one = ctx.constant(np.zeros((), dtype)), ctx.constant(np.ones((), dtype))
    negative = ctx.op("Minimum", ctx.op("Neg", ctx.op("Minimum", index, zero)), one)
    return ctx.op("Add", index, ctx.op("Muls", negative, other=int(size)))


@converts("Where", 9, 16)
def convert_where(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    return [ctx.op("Where", *inputs)]


# -- reductions --------------------------------------------------------------------------------
def _reduce(kind: str, input_since: int) -> Any:
    def convert(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
        x = inputs[0]
        shape = ctx.shape(x)
        axes = _axes(ctx, node, inputs, input_since, f"Reduce{kind}'s axes")
        keep = bool(node.attr("keepdims", 1))
        if not axes:
            if node.since_version >= input_since and node.attr("noop_with_empty_axes", 0):
                return [x]
            axes = list(range(len(shape)))
        dims = sorted(set(normalize_axes(node, axes, len(shape))))
        out_shape = [1 if i in dims else d for i, d in enumerate(shape) if keep or i not in dims]
        return [_reduction(ctx, kind, x, dims, keep, out_shape)]
    return convert


def _reduction(ctx: BuildContext, kind: str, x: Any, dims: list[int], keep: bool, out_shape: list[int]) -> Any:
    dtype = ctx.dtype(x)
    empty = any(ctx.shape(x)[d] == 0 for d in dims)
    if kind == "Max":
        if empty and all(out_shape):
            return ctx.constant(np.full(out_shape, _lowest(dtype), dtype=dtype.numpy))  # max of nothing
        return ctx.op("Amax", x, dim=dims, keepdim=keep)
    if kind == "Sum":
        return ctx.op("ReduceSum", x, dims=dims, keepDims=keep, dtype=dtype)
    if dtype.is_floating:
        return ctx.op("Mean", x, dim=dims, keepDim=keep)
    return cast_to(ctx, ctx.op("Mean", x, dim=dims, keepDim=keep, dtype=DType.float32), dtype)


def _lowest(dtype: DType) -> Any:
    if dtype == DType.bool:
        return False
    if dtype.is_floating:
        return -np.inf
    return np.iinfo(dtype.numpy).min


converts("ReduceMean", 11, 13)(_reduce("Mean", 18))
converts("ReduceMean", 18)(_reduce("Mean", 18))
converts("ReduceMax", 11, 12, 13)(_reduce("Max", 18))
converts("ReduceMax", 18, 20)(_reduce("Max", 18))
converts("ReduceSum", 11, 13)(_reduce("Sum", 13))


# -- pass-through and constants ------------------------------------------------------------------
@converts("Identity", 1, 13, 14, 16, 19, *_NEWER)
def convert_identity(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    return [inputs[0]]


@converts("Dropout", 10, 12, 13, 22)
def convert_dropout(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    """Inference: the output is the input and the mask is all true.  Training mode is
    deterministic only with ratio 0 (the same result); other training is refused."""
    x = inputs[0]
    training = len(inputs) > 2 and inputs[2] is not None and bool(
        np.asarray(ctx.static_value(inputs[2], "Dropout's training_mode")).reshape(-1)[0])
    if training:
        ratio = 0.5 if len(inputs) < 2 or inputs[1] is None else float(
            np.asarray(ctx.static_value(inputs[1], "Dropout's ratio")).reshape(-1)[0])
        if ratio != 0.0:
            raise node.unsupported("training mode with a non-zero ratio (random masks)")
    outputs = [x]
    if node.num_outputs > 1 and node.wanted[1]:
        outputs.append(ctx.constant(np.ones(ctx.shape(x), dtype=np.bool_)))
    return outputs


@converts("Constant", 11, 12, 13, 19, *_NEWER)
def convert_constant(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    for name, make in (("value", np.asarray), ("value_float", lambda v: np.array(v, np.float32)),
                       ("value_floats", lambda v: np.array(v, np.float32)),
                       ("value_int", lambda v: np.array(v, np.int64)),
                       ("value_ints", lambda v: np.array(v, np.int64))):
        if node.attr(name) is not None:
            return [_constant(ctx, node, make(node.attr(name)))]
    given = ", ".join(sorted(node.attrs)) or "nothing"
    raise node.unsupported(f"a Constant given by {given} (strings and sparse tensors are not supported)")


def _constant(ctx: BuildContext, node: OnnxNode, array: np.ndarray) -> Any:
    if array.dtype == np.float64:
        raise node.unsupported("a float64 constant (not an NPU dtype)")
    try:
        return ctx.constant(array)
    except TypeError as error:
        raise node.unsupported(f"a constant of numpy dtype {array.dtype} ({error})") from None


@converts("Shape", 1, 13, 15, 19, *_NEWER)
def convert_shape(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    shape = list(ctx.shape(inputs[0]))
    rank = len(shape)
    start, end = int(node.attr("start", 0)), node.attr("end")
    end = rank if end is None else int(end)
    start, end = (min(max(v + rank if v < 0 else v, 0), rank) for v in (start, end))
    return [ctx.constant(np.array(shape[start:end], dtype=np.int64))]


@converts("Size", 1, 13, 19, *_NEWER)
def convert_size(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    return [ctx.constant(np.array(math.prod(ctx.shape(inputs[0])), dtype=np.int64))]


@converts("ConstantOfShape", 9, 20, *_NEWER)
def convert_constant_of_shape(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    shape = static_ints(ctx, inputs[0], "ConstantOfShape's input")
    if any(dim < 0 for dim in shape):
        raise ValueError(f"{node.describe()}: shape {shape} has a negative dim")
    value = node.attr("value")
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    if fill.size != 1:
        raise ValueError(f"{node.describe()}: value must hold one element, it holds {fill.size}")
    # Broadcast on the context rather than with np.full: the context sizes the result before it
    # allocates anything (folding small ones, computing large ones on the device).
    scalar = _constant(ctx, node, fill.reshape(()))
    return [scalar if not shape else ctx.op("Expand", scalar, size=list(shape))]
