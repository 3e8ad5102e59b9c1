"""Converters for the piecewise-linear ONNX activations: ``HardSigmoid``, ``HardSwish``,
``LeakyRelu``, ``PRelu``.

- ``HardSigmoid(alpha=0.2, beta=0.5)`` is ``max(0, min(1, alpha * x + beta))``.  PyTorch's
  ``hardsigmoid`` exports ``alpha=1/6``: that maps onto the catalog's ``Hardsigmoid``; other
  parameters become ``Muls``, ``Adds`` and ``Clamp``.
- ``HardSwish`` (opset 14) is ``x * HardSigmoid(x)`` with ``alpha=1/6``: ``Hardswish``.
- ``LeakyRelu(alpha=0.01)``: ``LeakyRelu(negativeSlope=alpha)``.
- ``PRelu(X, slope)``: the slope broadcasts to X (unidirectionally).  A slope holding one value,
  or one value per channel (``[C]`` on a 2-D X, ``[C, 1, ..., 1]`` on higher ranks) is the
  catalog's ``Prelu``; any other broadcastable slope is ``Where(X < 0, X * slope, X)``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .context import BuildContext, OnnxNode
from .convert_math import same_dtype
from .mapping import converts

__all__: list[str] = []

_SIXTH = np.float32(1.0 / 6.0)


@converts("HardSigmoid", 6, 22)
def convert_hard_sigmoid(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    x = inputs[0]
    alpha, beta = float(node.attr("alpha", 0.2)), float(node.attr("beta", 0.5))
    if np.float32(alpha) == _SIXTH and beta == 0.5:
        return [ctx.op("Hardsigmoid", x)]
    line = ctx.op("Adds", ctx.op("Muls", x, other=alpha), other=beta)
    return [ctx.op("Clamp", line, min=0.0, max=1.0)]


@converts("HardSwish", 14, 22)
def convert_hard_swish(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    return [ctx.op("Hardswish", inputs[0])]


@converts("LeakyRelu", 6, 16)
def convert_leaky_relu(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    return [ctx.op("LeakyRelu", inputs[0], negativeSlope=float(node.attr("alpha", 0.01)))]


@converts("PRelu", 9, 16)
def convert_prelu(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    x, slope = inputs
    same_dtype(ctx, node, [x, slope])
    shape, slope_shape = ctx.shape(x), ctx.shape(slope)
    if np.broadcast_shapes(tuple(shape), tuple(slope_shape)) != tuple(shape):
        raise ValueError(f"{node.describe()}: slope {list(slope_shape)} does not broadcast to X {list(shape)}")
    per_channel = _channel_vector(shape, slope_shape)
    if per_channel is not None:
        return [ctx.op("Prelu", x, ctx.op("Reshape", slope, shape=[per_channel]))]
    zero = ctx.constant(np.zeros((), ctx.dtype(x).numpy))
    return [ctx.op("Where", ctx.op("LtTensor", x, zero), ctx.op("Mul", x, slope), x)]


def _channel_vector(shape: tuple[int, ...], slope_shape: tuple[int, ...]) -> int | None:
    """The slope's length when it is one value, or one per channel (dim 1 of X), else None."""
    count = math.prod(slope_shape)
    if count == 1:
        return 1
    if len(shape) < 2:
        return count if len(slope_shape) == 1 and count == shape[-1] else None
    # Aligned to the right, the slope must be [C, 1, ..., 1] sitting on X's dim 1.
    expected = (shape[1],) + (1,) * (len(shape) - 2)
    trimmed = tuple(slope_shape[len(slope_shape) - len(expected):]) if len(slope_shape) >= len(expected) else None
    leading = slope_shape[:len(slope_shape) - len(expected)] if trimmed is not None else ()
    if trimmed == expected and all(d == 1 for d in leading):
        return shape[1]
    return None
