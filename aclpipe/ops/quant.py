"""Linear quantization to int8/uint8, and the integer products quantized models run.

Rounding is to nearest with ties to even, and results saturate to the type's range, as
onnxruntime's kernels (MLAS) do; scales are float32 (or the input's float dtype), zero
points int8 or uint8 of the quantized dtype.  "Per-axis" means one scale (and zero point) per
index of ``axis``; otherwise the scale has one element.

- ``Quantize(x, scale, zeroPoint; axis=1, dtype=int8)``: ``saturate(rint(x / scale) + zp)``.
- ``Dequantize(x, scale, zeroPoint; axis=1)``: ``(x - zp) * scale`` in ``scale``'s dtype;
  ``x`` is int8, uint8 or int32 (int32 takes no zero point).
- ``DynamicQuantize(x) -> y, scale, zeroPoint``: uint8 over the range ``[min(x, 0), max(x,
  0)]``: ``scale = (max - min) / 255`` (1 when the range is empty), ``zp = rint(clamp(-min /
  scale, 0, 255))``, then ``Quantize``.  The min and max are kept in the workspace.
- ``Requantize(acc, scale, zeroPoint; axis=1, dtype)``: an int32 accumulator to int8/uint8:
  ``saturate(rint(float32(acc) * scale) + zp)``, the multiplication in float32.
- ``MatmulInteger(a, b, aZeroPoint, bZeroPoint)``: int8/uint8 matrices to the exact int32
  product ``(a - azp) @ (b - bzp)`` with numpy's broadcasting of batch dims; ``azp`` is one
  value or one per row of ``a``, ``bzp`` one value or one per column of ``b``.
- ``ConvolutionInteger(input, weight, inputZeroPoint, weightZeroPoint; stride, padding,
  dilation, groups)``: the same for convolution (1-D to 3-D, NCL/NCHW/NCDHW), padding with the
  input's zero point; ``weightZeroPoint`` may give one value per output channel.

The integer products accumulate exactly on float BLAS, their operands converted into the
workspace.  ``MatmulInteger`` runs float32 products over chunks of the depth short enough for
the dtypes' bounds to keep every partial sum exact, summed in int64
(:mod:`~aclpipe.ops.integer_product`): ``a`` shifted by its zero point, ``b`` converted as it
is (its zero point taken off through ``a``'s row sums), a block of columns at a time.  The
convolution shifts its im2col columns and multiplies in float64.  The sums wrap to int32 as
the device's accumulators do.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..dtypes import DType, as_dtype
from ..tensor import TensorDesc
from .base import OpPlan, OpSpec, op_error
from .checks import (
    FLOATS,
    argument,
    need,
    need_dtype,
    need_output,
    normalize_dim,
    scratch_layout,
    scratch_view,
)
from .conv import Window, int_list, spatial_format
from .fp_errors import ignore_fp_errors
from .integer_product import ExactProduct, column_block
from .registry import register
from .shape import copy_into, int_attr

__all__ = ["QUANTIZED", "round_saturate"]

QUANTIZED = frozenset({DType.int8, DType.uint8})


def round_saturate(values: np.ndarray, zero_point: Any, dtype: DType) -> np.ndarray:
    """``clamp(rint(values) + zero_point)`` to ``dtype``'s range (ties to even; NaN to 0).

    Computed in ``values``' float dtype, in place on one temporary: below 2**24 the sum of
    two integers is exact in float32, and past it both ways saturate alike (numpy's float64
    temporaries and clip cost 120 us on 24K floats, this 15 us)."""
    with ignore_fp_errors():
        rounded = np.asarray(np.rint(values))  # a scalar for 0-d values: made an array to work in
        result = np.empty(rounded.shape, dtype.numpy)
        _saturate_into(result, rounded, zero_point)
    return result


def _round_saturate_into(out: np.ndarray, scaled: Any, zero_point: Any) -> None:
    """:func:`round_saturate` of ``scaled``, a temporary of the caller's (rounded in place),
    straight into ``out`` (its dtype the quantized one): no temporary of its own."""
    scaled = np.asarray(scaled)  # 0-d arithmetic gives numpy scalars
    with ignore_fp_errors():
        np.rint(scaled, out=scaled)
        _saturate_into(out, scaled, zero_point)


def _saturate_into(out: np.ndarray, rounded: np.ndarray, zero_point: Any) -> None:
    """``out = clamp(rounded + zero_point)``, ``rounded`` (integers, in a float dtype) worked in."""
    info = np.iinfo(out.dtype)
    if zero_point is not None:
        np.add(rounded, np.asarray(zero_point, rounded.dtype), out=rounded)
    np.clip(rounded, info.min, info.max, out=rounded)  # NaN stays NaN: found by its sum
    if np.isnan(rounded.sum()):
        np.copyto(rounded, 0.0, where=np.isnan(rounded))
    np.copyto(out, rounded, casting="unsafe")


def _per_axis(op: str, name: str, tensor: TensorDesc | None, x: TensorDesc, axis: int | None,
              dtypes: frozenset[DType]) -> TensorDesc | None:
    """A scale or zero point: one element, or ``[x.shape[axis]]`` for per-axis quantization."""
    if tensor is None:
        return None
    need_dtype(op, name, tensor, dtypes)
    if tensor.numel == 1 and tensor.ndim <= 1:
        return tensor
    if axis is None or tensor.shape != (x.shape[axis],):
        per = f" or [{x.shape[axis]}] (per axis {axis})" if axis is not None else ""
        raise op_error(op, name, f"one element{per}", list(tensor.shape))
    return tensor


def _broadcastable(values: np.ndarray | None, axis: int, ndim: int) -> Any:
    if values is None:
        return 0
    flat = np.asarray(values).reshape(-1)
    if flat.size == 1:
        return flat.reshape(())
    shape = [1] * ndim
    shape[axis] = flat.size
    return flat.reshape(shape)


def _axis(op: str, attrs: Mapping[str, Any], x: TensorDesc) -> int | None:
    return normalize_dim(op, "axis", attrs.get("axis", 1), x.ndim) if x.ndim else None


def _quant_dtype(op: str, attrs: Mapping[str, Any], zero_point: TensorDesc | None) -> DType:
    wanted = attrs.get("dtype")
    dtype = zero_point.dtype if wanted is None and zero_point is not None else as_dtype(wanted or "uint8")
    if dtype not in QUANTIZED:
        raise op_error(op, "dtype", "int8 or uint8", dtype.name)
    if zero_point is not None and zero_point.dtype != dtype:
        raise op_error(op, "zeroPoint", f"dtype {dtype.name} (the quantized dtype)", zero_point.dtype.name)
    return dtype


class Quantize(OpSpec):
    """``Quantize`` (float to int8/uint8) and ``Requantize`` (int32 accumulators to int8/uint8)."""

    inputs = ("x", "scale", "zeroPoint")
    attrs = {"axis": 1, "dtype": None}

    def __init__(self, name: str, *, source: frozenset[DType]):
        self.name = name
        self.source = source

    def _check(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> tuple[TensorDesc, int, DType]:
        x = need(self.name, "x", argument(inputs, 0))
        need_dtype(self.name, "x", x, self.source)
        axis = _axis(self.name, attrs, x)
        need(self.name, "scale", argument(inputs, 1))
        _per_axis(self.name, "scale", argument(inputs, 1), x, axis, FLOATS)
        zero_point = _per_axis(self.name, "zeroPoint", argument(inputs, 2), x, axis, QUANTIZED)
        return x, axis or 0, _quant_dtype(self.name, attrs, zero_point)

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        x, _, dtype = self._check(inputs, attrs)
        return [TensorDesc.contiguous(x.shape, dtype)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        x, axis, dtype = self._check(inputs, attrs)
        out = need_output(self.name, "y", argument(outputs, 0), x.shape, dtype)
        requantize = self.name == "Requantize"

        def kernel(views: Sequence[np.ndarray | None], results: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            values, scale, result = views[0], views[1], results[0]
            assert values is not None and scale is not None and result is not None
            factor = _broadcastable(scale.astype(np.float32), axis, values.ndim)
            with ignore_fp_errors():  # a zero scale gives inf/nan: saturated, as on the device
                if requantize:  # MLAS: float32(acc) * scale, then round
                    scaled = values.astype(np.float32, copy=False) * factor
                else:  # MLAS divides by the scale
                    scaled = values.astype(np.float32, copy=False) / factor
            _round_saturate_into(result, scaled, _broadcastable(argument(views, 2), axis, values.ndim))

        return OpPlan(kernel, 0, 3.0 * x.numel, float(x.nbytes + out.nbytes))


class Dequantize(OpSpec):
    name = "Dequantize"
    inputs = ("x", "scale", "zeroPoint")
    attrs = {"axis": 1}

    def _check(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]
               ) -> tuple[TensorDesc, TensorDesc, int]:
        x = need(self.name, "x", argument(inputs, 0))
        need_dtype(self.name, "x", x, QUANTIZED | {DType.int32})
        axis = _axis(self.name, attrs, x)
        scale = need(self.name, "scale", argument(inputs, 1))
        _per_axis(self.name, "scale", scale, x, axis, FLOATS)
        zero_point = _per_axis(self.name, "zeroPoint", argument(inputs, 2), x, axis, QUANTIZED | {DType.int32})
        if zero_point is not None and zero_point.dtype != x.dtype:
            raise op_error(self.name, "zeroPoint", f"dtype {x.dtype.name} (same as x)", zero_point.dtype.name)
        return x, scale, axis or 0

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        x, scale, _ = self._check(inputs, attrs)
        return [TensorDesc.contiguous(x.shape, scale.dtype)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        x, scale_desc, axis = self._check(inputs, attrs)
        out = need_output(self.name, "y", argument(outputs, 0), x.shape, scale_desc.dtype)

        def kernel(views: Sequence[np.ndarray | None], results: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            values, scale, result = views[0], views[1], results[0]
            assert values is not None and scale is not None and result is not None
            zero_point = _broadcastable(argument(views, 2), axis, values.ndim)
            shifted = (values.astype(np.int64) - np.asarray(zero_point, np.int64)).astype(np.float32)
            copy_into(result, shifted * _broadcastable(scale.astype(np.float32), axis, values.ndim))

        return OpPlan(kernel, 0, 2.0 * x.numel, float(x.nbytes + out.nbytes))


class DynamicQuantize(OpSpec):
    name = "DynamicQuantize"
    inputs = ("x",)
    outputs = ("y", "scale", "zeroPoint")

    def _check(self, inputs: Sequence[TensorDesc | None]) -> TensorDesc:
        x = need(self.name, "x", argument(inputs, 0))
        need_dtype(self.name, "x", x, {DType.float32})
        return x

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        x = self._check(inputs)
        return [TensorDesc.contiguous(x.shape, DType.uint8), TensorDesc.contiguous((), DType.float32),
                TensorDesc.contiguous((), DType.uint8)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        x = self._check(inputs)
        out = need_output(self.name, "y", argument(outputs, 0), x.shape, DType.uint8)
        need_output(self.name, "scale", argument(outputs, 1), (), DType.float32)
        need_output(self.name, "zeroPoint", argument(outputs, 2), (), DType.uint8)

        def kernel(views: Sequence[np.ndarray | None], results: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            values, quantized, scale_out, zero_out = views[0], results[0], results[1], results[2]
            assert values is not None and quantized is not None and scale_out is not None and zero_out is not None
            bounds = scratch_view(workspace, 0, (2,), np.float32)  # the range, as the device keeps it
            bounds[0] = min(float(values.min()), 0.0) if values.size else 0.0
            bounds[1] = max(float(values.max()), 0.0) if values.size else 0.0
            low, high = np.float32(bounds[0]), np.float32(bounds[1])
            scale = np.float32(1.0) if high == low else np.float32((high - low) / np.float32(255.0))
            zero_point = np.rint(np.clip(np.float32(0.0) - low / scale, 0.0, 255.0))
            with ignore_fp_errors():
                _round_saturate_into(quantized, np.divide(values, scale), zero_point)
            copy_into(scale_out, np.asarray(scale))
            copy_into(zero_out, np.asarray(zero_point, np.uint8))

        return OpPlan(kernel, 32, 4.0 * x.numel, float(x.nbytes + out.nbytes))


def _zero_point(op: str, name: str, tensor: TensorDesc | None, data: TensorDesc, count: int, what: str) -> None:
    if tensor is None:
        return
    need_dtype(op, name, tensor, {data.dtype})
    if tensor.numel != 1 and tensor.shape != (count,):
        raise op_error(op, name, f"one element or [{count}] (one per {what})", list(tensor.shape))


class MatmulInteger(OpSpec):
    name = "MatmulInteger"
    inputs = ("a", "b", "aZeroPoint", "bZeroPoint")

    def _check(self, inputs: Sequence[TensorDesc | None]) -> tuple[TensorDesc, TensorDesc, tuple[int, ...]]:
        a, b = need(self.name, "a", argument(inputs, 0)), need(self.name, "b", argument(inputs, 1))
        need_dtype(self.name, "a", a, QUANTIZED)
        need_dtype(self.name, "b", b, QUANTIZED)
        if a.ndim < 1 or b.ndim < 1 or a.shape[-1] != (b.shape[-2] if b.ndim > 1 else b.shape[0]):
            raise op_error(self.name, "b", f"[..., {a.shape[-1] if a.ndim else '?'}, N] (rows = a's columns)",
                           list(b.shape))
        try:
            shape = _matmul_shape(a.shape, b.shape)
        except ValueError:
            raise op_error(self.name, "b", f"batch dims that broadcast with a's {list(a.shape)}",
                           list(b.shape)) from None
        _zero_point(self.name, "aZeroPoint", argument(inputs, 2), a, a.shape[-2] if a.ndim > 1 else 1, "row of a")
        _zero_point(self.name, "bZeroPoint", argument(inputs, 3), b, b.shape[-1] if b.ndim > 1 else 1,
                    "column of b")
        return a, b, tuple(shape)

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        return [TensorDesc.contiguous(self._check(inputs)[2], DType.int32)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        a, b, shape = self._check(inputs)
        out = need_output(self.name, "out", argument(outputs, 0), shape, DType.int32)
        left_shape = a.shape if a.ndim > 1 else (1,) + a.shape  # numpy's rule: 1-D operands gain a dim
        right_shape = b.shape if b.ndim > 1 else b.shape + (1,)
        product_shape = _matmul_shape(left_shape, right_shape)
        # b is multiplied unshifted (its zero point comes off as bZeroPoint * the row sums of the
        # shifted a), which keeps an int8 b within 128: float32 exact in chunks of 514 terms
        left_bound = 128 if a.dtype == DType.int8 and argument(inputs, 2) is None else 255
        strategy = ExactProduct.choose(a.shape[-1], left_bound, 128 if b.dtype == DType.int8 else 255)
        # a 2-D b takes every batch row of a in one BLAS call per block of b's columns
        flat = len(right_shape) == 2
        rows_shape = (math.prod(left_shape[:-1]),) if flat else product_shape[:-1]
        block = column_block(rows_shape[0], right_shape[0], right_shape[1]) if flat else right_shape[-1]
        converted, product = math.prod(right_shape[:-1]) * block, math.prod(rows_shape) * block  # float32 blocks
        workspace_size, offsets = scratch_layout(4 * a.numel, 4 * a.numel, 4 * converted, 4 * product,
                                                 8 * math.prod(product_shape))

        def kernel(views: Sequence[np.ndarray | None], results: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            left, right, result = views[0], views[1], results[0]
            assert left is not None and right is not None and result is not None
            shifted_a = scratch_view(workspace, offsets[0], left_shape, np.int32)
            left_float = scratch_view(workspace, offsets[1], left_shape, np.float32)
            total = scratch_view(workspace, offsets[4], product_shape, np.int64)
            a_zero, b_zero = argument(views, 2), argument(views, 3)
            np.copyto(shifted_a, left.reshape(left_shape))
            if a_zero is not None:
                np.subtract(shifted_a, np.asarray(a_zero, np.int32).reshape((-1, 1) if a_zero.size > 1 else ()),
                            out=shifted_a)
            np.copyto(left_float, shifted_a, casting="unsafe")
            strategy.multiply(left_float.reshape(rows_shape + left_shape[-1:]) if flat else left_float,
                              right.reshape(right_shape), scratch_view(workspace, offsets[2], (converted,), np.float32),
                              scratch_view(workspace, offsets[3], (product,), np.float32),
                              total.reshape(rows_shape + product_shape[-1:]) if flat else total, block)
            if b_zero is not None:
                row_sums = shifted_a.sum(axis=-1, dtype=np.int64)[..., None]
                np.subtract(total, row_sums * np.asarray(b_zero, np.int64).reshape(-1), out=total)
            copy_into(result, total.reshape(shape))  # wraps to int32, as the device's accumulators

        return OpPlan(kernel, workspace_size, 2.0 * out.numel * a.shape[-1],
                      float(a.nbytes + b.nbytes + out.nbytes + 2 * workspace_size), cube=True,
                      variant=f"blas-{strategy.name}")


def _matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """numpy's matmul shape rule (1-D operands gain and then lose a dim)."""
    left = (1,) + a if len(a) == 1 else a
    right = b + (1,) if len(b) == 1 else b
    batch = tuple(np.broadcast_shapes(left[:-2], right[:-2]))
    return batch + (left[-2],) * (len(a) > 1) + (right[-1],) * (len(b) > 1)


def _wrap_int32(product: np.ndarray) -> np.ndarray:
    """An exact float64 product (each term is below 2**16, so sums of fewer than 2**37 terms are
    exact: BLAS instead of numpy's slow integer loops) as int32, wrapping like the device."""
    return np.asarray(product.astype(np.int64).astype(np.int32))


class ConvolutionInteger(OpSpec):
    name = "ConvolutionInteger"
    inputs = ("input", "weight", "inputZeroPoint", "weightZeroPoint")
    outputs = ("output",)
    attrs = {"stride": [1], "padding": [0], "dilation": [1], "groups": 1}

    def _check(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]
               ) -> tuple[TensorDesc, TensorDesc, Window, int]:
        op = self.name
        x, weight = need(op, "input", argument(inputs, 0)), need(op, "weight", argument(inputs, 1))
        need_dtype(op, "input", x, QUANTIZED)
        need_dtype(op, "weight", weight, QUANTIZED)
        dims = spatial_format(op, "input", x, (1, 2, 3))
        groups = int_attr(op, "groups", attrs.get("groups", 1), minimum=1)
        assert groups is not None
        if weight.ndim != dims + 2 or x.shape[1] % groups or weight.shape[1] * groups != x.shape[1] \
                or weight.shape[0] % groups:
            raise op_error(op, "weight", f"[C_out, {x.shape[1] // groups} (C_in/groups), *kernel]", list(weight.shape))
        window = Window.fit(op, "input", x.shape[2:], weight.shape[2:], int_list(op, "stride", attrs.get("stride", 1),
                                                                                   dims, 1),
                            int_list(op, "padding", attrs.get("padding", 0), dims, 0),
                            int_list(op, "dilation", attrs.get("dilation", 1), dims, 1))
        _zero_point(op, "inputZeroPoint", argument(inputs, 2), x, 1, "tensor")
        _zero_point(op, "weightZeroPoint", argument(inputs, 3), weight, weight.shape[0], "output channel")
        return x, weight, window, groups

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        x, weight, window, _ = self._check(inputs, attrs)
        return [TensorDesc.contiguous((x.shape[0], weight.shape[0]) + window.out, DType.int32, format=x.format)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        x, weight, window, groups = self._check(inputs, attrs)
        shape = (x.shape[0], weight.shape[0]) + window.out
        out = need_output(self.name, "output", argument(outputs, 0), shape, DType.int32)
        columns_shape = x.shape[:2] + window.kernel + window.out
        workspace_size = 4 * math.prod(columns_shape)

        def kernel(views: Sequence[np.ndarray | None], results: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            source, filters, result = views[0], views[1], results[0]
            assert source is not None and filters is not None and result is not None
            x_zero, w_zero = argument(views, 2), argument(views, 3)
            shifted = source.astype(np.int32) - (0 if x_zero is None else np.int32(x_zero.reshape(-1)[0]))
            w_offset = 0 if w_zero is None else np.asarray(w_zero, np.int32).reshape((-1,) + (1,) * (filters.ndim - 1))
            shifted_w = (filters.astype(np.int32) - w_offset).astype(np.float64)
            padded = window.padded(shifted, 0)  # the zero point, once shifted
            columns = scratch_view(workspace, 0, columns_shape, np.int32)
            for position, slices in window.slices():
                columns[(slice(None), slice(None)) + position] = padded[(slice(None), slice(None)) + slices]
            unfolded = columns.reshape(x.shape[0], groups, -1, math.prod(window.out)).astype(np.float64)
            grouped = shifted_w.reshape(groups, weight.shape[0] // groups, -1)
            copy_into(result, _wrap_int32(np.matmul(grouped, unfolded).reshape(shape)))

        flops = 2.0 * out.numel * weight.shape[1] * math.prod(window.kernel)
        return OpPlan(kernel, workspace_size, flops, float(x.nbytes + weight.nbytes + out.nbytes + 2 * workspace_size),
                      cube=True, variant=f"im2col-int-{len(window.kernel)}d")


for _spec in (Quantize("Quantize", source=FLOATS), Quantize("Requantize", source=frozenset({DType.int32})),
              Dequantize(), DynamicQuantize(), MatmulInteger(), ConvolutionInteger()):
    register(_spec)
