"""Converters for ONNX image ops: ``Resize``, ``ConvTranspose``, ``Pad``, ``LRN``.

- ``Resize`` (opsets 11, 13, 18, 19): ``scales`` or ``sizes`` (and ``roi`` for
  ``tf_crop_and_resize``) must be known at build time; they usually are, since exporters
  compute ``sizes`` from ``Shape`` and the importer folds that.  Output sizes and the scales
  used by the coordinate transform follow the ONNX reference: with ``scales``, each size is
  ``floor(input * scale)``; with ``sizes``, the scale is ``size / input``, adjusted by
  ``keep_aspect_ratio_policy`` (18+) over ``axes`` (18+).  Everything else is an attribute of
  the catalog's ``Resize``.
- ``ConvTranspose`` (11, 22): ``pads``, ``auto_pad`` and ``output_shape`` are turned into the
  catalog's symmetric ``padding``/``outputPadding`` plus a ``Slice`` where the ONNX pads are
  asymmetric: ``total = stride * (in - 1) + output_padding + (kernel - 1) * dilation + 1 - out``,
  split begin/end as the spec says (``SAME_UPPER`` puts the extra element at the end).
- ``Pad`` (11, 13, 18, 19, 21, 23-25): ``pads``, ``constant_value`` and ``axes`` known at build time;
  modes constant, reflect, edge, wrap: the catalog's ``PadV3``.
- ``LRN`` (1, 13): ``LocalResponseNorm`` (same window as ONNX).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .context import BuildContext, OnnxNode, normalize_axes, static_ints
from .convert_logic import python_scalar
from .mapping import converts

__all__: list[str] = []


# -- Resize ------------------------------------------------------------------------------------
def _optional(inputs: list[Any], index: int) -> Any:
    return inputs[index] if len(inputs) > index else None


def _floats(ctx: BuildContext, value: Any, what: str) -> list[float] | None:
    """A float tensor known at build time, or None when absent or empty."""
    if value is None:
        return None
    array = np.asarray(ctx.static_value(value, what), dtype=np.float64).reshape(-1)
    return None if array.size == 0 else [float(v) for v in array]


def resize_geometry(node: OnnxNode, shape: tuple[int, ...], scales: list[float] | None, sizes: list[int] | None,
                    axes: list[int]) -> tuple[list[int], list[float] | None]:
    """(output shape, scales for the coordinate transform or None for ``size / input``)."""
    rank = len(shape)
    if (scales is None) == (sizes is None):
        raise ValueError(f"{node.describe()}: exactly one of scales and sizes must be given (non-empty)")
    given = scales if scales is not None else sizes
    assert given is not None
    if len(given) != len(axes):
        raise ValueError(f"{node.describe()}: {'scales' if scales is not None else 'sizes'} has {len(given)} "
                         f"values for {len(axes)} axes of X {list(shape)}")
    if scales is not None:
        full = [1.0] * rank
        for axis, scale in zip(axes, scales):
            full[axis] = scale
        return [math.floor(size * scale) for size, scale in zip(shape, full)], full
    out = list(shape)
    for axis, size in zip(axes, sizes or []):
        out[axis] = int(size)
    policy = node.attr("keep_aspect_ratio_policy", "stretch")
    if policy == "stretch":
        return out, None
    ratios = [out[axis] / shape[axis] for axis in axes]
    if policy not in ("not_larger", "not_smaller"):
        raise ValueError(f"{node.describe()}: keep_aspect_ratio_policy must be stretch, not_larger or "
                         f"not_smaller, got {policy!r}")
    scale = min(ratios) if policy == "not_larger" else max(ratios)
    full = [scale if axis in axes else 1.0 for axis in range(rank)]
    return [int(shape[axis] * scale + 0.5) if axis in axes else shape[axis] for axis in range(rank)], full


@converts("Resize", 11, 13, 18, 19)
def convert_resize(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    x = inputs[0]
    shape = ctx.shape(x)
    rank = len(shape)
    axes = list(range(rank)) if node.attr("axes") is None else normalize_axes(node, node.attr("axes"), rank)
    scales = _floats(ctx, _optional(inputs, 2), "Resize's scales")
    sizes_value = _optional(inputs, 3)
    sizes = None if sizes_value is None or not math.prod(ctx.shape(sizes_value)) else \
        static_ints(ctx, sizes_value, "Resize's sizes")
    out, full_scales = resize_geometry(node, shape, scales, sizes, axes)
    transform = node.attr("coordinate_transformation_mode", "half_pixel")
    roi = None
    if transform == "tf_crop_and_resize":
        given = _floats(ctx, _optional(inputs, 1), "Resize's roi")
        if given is None or len(given) != 2 * len(axes):
            raise ValueError(f"{node.describe()}: tf_crop_and_resize needs roi with {2 * len(axes)} values")
        roi = [0.0] * rank + [1.0] * rank
        for index, axis in enumerate(axes):
            roi[axis], roi[rank + axis] = given[index], given[len(axes) + index]
    elif list(out) == list(shape) and all(s == 1.0 for s in (full_scales or [1.0])):
        return [x]
    return [ctx.op("Resize", x, sizes=out, scales=full_scales, mode=node.attr("mode", "nearest"),
                   coordinateTransformationMode=transform,
                   nearestMode=node.attr("nearest_mode", "round_prefer_floor"),
                   cubicCoeffA=float(node.attr("cubic_coeff_a", -0.75)),
                   excludeOutside=bool(node.attr("exclude_outside", 0)), antialias=bool(node.attr("antialias", 0)),
                   roi=roi, extrapolationValue=float(node.attr("extrapolation_value", 0.0)))]


# -- ConvTranspose -----------------------------------------------------------------------------
def _ints(node: OnnxNode, name: str, count: int, default: int) -> list[int]:
    value = node.attr(name)
    values = [default] * count if value is None else [int(v) for v in value]
    if len(values) != count:
        raise ValueError(f"{node.describe()}: {name} needs {count} values, got {values}")
    return values


def transpose_pads(node: OnnxNode, spatial: tuple[int, ...], kernel: tuple[int, ...]
                   ) -> tuple[list[int], list[int], list[int]]:
    """(pads before, pads after, output padding) of an ONNX ConvTranspose, by the spec's rules."""
    rank = len(spatial)
    strides, dilations = _ints(node, "strides", rank, 1), _ints(node, "dilations", rank, 1)
    extra = _ints(node, "output_padding", rank, 0)
    full = [s * (n - 1) + e + (k - 1) * d + 1 for s, n, e, k, d in zip(strides, spatial, extra, kernel, dilations)]
    auto_pad = node.attr("auto_pad", "NOTSET") or "NOTSET"
    wanted = node.attr("output_shape")
    if wanted is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        wanted = [n * s for n, s in zip(spatial, strides)]
    if wanted is not None:
        wanted = [int(w) for w in wanted][-rank:]
        # A negative total (output_shape past the full output) extends the end: zeros plus bias.
        total = [f - w for f, w in zip(full, wanted)]
        if auto_pad == "SAME_UPPER":
            begin = [max(t, 0) // 2 for t in total]
        else:
            begin = [max(t, 0) - max(t, 0) // 2 for t in total]
        return begin, [t - b for t, b in zip(total, begin)], extra
    if auto_pad not in ("NOTSET", "VALID"):
        raise ValueError(f"{node.describe()}: auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, "
                         f"got {auto_pad!r}")
    pads = [0] * (2 * rank) if auto_pad == "VALID" else _ints(node, "pads", 2 * rank, 0)
    return pads[:rank], pads[rank:], extra


@converts("ConvTranspose", 11, 22)
def convert_conv_transpose(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    x, weight, bias = (inputs + [None])[:3]
    shape, wshape = ctx.shape(x), ctx.shape(weight)
    rank = len(shape) - 2
    if rank not in (1, 2, 3):
        raise node.unsupported(f"{rank}-D transposed convolution (1-D to 3-D are supported)")
    kernel = tuple(int(k) for k in node.attr("kernel_shape", wshape[2:]))
    if kernel != tuple(wshape[2:]):
        raise ValueError(f"{node.describe()}: kernel_shape {list(kernel)} does not match W {list(wshape)}")
    begin, end, extra = transpose_pads(node, tuple(shape[2:]), kernel)
    strides, dilations = _ints(node, "strides", rank, 1), _ints(node, "dilations", rank, 1)
    # The catalog pads symmetrically: crop min(begin, end) there, the rest with a Slice.
    end_effective = [e - p for e, p in zip(end, extra)]  # output padding shortens the end crop
    padding = [max(0, min(b, e)) for b, e in zip(begin, end_effective)]
    output_padding = [max(0, p - e) for p, e in zip(padding, end_effective)]
    if any(o >= max(s, d) for o, s, d in zip(output_padding, strides, dilations)):
        raise node.unsupported(f"output padding {extra} beyond the end pads {end} by a stride or more")
    y = ctx.op("ConvTranspose", x, weight, bias, stride=strides, padding=padding, dilation=dilations,
               outputPadding=output_padding, groups=int(node.attr("group", 1)))
    full = [s * (n - 1) + (k - 1) * d + 1 for s, n, k, d in zip(strides, shape[2:], kernel, dilations)]
    for axis in range(rank):
        start = begin[axis] - padding[axis]
        length = full[axis] + extra[axis] - begin[axis] - end[axis]
        if start or length != ctx.shape(y)[2 + axis]:
            y = ctx.op("Slice", y, dim=2 + axis, start=start, end=start + length, step=1)
    return [y]


# -- Pad -----------------------------------------------------------------------------------------
@converts("Pad", 11, 13, 18, 19, 21, 23, 24, 25)
def convert_pad(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    x = inputs[0]
    shape, dtype = ctx.shape(x), ctx.dtype(x)
    rank = len(shape)
    pads = static_ints(ctx, inputs[1], "Pad's pads")
    axes_value = _optional(inputs, 3)
    axes = list(range(rank)) if axes_value is None else normalize_axes(
        node, static_ints(ctx, axes_value, "Pad's axes"), rank)
    if len(pads) != 2 * len(axes):
        raise ValueError(f"{node.describe()}: pads has {len(pads)} values for {len(axes)} axes (needs twice as many)")
    pairs = [[0, 0] for _ in range(rank)]
    for index, axis in enumerate(axes):
        pairs[axis] = [pads[index], pads[len(axes) + index]]
    mode = node.attr("mode", "constant")
    if not any(amount for pair in pairs for amount in pair):
        return [x]
    fill = _optional(inputs, 2)
    value = 0 if fill is None else python_scalar(ctx.static_value(fill, "Pad's constant_value"), dtype) \
        if math.prod(ctx.shape(fill)) else 0
    if dtype.is_floating:
        value = float(value)
    return [ctx.op("PadV3", x, paddings=[amount for pair in pairs for amount in pair], mode=mode, value=value)]


# -- LRN -------------------------------------------------------------------------------------------
@converts("LRN", 1, 13)
def convert_lrn(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    if node.attr("size") is None:
        raise ValueError(f"{node.describe()}: the size attribute is required")
    return [ctx.op("LocalResponseNorm", inputs[0], size=int(node.attr("size")),
                   alpha=float(node.attr("alpha", 1e-4)), beta=float(node.attr("beta", 0.75)),
                   bias=float(node.attr("bias", 1.0)))]
