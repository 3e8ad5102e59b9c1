"""Converters for ONNX's indexing and rearranging ops.

- ``GatherElements`` / ``ScatterElements``: the catalog's ``Gather`` / ``Scatter`` along
  ``axis``, negative indices wrapped on the device; ``reduction`` (16+: none/add/mul, 18+:
  max/min) becomes ``Scatter``'s ``reduce``.
- ``GatherND`` / ``ScatterND``: ``GatherNd`` (``batch_dims``, negative indices) and
  ``ScatterNd`` (``reduction``).
- ``OneHot``: ``depth`` known at build time; indices of any numeric type are cast to int64
  (truncating) and negative ones wrapped, then ``OneHot`` with ``values = [off, on]``.
- ``Trilu``: ``Triu``/``Tril`` with ``k`` known at build time.
- ``CumSum``: ``CumsumV2`` with ``axis`` known at build time.
- ``Einsum``: the catalog's ``Einsum``.
- ``DepthToSpace`` and ``SpaceToDepth`` (DCR and CRD): a reshape, a permute and a reshape.
- ``NonZero`` has a data-dependent output shape; see :mod:`aclpipe.onnx.convert_dynamic`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import DType
from .context import BuildContext, OnnxNode, normalize_axis, static_ints
from .convert_math import cast_to
from .convert_tensor import _reshape, _wrap_negative
from .mapping import converts

__all__: list[str] = []

_REDUCTIONS = {"none": 0, "add": 1, "mul": 2, "max": 3, "min": 4}


def _reduction(node: OnnxNode) -> int:
    name = node.attr("reduction", "none") or "none"
    if name not in _REDUCTIONS:
        raise ValueError(f"{node.describe()}: reduction must be one of {sorted(_REDUCTIONS)}, got {name!r}")
    return _REDUCTIONS[name]


@converts("GatherElements", 11, 13)
def convert_gather_elements(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    data, indices = inputs
    shape = ctx.shape(data)
    axis = normalize_axis(node, int(node.attr("axis", 0)), len(shape))
    return [ctx.op("Gather", data, _wrap_negative(ctx, indices, shape[axis]), dim=axis)]


@converts("ScatterElements", 11, 13, 16, 18)
def convert_scatter_elements(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    data, indices, updates = inputs
    shape = ctx.shape(data)
    axis = normalize_axis(node, int(node.attr("axis", 0)), len(shape))
    return [ctx.op("Scatter", data, _wrap_negative(ctx, indices, shape[axis]), updates, dim=axis,
                   reduce=_reduction(node))]


@converts("GatherND", 11, 12, 13)
def convert_gather_nd(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    return [ctx.op("GatherNd", *inputs, negativeIndexSupport=True, batchDims=int(node.attr("batch_dims", 0)))]


@converts("ScatterND", 11, 13, 16, 18)
def convert_scatter_nd(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    return [ctx.op("ScatterNd", *inputs, reduce=_reduction(node))]


@converts("OneHot", 11, 28)
def convert_one_hot(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    indices, depth_value, values = inputs
    depth = int(np.asarray(ctx.static_value(depth_value, "OneHot's depth")).reshape(-1)[0])
    if depth < 1:
        raise ValueError(f"{node.describe()}: depth must be at least 1, got {depth}")
    if ctx.dtype(indices) != DType.int64:
        indices = cast_to(ctx, indices, DType.int64)
    indices = _wrap_negative(ctx, indices, depth)
    off = ctx.op("Slice", values, dim=0, start=0, end=1, step=1)
    on = ctx.op("Slice", values, dim=0, start=1, end=2, step=1)
    return [ctx.op("OneHot", indices, on, off, numClasses=depth, axis=int(node.attr("axis", -1)))]


@converts("Trilu", 14)
def convert_trilu(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    x = inputs[0]
    k = static_ints(ctx, inputs[1], "Trilu's k")[0] if len(inputs) > 1 and inputs[1] is not None else 0
    return [ctx.op("Triu" if int(node.attr("upper", 1)) else "Tril", x, diagonal=k)]


@converts("CumSum", 11, 14)
def convert_cumsum(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    x, axis_value = inputs
    (axis,) = static_ints(ctx, axis_value, "CumSum's axis")
    axis = normalize_axis(node, axis, len(ctx.shape(x)))
    return [ctx.op("CumsumV2", x, dim=axis, exclusive=bool(node.attr("exclusive", 0)),
                   reverse=bool(node.attr("reverse", 0)))]


@converts("Einsum", 12, 28)
def convert_einsum(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    return [ctx.op("Einsum", *inputs, equation=str(node.attr("equation")))]


@converts("DepthToSpace", 11, 13, 28)
def convert_depth_to_space(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    x = inputs[0]
    n, c, h, w = ctx.shape(x)
    block = int(node.attr("blocksize"))
    if c % (block * block):
        raise ValueError(f"{node.describe()}: C={c} is not a multiple of blocksize^2={block * block}")
    depth = c // (block * block)
    if (node.attr("mode", "DCR") or "DCR") == "CRD":
        split, order = [n, depth, block, block, h, w], [0, 1, 4, 2, 5, 3]
    else:
        split, order = [n, block, block, depth, h, w], [0, 3, 4, 1, 5, 2]
    moved = ctx.op("Permute", _reshape(ctx, x, split), dims=order)
    return [_reshape(ctx, moved, [n, depth, h * block, w * block])]


@converts("SpaceToDepth", 1, 13, 28)
def convert_space_to_depth(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    x = inputs[0]
    n, c, h, w = ctx.shape(x)
    block = int(node.attr("blocksize"))
    if h % block or w % block:
        raise ValueError(f"{node.describe()}: H={h} and W={w} must be multiples of blocksize={block}")
    split = _reshape(ctx, x, [n, c, h // block, block, w // block, block])
    crd = (node.attr("mode", "DCR") or "DCR") == "CRD"  # opset 28's mode; DCR before
    moved = ctx.op("Permute", split, dims=[0, 1, 3, 5, 2, 4] if crd else [0, 3, 5, 1, 2, 4])
    return [_reshape(ctx, moved, [n, c * block * block, h // block, w // block])]
