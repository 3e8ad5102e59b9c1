"""Converters for the ONNX reductions the core mapping leaves out, and ``Mean``.

``ReduceMin`` (``Amin``), ``ReduceProd`` (``Prod``), and compositions: ``ReduceL1`` =
``ReduceSum(Abs)``, ``ReduceL2`` = ``Sqrt(ReduceSum(x * x))``, ``ReduceSumSquare`` =
``ReduceSum(x * x)``, ``ReduceLogSum`` = ``Log(ReduceSum)``, ``ReduceLogSumExp`` =
``Log(ReduceSum(Exp(x - max))) + max`` (stable for large inputs).  Results keep the input's
type, as ONNX says (integer L2 rounds toward zero through ``Cast``).  Axes come from the
attribute before opset 18 and from the optional input from 18 on; no axes reduce everything,
unless ``noop_with_empty_axes`` (18+) makes the op the identity.  Reducing an empty dim gives
ONNX's identity element (+inf / the largest value for Min, 1 for Prod, 0 for sums).

``Mean`` (opsets 8, 13) is the broadcast sum of its inputs divided by their count.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce
from typing import Any

import numpy as np

from ..dtypes import DType
from .context import BuildContext, OnnxNode, normalize_axes, static_ints
from .convert_math import cast_to, same_dtype
from .mapping import converts

__all__: list[str] = []

Reducer = Callable[[BuildContext, Any, list[int], bool], Any]


def _axes(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[int] | None:
    if node.since_version < 18:
        axes = node.attr("axes")
        return None if axes is None else [int(a) for a in axes]
    if len(inputs) < 2 or inputs[1] is None:
        return None
    return static_ints(ctx, inputs[1], f"{node.op_type}'s axes")


def _highest(dtype: DType) -> Any:
    if dtype == DType.bool:
        return True
    if dtype.is_floating:
        return np.inf
    return np.iinfo(dtype.numpy).max


def _reduction(reducer: Reducer, empty_fill: Callable[[DType], Any]) -> Any:
    def convert(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
        x = inputs[0]
        shape, dtype = ctx.shape(x), ctx.dtype(x)
        axes = _axes(ctx, node, inputs)
        keep = bool(node.attr("keepdims", 1))
        if not axes:
            if node.since_version >= 18 and node.attr("noop_with_empty_axes", 0):
                return [x]
            axes = list(range(len(shape)))
        dims = sorted(set(normalize_axes(node, axes, len(shape))))
        out_shape = [1 if i in dims else d for i, d in enumerate(shape) if keep or i not in dims]
        if any(shape[d] == 0 for d in dims):
            return [ctx.constant(np.full(out_shape, empty_fill(dtype), dtype=dtype.numpy))]
        return [cast_to(ctx, reducer(ctx, x, dims, keep), dtype)]
    return convert


def _sum(ctx: BuildContext, x: Any, dims: list[int], keep: bool) -> Any:
    return ctx.op("ReduceSum", x, dims=dims, keepDims=keep, dtype=ctx.dtype(x))


def _min(ctx: BuildContext, x: Any, dims: list[int], keep: bool) -> Any:
    return ctx.op("Amin", x, dim=dims, keepdim=keep)


def _prod(ctx: BuildContext, x: Any, dims: list[int], keep: bool) -> Any:
    return ctx.op("Prod", x, dim=dims, keepDim=keep, dtype=ctx.dtype(x) if ctx.dtype(x).is_floating else None)


def _l1(ctx: BuildContext, x: Any, dims: list[int], keep: bool) -> Any:
    return _sum(ctx, ctx.op("Abs", x), dims, keep)


def _sum_square(ctx: BuildContext, x: Any, dims: list[int], keep: bool) -> Any:
    return _sum(ctx, ctx.op("Mul", x, x), dims, keep)


def _l2(ctx: BuildContext, x: Any, dims: list[int], keep: bool) -> Any:
    return ctx.op("Sqrt", _sum_square(ctx, x, dims, keep))


def _log_sum(ctx: BuildContext, x: Any, dims: list[int], keep: bool) -> Any:
    return ctx.op("Log", _sum(ctx, x, dims, keep))


def _log_sum_exp(ctx: BuildContext, x: Any, dims: list[int], keep: bool) -> Any:
    if not ctx.dtype(x).is_floating:
        return _log_sum(ctx, ctx.op("Exp", x), dims, keep)
    peak = ctx.op("Amax", x, dim=dims, keepdim=True)
    # An all -inf row has peak -inf: subtracting it would give nan, so shift by 0 there instead.
    finite = ctx.op("Where", ctx.op("EqTensor", peak, ctx.constant(np.array(-np.inf, ctx.dtype(x).numpy))),
                    ctx.constant(np.zeros((), ctx.dtype(x).numpy)), peak)
    total = _sum(ctx, ctx.op("Exp", ctx.op("Sub", x, finite)), dims, keep)
    shift = finite if keep else ctx.op("Reshape", finite, shape=list(ctx.shape(total)))
    return ctx.op("Add", ctx.op("Log", total), shift)


_ZERO: Callable[[DType], Any] = lambda dtype: 0
_FAMILY = {
    "ReduceMin": ((11, 12, 13, 18, 20), _min, _highest),
    "ReduceProd": ((11, 13, 18), _prod, lambda dtype: 1),
    "ReduceL1": ((11, 13, 18), _l1, _ZERO),
    "ReduceL2": ((11, 13, 18), _l2, _ZERO),
    "ReduceSumSquare": ((11, 13, 18), _sum_square, _ZERO),
    "ReduceLogSum": ((11, 13, 18, 28), _log_sum, lambda dtype: -np.inf),
    "ReduceLogSumExp": ((11, 13, 18, 28), _log_sum_exp, lambda dtype: -np.inf),
}
for _op_type, (_versions, _reducer, _fill) in _FAMILY.items():
    converts(_op_type, *_versions)(_reduction(_reducer, _fill))


@converts("Mean", 8, 13)
def convert_mean(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    present = [value for value in inputs if value is not None]
    if not present:
        raise ValueError(f"{node.describe()}: needs at least one input")
    dtype = same_dtype(ctx, node, present)
    total = reduce(lambda left, right: ctx.op("Add", left, right), present)
    if len(present) == 1:
        return [total]
    return [cast_to(ctx, ctx.op("Divs", total, other=float(len(present)) if dtype.is_floating else len(present)),
                    dtype)]
