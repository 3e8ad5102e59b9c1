"""Converters for ONNX's quantized ops on int8/uint8 (catalog :mod:`aclpipe.ops.quant`).

onnxruntime's CPU kernels (MLAS) are the reference these follow bit for bit: quantization
divides by the scale in float32 and rounds ties to even before adding the zero point and
saturating; the QLinear ops accumulate exactly in int32 (``ConvInteger``/``MatMulInteger``)
and requantize with the float32 multiplier ``x_scale * w_scale / y_scale`` (computed in that
order, on the host when the scales are constants), adding ``QLinearConv``'s int32 bias to
the accumulator first.

- ``QuantizeLinear`` / ``DequantizeLinear``: per-tensor or per-axis (``axis``); the
  ``block_size`` of opset 21 and the float8/int4 types are not supported.
- ``DynamicQuantizeLinear``: uint8 with the range widened to include 0.
- ``MatMulInteger``, ``ConvInteger``, ``QLinearMatMul``, ``QLinearConv``.
"""

from __future__ import annotations

import math
from typing import Any

from ..dtypes import DType
from .context import BuildContext, OnnxNode, normalize_axis, onnx_dtype
from .convert_nn import conv_attrs
from .mapping import converts

__all__: list[str] = []


def _axis(node: OnnxNode, ctx: BuildContext, x: Any, scale: Any) -> int:
    """The quantization axis; ignored (0) for a per-tensor scale, as ONNX ignores it then."""
    rank = len(ctx.shape(x))
    if not rank or math.prod(ctx.shape(scale)) == 1:
        return 0
    return normalize_axis(node, int(node.attr("axis", 1)), rank)


def _check_block(node: OnnxNode) -> None:
    if int(node.attr("block_size", 0) or 0):
        raise node.unsupported("blocked quantization (block_size > 0)")


@converts("QuantizeLinear", 10, 13, 19, 21, 23, 24, 25, 28)
def convert_quantize(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    _check_block(node)
    x, scale = inputs[0], inputs[1]
    zero_point = inputs[2] if len(inputs) > 2 else None
    dtype = ctx.dtype(zero_point) if zero_point is not None else DType.uint8
    wanted = node.attr("output_dtype", 0) or 0
    if wanted:
        dtype = onnx_dtype(int(wanted), node)
    if dtype not in (DType.int8, DType.uint8):
        raise node.unsupported(f"quantizing to {dtype.name} (int8 and uint8 are supported)")
    return [ctx.op("Quantize", x, scale, zero_point, axis=_axis(node, ctx, x, scale), dtype=dtype)]


@converts("DequantizeLinear", 10, 13, 19, 21, 23, 24, 25, 28)
def convert_dequantize(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    _check_block(node)
    x, scale = inputs[0], inputs[1]
    zero_point = inputs[2] if len(inputs) > 2 else None
    if ctx.dtype(x) not in (DType.int8, DType.uint8, DType.int32):
        raise node.unsupported(f"dequantizing {ctx.dtype(x).name} (int8, uint8 and int32 are supported)")
    return [ctx.op("Dequantize", x, scale, zero_point, axis=_axis(node, ctx, x, scale))]


@converts("DynamicQuantizeLinear", 11)
def convert_dynamic_quantize(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    return list(ctx.op("DynamicQuantize", inputs[0], outputs=3))


@converts("MatMulInteger", 10)
def convert_matmul_integer(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    a, b = inputs[0], inputs[1]
    a_zero = inputs[2] if len(inputs) > 2 else None
    b_zero = inputs[3] if len(inputs) > 3 else None
    return [ctx.op("MatmulInteger", a, b, a_zero, b_zero)]


@converts("ConvInteger", 10)
def convert_conv_integer(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    x, weight = inputs[0], inputs[1]
    x_zero = inputs[2] if len(inputs) > 2 else None
    w_zero = inputs[3] if len(inputs) > 3 else None
    x, attrs = conv_attrs(ctx, node, x, weight, pad_value=x_zero)
    return [ctx.op("ConvolutionInteger", x, weight, x_zero, w_zero, **attrs)]


def _multiplier(ctx: BuildContext, x_scale: Any, w_scale: Any, y_scale: Any) -> Any:
    """``x_scale * w_scale / y_scale`` in float32, in onnxruntime's order."""
    return ctx.op("Div", ctx.op("Mul", x_scale, w_scale), y_scale)


def _requantize(ctx: BuildContext, accumulated: Any, multiplier: Any, y_zero: Any, channel_axis: int) -> Any:
    dtype = ctx.dtype(y_zero)
    return ctx.op("Requantize", accumulated, multiplier, y_zero, axis=channel_axis, dtype=dtype)


@converts("QLinearMatMul", 10, 21)
def convert_qlinear_matmul(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero = inputs
    accumulated = ctx.op("MatmulInteger", a, b, a_zero, b_zero)
    multiplier = _multiplier(ctx, a_scale, b_scale, y_scale)
    return [_requantize(ctx, accumulated, multiplier, y_zero, len(ctx.shape(accumulated)) - 1)]


@converts("QLinearConv", 10)
def convert_qlinear_conv(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    x, x_scale, x_zero, weight, w_scale, w_zero, y_scale, y_zero = inputs[:8]
    bias = inputs[8] if len(inputs) > 8 else None
    x, attrs = conv_attrs(ctx, node, x, weight, pad_value=x_zero)
    accumulated = ctx.op("ConvolutionInteger", x, weight, x_zero, w_zero, **attrs)
    if bias is not None:
        shape = [1, ctx.shape(bias)[0]] + [1] * (len(ctx.shape(accumulated)) - 2)
        accumulated = ctx.op("Add", accumulated, ctx.op("Reshape", bias, shape=shape))
    multiplier = _multiplier(ctx, x_scale, w_scale, y_scale)
    return [_requantize(ctx, accumulated, multiplier, y_zero, 1)]
