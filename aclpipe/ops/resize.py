"""``Resize``: nearest, linear and cubic resampling of any dims, with ONNX's coordinate rules.

Attributes (the ONNX ``Resize`` semantics, opset 11 to 19, as one catalog op):

- ``sizes``: the output shape (``ndim`` ints).  Dims whose size and scale are unchanged are
  copied; every other dim is resampled, one dim after the other (resampling is separable).
- ``scales``: ``ndim`` floats used by the coordinate transform (None: ``sizes / input``, in
  float32).  Given scales also make ``scale * input`` (possibly fractional) the resized length
  of ``align_corners`` and ``tf_crop_and_resize``, as in the ONNX reference.
- ``mode``: ``"nearest"``, ``"linear"`` or ``"cubic"`` (``linear`` on two dims is bilinear).
- ``coordinateTransformationMode``: how output index ``y`` maps to a source coordinate ``x``
  along a dim of input length ``L``, output length ``O`` and scale ``s``:
  ``half_pixel`` ``(y + .5) / s - .5``; ``half_pixel_symmetric`` the same, shifted so both
  centres meet when ``O != s * L``; ``pytorch_half_pixel`` like ``half_pixel`` but 0 when
  ``O == 1``; ``align_corners`` ``y * (L - 1) / (O - 1)`` (0 when ``O == 1``);
  ``asymmetric`` ``y / s``; ``tf_crop_and_resize`` from ``roi`` (``2 * ndim`` floats:
  starts then ends, in normalized coordinates), with ``extrapolationValue`` outside the input.
- ``nearestMode``: ``round_prefer_floor``, ``round_prefer_ceil``, ``floor``, ``ceil``.
- ``cubicCoeffA`` (-0.75), ``excludeOutside`` (drop taps outside the input and renormalize),
  ``antialias`` (linear/cubic: widen the filter when downsampling).

Taps outside the input repeat the edge element.  Nearest takes every dtype and copies values
exactly; linear and cubic take floats and compute in fp32 (fp16/bf16 round once).  The tap
tables (source indices and weights per output index) are made in phase one.  Resampling k
dims needs k - 1 intermediate tensors: they live in the workspace (two fp32 buffers, each
large enough for the biggest intermediate), so the workspace is 0 for a one-dim resize.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..tensor import TensorDesc
from .base import OpPlan, OpSpec, op_error
from .checks import ALL, FLOATS, argument, need, need_dtype, need_output, scratch_layout, scratch_view, store
from .registry import register

__all__ = ["Resize", "Taps", "taps"]

MODES = ("nearest", "linear", "cubic")
TRANSFORMS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
              "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


@dataclass(frozen=True)
class Taps:
    """How one dim is resampled: output ``i`` is ``sum_j weights[i, j] * input[indices[i, j]]``;
    ``outside[i]`` marks outputs that take the extrapolation value (tf_crop_and_resize)."""

    indices: np.ndarray  # [out, n] int64, clamped into the input
    weights: np.ndarray  # [out, n] float64
    outside: np.ndarray | None


@dataclass(frozen=True)
class _Params:
    mode: str
    transform: str
    nearest: str
    cubic_a: float
    exclude_outside: bool
    antialias: bool
    extrapolation: float


def source_coordinates(transform: str, length: int, out: int, scale: float,
                       roi: tuple[float, float] | None, given_scale: bool = False
                       ) -> tuple[np.ndarray, np.ndarray | None]:
    """Source coordinate of every output index (and, for tf_crop_and_resize, which fall outside).

    Computed in float32 in the order onnxruntime uses, so that a coordinate within rounding of
    a pixel boundary picks the same nearest pixel as the peer runtime does.  ``align_corners``
    and ``tf_crop_and_resize`` divide by the resized length less one: with a ``given_scale``
    that is ``scale * length`` (fractional), computed in float64 as the ONNX reference and its
    conformance data have it (onnxruntime differs there); otherwise the output size."""
    f32: type[np.floating[Any]] = np.float32
    if given_scale and transform in ("align_corners", "tf_crop_and_resize"):
        f32 = np.float64  # the reference's arithmetic, on the float32 scale
    y = np.arange(out, dtype=f32)
    s, size = f32(np.float32(scale)), f32(length)
    count = s * size if given_scale else f32(out)
    half = f32(0.5)
    if transform == "align_corners":
        return (np.zeros(out, f32) if count == 1 else y * (size - 1) / (count - 1)), None
    if transform == "asymmetric":
        return y / s, None
    if transform == "pytorch_half_pixel":
        return (np.zeros(out, f32) if out == 1 else (y + half) / s - half), None
    if transform == "half_pixel":
        return (y + half) / s - half, None
    if transform == "half_pixel_symmetric":
        adjustment = f32(out) / (s * size)
        offset = size / f32(2) * (f32(1) - adjustment)
        # onnxruntime adds the half pixels as doubles here, then rounds the coordinate to float.
        wide = offset.astype(np.float64) + (y.astype(np.float64) + 0.5) / np.float64(s) - 0.5
        return wide.astype(f32), None
    start, end = (f32(v) for v in (roi if roi is not None else (0.0, 1.0)))
    x = np.full(out, half * (start + end) * (size - 1), f32) if count == 1 else \
        start * (size - 1) + (y * (end - start) * (size - 1)) / (count - 1)
    return x, (x < 0) | (x > size - 1)


def _nearest_taps(x: np.ndarray, mode: str) -> np.ndarray:
    whole = x == np.floor(x)
    if mode == "round_prefer_floor":
        index = np.ceil(x - 0.5)
    elif mode == "round_prefer_ceil":
        index = np.floor(x + 0.5)
    elif mode == "floor":
        index = np.floor(x)
    else:
        index = np.ceil(x)
    return np.where(whole, x, index).astype(np.int64)[:, None]


def _cubic(distance: np.ndarray, a: float) -> np.ndarray:
    d = np.abs(distance)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _filter_weights(ratio: np.ndarray, params: _Params, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """(tap offsets from the base index, weights per output) of the linear or cubic filter.

    ``ratio`` is each output's distance from its base tap, in ``(0, 1]``.  With ``antialias``
    and downsampling the filter is stretched by ``1 / scale`` and normalized (the reference's
    ``*_antialias`` coefficients)."""
    support = 1.0 if params.mode == "linear" else 2.0
    stretch = scale if params.antialias and scale < 1 else 1.0
    first = int(np.floor(-support / stretch) + 1)
    offsets = np.arange(first, 2 - first)
    distance = (offsets[None, :] - ratio[:, None]) * stretch
    if params.mode == "linear":
        weights = np.clip(1 - np.abs(distance), 0, 1)
    else:
        weights = _cubic(distance, params.cubic_a)
    if params.antialias:
        weights = weights / weights.sum(axis=1, keepdims=True)
    return offsets, weights


def taps(length: int, out: int, scale: float, params: _Params, roi: tuple[float, float] | None = None,
         given_scale: bool = False) -> Taps:
    """The tap table of one dim (the ONNX reference's neighbour rule: ties take the lower index)."""
    x, outside = source_coordinates(params.transform, length, out, scale, roi, given_scale)
    if params.mode == "nearest":
        indices = _nearest_taps(x, params.nearest)
        weights = np.ones(indices.shape)
    else:
        base = np.floor(x)
        whole = x == base
        # The reference prefers the pixel left of x: an integer x counts as ratio 1 from x - 1.
        base = np.where(whole, base - 1, base)
        ratio = x - base
        offsets, weights = _filter_weights(ratio, params, scale)
        indices = base.astype(np.int64)[:, None] + offsets[None, :]
        if params.exclude_outside:
            weights = np.where((indices < 0) | (indices >= length), 0.0, weights)
            total = weights.sum(axis=1, keepdims=True)
            weights = weights / np.where(total == 0, 1.0, total)
    return Taps(np.clip(indices, 0, max(length - 1, 0)), weights, outside)


def _resample(values: np.ndarray, axis: int, table: Taps, extrapolation: float, exact: bool) -> np.ndarray:
    """One dim of the resize: gather the taps along ``axis`` and weight them (nearest: copy)."""
    if exact:
        result = np.take(values, table.indices[:, 0], axis=axis)
    else:
        # Tap by tap, in the order a sum over a taps axis adds them: a reduction over a short
        # middle axis costs numpy one inner loop per output element.
        shape = (1,) * axis + (-1,) + (1,) * (values.ndim - axis - 1)
        weights = table.weights.astype(values.dtype)
        result = np.take(values, table.indices[:, 0], axis=axis)
        result *= weights[:, 0].reshape(shape)
        for tap in range(1, weights.shape[1]):
            term = np.take(values, table.indices[:, tap], axis=axis)
            term *= weights[:, tap].reshape(shape)
            result += term
    if table.outside is not None and table.outside.any():
        mask = table.outside.reshape((1,) * axis + (-1,) + (1,) * (values.ndim - axis - 1))
        result = np.where(mask, values.dtype.type(extrapolation), result)
    return result


def _string(op: str, name: str, attrs: Mapping[str, Any], default: str, allowed: Sequence[str]) -> str:
    value = attrs.get(name, default)
    if value not in allowed:
        raise op_error(op, name, f"one of {', '.join(allowed)}", repr(value))
    return str(value)


def _floats(op: str, name: str, value: Any, count: int) -> tuple[float, ...]:
    try:
        items = tuple(float(v) for v in value)
    except (TypeError, ValueError):
        raise op_error(op, name, f"{count} numbers", repr(value)) from None
    if len(items) != count:
        raise op_error(op, name, f"{count} numbers", repr(value))
    return items


class Resize(OpSpec):
    """Resize (nearest, linear, cubic) with ONNX's coordinate transformation modes."""

    name = "Resize"
    inputs = ("self",)
    outputs = ("out",)
    attrs = {"sizes": None, "scales": None, "mode": "nearest", "coordinateTransformationMode": "half_pixel",
             "nearestMode": "round_prefer_floor", "cubicCoeffA": -0.75, "excludeOutside": False,
             "antialias": False, "roi": None, "extrapolationValue": 0.0}

    def _check(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]
               ) -> tuple[TensorDesc, tuple[int, ...], tuple[float, ...], _Params, tuple[float, ...] | None]:
        op = self.name
        x = need(op, "self", argument(inputs, 0))
        params = _Params(_string(op, "mode", attrs, "nearest", MODES),
                         _string(op, "coordinateTransformationMode", attrs, "half_pixel", TRANSFORMS),
                         _string(op, "nearestMode", attrs, "round_prefer_floor", NEAREST_MODES),
                         float(attrs.get("cubicCoeffA", -0.75)), bool(attrs.get("excludeOutside", False)),
                         bool(attrs.get("antialias", False)), float(attrs.get("extrapolationValue", 0.0)))
        need_dtype(op, "self", x, ALL if params.mode == "nearest" else FLOATS)
        sizes = attrs.get("sizes")
        if sizes is None:
            raise op_error(op, "sizes", f"{x.ndim} ints (the output shape)", "NULL", null=True)
        if not isinstance(sizes, (list, tuple)) or len(sizes) != x.ndim or not all(
                isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in sizes):
            raise op_error(op, "sizes", f"{x.ndim} ints >= 0 (the output shape)", repr(sizes))
        shape = tuple(int(d) for d in sizes)
        scales = attrs.get("scales")
        # float32 division, as the peer runtime derives scales from sizes.
        scales = tuple(float(np.float32(o) / np.float32(i)) if i else 1.0 for o, i in zip(shape, x.shape)) \
            if scales is None else \
            _floats(op, "scales", scales, x.ndim)
        if any(not s > 0 for s in scales):
            raise op_error(op, "scales", "positive numbers", list(scales))
        roi = attrs.get("roi")
        if params.transform == "tf_crop_and_resize":
            if roi is None:
                raise op_error(op, "roi", f"{2 * x.ndim} numbers for tf_crop_and_resize", "NULL", null=True)
            roi = _floats(op, "roi", roi, 2 * x.ndim)
        for axis, (size, out) in enumerate(zip(x.shape, shape)):
            if size == 0 and out > 0:
                raise op_error(op, "self", f"a non-empty dim {axis} to resample", list(x.shape))
        return x, shape, scales, params, roi

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        x, shape, _, _, _ = self._check(inputs, attrs)
        return [TensorDesc.contiguous(shape, x.dtype)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        x, shape, scales, params, roi = self._check(inputs, attrs)
        out = need_output(self.name, "out", argument(outputs, 0), shape, x.dtype)
        axes = [axis for axis, (size, o, s) in enumerate(zip(x.shape, shape, scales))
                if not (size == o and math.isclose(s, 1.0) and params.transform != "tf_crop_and_resize")]
        given_scale = attrs.get("scales") is not None
        tables = {axis: taps(x.shape[axis], shape[axis], scales[axis], params,
                             None if roi is None else (roi[axis], roi[axis + x.ndim]), given_scale)
                  for axis in axes}
        # Shapes after each resampled dim; all but the last live in the workspace.
        stages, current = [], list(x.shape)
        for axis in axes:
            current[axis] = shape[axis]
            stages.append(tuple(current))
        biggest = max((math.prod(stage) for stage in stages[:-1]), default=0)
        workspace_size, (first_at, second_at) = scratch_layout(biggest * 4, biggest * 4) if biggest else (0, (0, 0))
        exact = params.mode == "nearest"
        compute = x.dtype.numpy if exact else np.dtype(np.float32)

        def kernel(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            assert ins[0] is not None and outs[0] is not None
            if outs[0].size == 0:
                return
            values = ins[0].astype(compute, copy=False)
            for index, axis in enumerate(axes):
                values = _resample(values, axis, tables[axis], params.extrapolation, exact)
                if index < len(axes) - 1 and not exact:
                    # The intermediate is device scratch: ping-pong between two workspace buffers.
                    at = first_at if index % 2 == 0 else second_at
                    buffer = scratch_view(workspace, at, stages[index], np.float32)
                    buffer[...] = values
                    values = buffer
            store(outs[0], values)

        taps_per_output = sum(table.indices.shape[1] for table in tables.values())
        return OpPlan(kernel, workspace_size if not exact else 0, float(out.numel * 2 * taps_per_output),
                      float(x.nbytes + out.nbytes + 2 * workspace_size),
                      variant=f"{params.mode}-{len(axes)}d")


register(Resize())
