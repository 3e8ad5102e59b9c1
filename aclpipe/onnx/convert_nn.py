"""Converters for ONNX convolution and pooling (1-D, 2-D and 3-D).

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

3-D pooling uses the catalog's ``MaxPool3d``/``AvgPool3d``.  ``MaxPool``'s ``Indices`` output
comes from ``MaxPool2dWithIndices`` (1-D and 2-D, when the catalog's own padding gives ONNX's
windows): its per-plane index plus ``(n * C + c) * H * W`` is ONNX's flat index, and
``storage_order=1`` (column-major) pools the transposed plane.  ``AveragePool`` with
``dilations`` (which aclnn's pooling lacks) is a depthwise ``Convolution`` with a kernel of
ones and those dilations, divided by the same convolution of the counting mask.
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

__all__ = ["Geometry", "conv_attrs", "geometry", "pad_axis"]


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
    if rank not in (1, 2, 3):
        raise ValueError(f"{node.describe()}: X must be [N, C, L], [N, C, H, W] or [N, C, D, H, W] for {what}, "
                         f"got {list(shape)}")
    return rank


# -- convolution ----------------------------------------------------------------------------
@converts("Conv", 11, 22)
def convert_conv(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    x, weight, bias = (inputs + [None])[:3]
    x, attrs = conv_attrs(ctx, node, x, weight)
    return [ctx.op("Convolution", x, weight, bias, transposed=False, outputPadding=[0] * len(attrs["stride"]),
                   **attrs)]


def conv_attrs(ctx: BuildContext, node: OnnxNode, x: Any, weight: Any, pad_value: Any = None
               ) -> tuple[Any, dict[str, Any]]:
    """``x`` (explicitly padded with ``pad_value``, default 0, when ONNX's pads are asymmetric)
    and the catalog convolution's ``stride``/``padding``/``dilation``/``groups``."""
    shape, wshape = ctx.shape(x), ctx.shape(weight)
    rank = _spatial_rank(node, shape, "convolution")
    kernel = tuple(int(k) for k in node.attr("kernel_shape", wshape[2:]))
    if kernel != tuple(wshape[2:]):
        raise ValueError(f"{node.describe()}: kernel_shape {list(kernel)} does not match W {list(wshape)}")
    geo = geometry(node, tuple(shape[2:]), kernel)
    if not geo.symmetric:  # integer convolutions pad their shifted input with 0: the zero point
        fill = 0.0 if pad_value is None else float(np.asarray(ctx.static_value(pad_value, "the zero point"))
                                                    .reshape(-1)[0])
        x, padding = _pad_spatial(ctx, x, geo, fill), [0] * rank
    else:
        padding = list(geo.begin)
    return x, {"stride": list(geo.strides), "padding": padding, "dilation": list(geo.dilations),
               "groups": int(node.attr("group", 1))}


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


def _pool(ctx: BuildContext, kind: str, x: Any, rank: int, geo: Geometry, padding: list[int], ceil: bool,
          include_pad: bool = True, indices: bool = False) -> Any:
    """One catalog pooling op over ``x`` (1-D as 2-D); ``padding`` per spatial dim."""
    if rank == 3:
        window: dict[str, Any] = {"kernelSize": list(geo.kernel), "stride": list(geo.strides), "padding": padding,
                                  "ceilMode": ceil}
        if kind == "max":
            return ctx.op("MaxPool3d", x, dilation=list(geo.dilations), **window)
        return ctx.op("AvgPool3d", x, countIncludePad=include_pad, **window)
    kernel2, strides2, dilations2 = _window_2d(geo, rank)
    padding2 = [0] * (2 - rank) + padding
    if kind == "max":
        op = "MaxPool2dWithIndices" if indices else "MaxPool2d"
        return ctx.op(op, _as_2d(ctx, x, rank), outputs=2 if indices else 1, kernelSize=kernel2, stride=strides2,
                      padding=padding2, dilation=dilations2, ceilMode=ceil)
    return ctx.op("AvgPool2d", _as_2d(ctx, x, rank), kernelSize=kernel2, strides=strides2, paddings=padding2,
                  ceilMode=ceil, countIncludePad=include_pad)


def _fits_catalog(geo: Geometry) -> bool:
    """Whether the catalog's symmetric padding (at most half the kernel) gives ONNX's windows."""
    return geo.begin == geo.end and all(p <= k // 2 for p, k in zip(geo.begin, geo.kernel))


@converts("MaxPool", 11, 12, 22)
def convert_max_pool(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    x, rank, kernel = _pool_input(node, ctx, inputs[0], "pooling")
    n, c, *spatial = ctx.shape(x)
    dtype = ctx.dtype(x)
    if dtype in (DType.int8, DType.uint8):
        x = ctx.op("Cast", x, dtype=DType.float32)  # exact for 8-bit integers; the kernel takes floats
    elif not dtype.is_floating:
        raise node.unsupported(f"max pooling of {dtype.name} (floats and 8-bit integers are supported)")
    ceil = bool(node.attr("ceil_mode", 0))
    geo = geometry(node, tuple(spatial), kernel, ceil=ceil)
    if node.num_outputs > 1 and node.wanted[1]:
        return _max_pool_with_indices(ctx, node, x, rank, geo, ceil, dtype)
    if _fits_catalog(geo):
        y = _pool(ctx, "max", x, rank, geo, list(geo.begin), ceil)
    else:
        y = _pool(ctx, "max", _pad_spatial(ctx, x, geo, -np.inf), rank, geo, [0] * rank, False)
    return [cast_to(ctx, _finish(ctx, y, geo, rank, n, c), dtype)]


def _max_pool_with_indices(ctx: BuildContext, node: OnnxNode, x: Any, rank: int, geo: Geometry, ceil: bool,
                           dtype: DType) -> list[Any]:
    if rank == 3 or not _fits_catalog(geo):
        raise node.unsupported("the Indices output of 3-D max pooling or of pads the catalog cannot express "
                               "(asymmetric, or more than half the kernel)")
    n, c, *spatial = ctx.shape(x)
    column_major = rank == 2 and int(node.attr("storage_order", 0)) == 1
    if column_major:  # pool the transposed plane: its row-major index is the column-major one
        x = ctx.op("Permute", x, dims=[0, 1, 3, 2])
        geo = Geometry(*(tuple(reversed(field)) for field in (geo.kernel, geo.strides, geo.dilations, geo.begin,
                                                              geo.end, geo.out, geo.extra)))
    values, plane = _pool(ctx, "max", x, rank, geo, list(geo.begin), ceil, indices=True)
    values, plane = (_finish(ctx, v, geo, rank, n, c) for v in (values, plane))
    if column_major:
        values, plane = (ctx.op("Permute", v, dims=[0, 1, 3, 2]) for v in (values, plane))
    planes = np.arange(n * c, dtype=np.int64).reshape([n, c] + [1] * rank) * int(np.prod(spatial))
    return [cast_to(ctx, values, dtype), ctx.op("Add", plane, ctx.constant(planes))]


@converts("AveragePool", 11, 19, 22)
def convert_average_pool(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    x, rank, kernel = _pool_input(node, ctx, inputs[0], "pooling")
    n, c, *spatial = ctx.shape(x)
    ceil = bool(node.attr("ceil_mode", 0))
    geo = geometry(node, tuple(spatial), kernel, ceil=ceil)
    include_pad = bool(node.attr("count_include_pad", 0))
    dilated = any(d != 1 for d in geo.dilations)
    if _fits_catalog(geo) and not dilated:
        return [_finish(ctx, _pool(ctx, "avg", x, rank, geo, list(geo.begin), ceil, include_pad), geo, rank, n, c)]

    def summed(value: Any, fill: float = 0.0) -> Any:
        padded = _pad_spatial(ctx, value, geo, fill, beyond=0.0)
        if not dilated:
            return _pool(ctx, "avg", padded, rank, geo, [0] * rank, False)
        # aclnn's pooling has no dilation: a depthwise convolution with ones sums each window.
        channels = ctx.shape(value)[1]
        ones = ctx.constant(np.ones((channels, 1, *geo.kernel), dtype=ctx.dtype(value).numpy))
        return ctx.op("Convolution", padded, ones, None, stride=list(geo.strides), padding=[0] * rank,
                      dilation=list(geo.dilations), transposed=False, outputPadding=[0] * rank, groups=channels)

    y = summed(x)
    if dilated or not include_pad or any(geo.extra):
        # The divisor counts the input (and the pads, with count_include_pad) but never the
        # positions past the pads that ceil mode reaches: divide by the same pooling of that mask.
        ones = ctx.constant(np.ones((1, 1, *spatial), dtype=ctx.dtype(x).numpy))
        y = ctx.op("Div", y, summed(ones, fill=1.0 if include_pad else 0.0))
    return [_finish(ctx, y, geo, rank, n, c)]


@converts("GlobalAveragePool", 1, 22)
def convert_global_average_pool(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    x = inputs[0]
    rank = len(ctx.shape(x))
    if rank < 3:
        raise ValueError(f"{node.describe()}: X must be [N, C, spatial...], got {list(ctx.shape(x))}")
    return [ctx.op("Mean", x, dim=list(range(2, rank)), keepDim=True)]
