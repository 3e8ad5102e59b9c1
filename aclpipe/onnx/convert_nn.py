"""Converters for ONNX convolution and pooling (1-D and 2-D; 3-D is not in the catalog).

ONNX pads may be asymmetric (``[x1_begin, x2_begin, ..., x1_end, x2_end, ...]``) and
``auto_pad`` computes them; aclnn pads symmetrically, and pooling allows at most half the
kernel (PyTorch's rule).  When the catalog's own padding gives ONNX's result, it is used;
otherwise the input is padded explicitly (``Cat`` with constant borders: zeros for
convolution and averaging, ``-inf`` for max pooling) and the catalog op runs unpadded.

Pooling output sizes follow the ONNX reference: ``floor`` (or ``ceil`` with ``ceil_mode``,
dropping a last window that would start in the end padding) of
``(in + pads - ((k - 1) * d + 1)) / s + 1``.  In ceil mode the last window may reach past the end
padding; those positions never count (the divisor of an average covers the input, plus the
pads with ``count_include_pad=1``), which the explicit path gets as
``AvgPool(x) / AvgPool(mask)`` with the mask 1 where elements count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..dtypes import DType
from .context import BuildContext, OnnxNode
from .convert_math import cast_to
from .mapping import converts

__all__ = ["Geometry", "geometry", "pad_axis"]


@dataclass(frozen=True)
class Geometry:
    """Window geometry of one conv/pool node over its spatial dims."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    begin: tuple[int, ...]  # padding before each spatial dim
    end: tuple[int, ...]  # padding after (ONNX pads, or auto_pad's)
    out: tuple[int, ...]  # output spatial size
    extra: tuple[int, ...]  # ceil mode: positions past the end padding that the last window reaches

    @property
    def symmetric(self) -> bool:
        return self.begin == self.end and not any(self.extra)

    def span(self, axis: int) -> int:
        return (self.kernel[axis] - 1) * self.dilations[axis] + 1


def _ints(node: OnnxNode, name: str, count: int, default: int) -> tuple[int, ...]:
    value = node.attr(name)
    if value is None:
        return (default,) * count
    value = tuple(int(v) for v in value)
    if len(value) != count:
        raise ValueError(f"{node.describe()}: {name} needs {count} values, got {list(value)}")
    return value


def geometry(node: OnnxNode, spatial: tuple[int, ...], kernel: tuple[int, ...], *, ceil: bool = False) -> Geometry:
    """Pads and output size by ONNX's rules (explicit pads or ``auto_pad``, ``ceil_mode``)."""
    rank = len(spatial)
    strides = _ints(node, "strides", rank, 1)
    dilations = _ints(node, "dilations", rank, 1)
    spans = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    auto_pad = node.attr("auto_pad", "NOTSET") or "NOTSET"
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = tuple(-(-size // s) for size, s in zip(spatial, strides))
        total = [max(0, (o - 1) * s + span - size) for o, s, span, size in zip(out, strides, spans, spatial)]
        small = [t // 2 for t in total]
        begin = tuple(t - h for t, h in zip(total, small)) if auto_pad == "SAME_LOWER" else tuple(small)
        end = tuple(t - b for t, b in zip(total, begin))
        return Geometry(kernel, strides, dilations, begin, end, out, (0,) * rank)
    if auto_pad == "VALID":
        begin = end = (0,) * rank
    elif auto_pad == "NOTSET":
        pads = _ints(node, "pads", 2 * rank, 0)
        begin, end = pads[:rank], pads[rank:]
    else:
        raise ValueError(f"{node.describe()}: auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, "
                         f"got {auto_pad!r}")
    out_list, extra = [], []
    for size, s, span, b, e in zip(spatial, strides, spans, begin, end):
        exact = (size + b + e - span) / s + 1
        count = math.ceil(exact) if ceil else math.floor(exact)
        if ceil and (count - 1) * s >= size + b:
            count -= 1  # the last window would start in the end padding
        out_list.append(max(count, 0))
        extra.append(max(0, (count - 1) * s + span - size - b - e))
    return Geometry(kernel, strides, dilations, begin, end, tuple(out_list), tuple(extra))


def pad_axis(ctx: BuildContext, x: Any, axis: int, before: int, after: int, fill: float) -> Any:
    """``x`` with ``before``/``after`` elements of ``fill`` added along ``axis`` (via Cat)."""
    if not before and not after:
        return x
    shape = list(ctx.shape(x))
    dtype = ctx.dtype(x).numpy
    parts = []
    for count in (before, after):
        shape[axis] = count
        parts.append(ctx.constant(np.full(shape, fill, dtype=dtype)) if count else None)
    pieces = [piece for piece in (parts[0], x, parts[1]) if piece is not None]
    return ctx.op("Cat", *pieces, dim=axis)


def _pad_spatial(ctx: BuildContext, x: Any, geo: Geometry, fill: float, beyond: float | None = None) -> Any:
    """``x`` padded by ``geo``'s pads with ``fill``, and past them (ceil mode) with ``beyond``."""
    beyond = fill if beyond is None else beyond
    for axis in range(len(geo.kernel)):
        x = pad_axis(ctx, x, 2 + axis, geo.begin[axis], geo.end[axis], fill)
        x = pad_axis(ctx, x, 2 + axis, 0, geo.extra[axis], beyond)
    return x


def _spatial_rank(node: OnnxNode, shape: tuple[int, ...], what: str) -> int:
    rank = len(shape) - 2
    if rank == 3:
        raise node.unsupported(f"3-D {what} (the catalog has 1-D and 2-D {what} only)")
    if rank not in (1, 2):
        raise ValueError(f"{node.describe()}: X must be [N, C, L] or [N, C, H, W], got {list(shape)}")
    return rank


# -- convolution ----------------------------------------------------------------------------
@converts("Conv", 11, 22)
def convert_conv(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    x, weight, bias = (inputs + [None])[:3]
    shape, wshape = ctx.shape(x), ctx.shape(weight)
    rank = _spatial_rank(node, shape, "convolution")
    kernel = tuple(int(k) for k in node.attr("kernel_shape", wshape[2:]))
    if kernel != tuple(wshape[2:]):
        raise ValueError(f"{node.describe()}: kernel_shape {list(kernel)} does not match W {list(wshape)}")
    geo = geometry(node, tuple(shape[2:]), kernel)
    if not geo.symmetric:
        x, padding = _pad_spatial(ctx, x, geo, 0.0), [0] * rank
    else:
        padding = list(geo.begin)
    return [ctx.op("Convolution", x, weight, bias, stride=list(geo.strides), padding=padding,
                   dilation=list(geo.dilations), transposed=False, outputPadding=[0] * rank,
                   groups=int(node.attr("group", 1)))]


# -- pooling ---------------------------------------------------------------------------------
def _as_2d(ctx: BuildContext, x: Any, rank: int) -> Any:
    """1-D pooling runs as 2-D over ``[N, C, 1, L]``."""
    if rank == 2:
        return x
    n, c, length = ctx.shape(x)
    return ctx.op("Reshape", x, shape=[n, c, 1, length])


def _window_2d(geo: Geometry, rank: int) -> tuple[list[int], list[int], list[int]]:
    """(kernel, strides, dilations) as the 2-D catalog ops take them."""
    lead = [1] * (2 - rank)
    return lead + list(geo.kernel), lead + list(geo.strides), lead + list(geo.dilations)


def _finish(ctx: BuildContext, y: Any, geo: Geometry, rank: int, n: int, c: int) -> Any:
    """Back to ``[N, C, *out]``; trims a window the explicit padding allowed past ONNX's count."""
    spatial = ctx.shape(y)[2:]
    if rank == 1:
        spatial = spatial[1:]
        y = ctx.op("Reshape", y, shape=[n, c, *spatial])
    for axis, (have, want) in enumerate(zip(spatial, geo.out)):
        if have > want:
            y = ctx.op("Slice", y, dim=2 + axis, start=0, end=want, step=1)
    return y


def _pool_input(node: OnnxNode, ctx: BuildContext, x: Any, what: str) -> tuple[Any, int, tuple[int, ...]]:
    shape = ctx.shape(x)
    rank = _spatial_rank(node, shape, what)
    if node.attr("kernel_shape") is None:
        raise ValueError(f"{node.describe()}: kernel_shape is required")
    kernel = tuple(int(k) for k in node.attr("kernel_shape"))
    if len(kernel) != rank:
        raise ValueError(f"{node.describe()}: kernel_shape {list(kernel)} does not fit X {list(shape)}")
    return x, rank, kernel


@converts("MaxPool", 11, 12, 22)
def convert_max_pool(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    if node.num_outputs > 1 and node.wanted[1]:
        raise node.unsupported("the Indices output (aclpipe's MaxPool2d returns values only)")
    x, rank, kernel = _pool_input(node, ctx, inputs[0], "pooling")
    n, c, *spatial = ctx.shape(x)
    dtype = ctx.dtype(x)
    if dtype in (DType.int8, DType.uint8):
        x = ctx.op("Cast", x, dtype=DType.float32)  # exact for 8-bit integers; the kernel takes floats
    elif not dtype.is_floating:
        raise node.unsupported(f"max pooling of {dtype.name} (floats and 8-bit integers are supported)")
    geo = geometry(node, tuple(spatial), kernel, ceil=bool(node.attr("ceil_mode", 0)))
    fast = geo.begin == geo.end and all(p <= k // 2 for p, k in zip(geo.begin, kernel))
    if fast:
        padding, ceil_mode = [0] * (2 - rank) + list(geo.begin), bool(node.attr("ceil_mode", 0))
    else:
        x, padding, ceil_mode = _pad_spatial(ctx, x, geo, -np.inf), [0, 0], False
    kernel2, strides2, dilations2 = _window_2d(geo, rank)
    y = ctx.op("MaxPool2d", _as_2d(ctx, x, rank), kernelSize=kernel2, stride=strides2, padding=padding,
               dilation=dilations2, ceilMode=ceil_mode)
    return [cast_to(ctx, _finish(ctx, y, geo, rank, n, c), dtype)]


@converts("AveragePool", 11, 19, 22)
def convert_average_pool(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    x, rank, kernel = _pool_input(node, ctx, inputs[0], "pooling")
    n, c, *spatial = ctx.shape(x)
    ceil = bool(node.attr("ceil_mode", 0))
    geo = geometry(node, tuple(spatial), kernel, ceil=ceil)
    if any(d != 1 for d in geo.dilations):
        raise node.unsupported("AveragePool with dilations (aclnnAvgPool2d has no dilation)")
    include_pad = bool(node.attr("count_include_pad", 0))
    kernel2, strides2, _ = _window_2d(geo, rank)
    fast = geo.begin == geo.end and all(p <= k // 2 for p, k in zip(geo.begin, kernel))
    if fast:
        y = ctx.op("AvgPool2d", _as_2d(ctx, x, rank), kernelSize=kernel2, strides=strides2,
                   paddings=[0] * (2 - rank) + list(geo.begin), ceilMode=ceil, countIncludePad=include_pad)
        return [_finish(ctx, y, geo, rank, n, c)]

    def pooled(value: Any, fill: float = 0.0) -> Any:
        padded = _as_2d(ctx, _pad_spatial(ctx, value, geo, fill, beyond=0.0), rank)
        return ctx.op("AvgPool2d", padded, kernelSize=kernel2, strides=strides2, paddings=[0, 0],
                      ceilMode=False, countIncludePad=True)

    y = pooled(x)
    if not include_pad or any(geo.extra):
        # The divisor counts the input (and the pads, with count_include_pad) but never the
        # positions past the pads that ceil mode reaches: divide by the mean of that mask.
        ones = ctx.constant(np.ones((1, 1, *spatial), dtype=ctx.dtype(x).numpy))
        y = ctx.op("Div", y, pooled(ones, fill=1.0 if include_pad else 0.0))
    return [_finish(ctx, y, geo, rank, n, c)]


@converts("GlobalAveragePool", 1, 22)
def convert_global_average_pool(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    x = inputs[0]
    rank = len(ctx.shape(x))
    if rank < 3:
        raise ValueError(f"{node.describe()}: X must be [N, C, spatial...], got {list(ctx.shape(x))}")
    return [ctx.op("Mean", x, dim=list(range(2, rank)), keepDim=True)]
