"""Small CNNs written the way exporters write them.

- ``make_mobile``: a MobileNetV3-style net on ``x[batch, 3, height, width]`` (all three dims
  symbolic): Conv/BatchNormalization/HardSwish stem, depthwise convolutions (``group`` =
  channels), a squeeze-excite block (GlobalAveragePool, 1x1 convs, HardSigmoid, Mul), ReLU6 as
  ``Clip``, a residual Add, GlobalAveragePool, Flatten (or a ``Shape``-built Reshape) and Gemm.
- ``make_ocr``: a text-line segmenter on ``x[batch, 1, 32, width]`` (batch and width symbolic):
  convolutions with LeakyRelu/PRelu, MaxPool, ConvTranspose upsampling, Resize (nearest by
  scales, linear to ``Shape``-computed sizes), Concat skips, a reflect Pad, Sigmoid; and a
  CTC-style head (ReduceMean over the height, Transpose, Softmax, ArgMax, TopK).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from .builder import ModelBuilder

__all__ = ["make_mobile", "make_ocr"]


class _Net:
    def __init__(self, name: str, opset: int, seed: int):
        self.b = ModelBuilder(name, opset, seed)
        self.opset = opset

    def conv(self, x: str, c_in: int, c_out: int, kernel: int, stride: int = 1, pad: int | None = None,
             group: int = 1, bias: bool = False) -> str:
        pad = kernel // 2 if pad is None else pad
        weight = self.b.weight("conv_w", (c_out, c_in // group, kernel, kernel))
        inputs = [x, weight] + ([self.b.weight("conv_b", (c_out,), 0.1)] if bias else [])
        return self.b.node("Conv", inputs, kernel_shape=[kernel, kernel], strides=[stride, stride],
                           pads=[pad] * 4, group=group)

    def batch_norm(self, x: str, channels: int) -> str:
        b = self.b
        return b.node("BatchNormalization", [x, b.weight("bn_scale", (channels,), 0.1, 1.0),
                                             b.weight("bn_bias", (channels,), 0.1),
                                             b.weight("bn_mean", (channels,), 0.1),
                                             b.initializer("bn_var", np.abs(b.rng.standard_normal(channels))
                                                           .astype(np.float32) * 0.2 + 0.8)],
                      epsilon=1e-3)

    def relu6(self, x: str) -> str:
        b = self.b
        return b.node("Clip", [x, b.constant(np.array(0.0, np.float32)), b.constant(np.array(6.0, np.float32))])

    def hard_swish(self, x: str) -> str:
        if self.opset >= 14:
            return self.b.node("HardSwish", [x])
        gate = self.b.node("HardSigmoid", [x], alpha=1.0 / 6.0, beta=0.5)
        return self.b.node("Mul", [x, gate])


def make_mobile(opset: int = 13, seed: int = 1) -> onnx.ModelProto:
    """MobileNetV3-style classifier: ``x[batch, 3, height, width]`` -> ``logits[batch, 10]``."""
    net = _Net(f"mobile_opset{opset}", opset, seed)
    b = net.b
    x = b.input("x", ["batch", 3, "height", "width"])
    stem = net.hard_swish(net.batch_norm(net.conv(x, 3, 16, 3, stride=2), 16))
    # Block 1: depthwise 3x3, squeeze-excite, pointwise, residual.
    depthwise = b.node("Relu", [net.batch_norm(net.conv(stem, 16, 16, 3, group=16), 16)])
    squeezed = b.node("GlobalAveragePool", [depthwise])
    excite = net.conv(b.node("Relu", [net.conv(squeezed, 16, 8, 1, bias=True)]), 8, 16, 1, bias=True)
    gated = b.node("Mul", [depthwise, b.node("HardSigmoid", [excite], alpha=1.0 / 6.0, beta=0.5)])
    block1 = b.node("Add", [net.batch_norm(net.conv(gated, 16, 16, 1), 16), stem])
    # Block 2: expand with ReLU6, strided depthwise 5x5, project.
    expanded = net.relu6(net.batch_norm(net.conv(block1, 16, 32, 1), 32))
    strided = net.relu6(net.batch_norm(net.conv(expanded, 32, 32, 5, stride=2, group=32), 32))
    block2 = net.batch_norm(net.conv(strided, 32, 24, 1), 24)
    head = net.hard_swish(net.conv(block2, 24, 64, 1, bias=True))
    pooled = b.node("GlobalAveragePool", [head])
    if opset >= 13:
        flat = b.node("Flatten", [pooled], axis=1)
    else:  # torch.flatten as older exporters wrote it: Reshape to Concat(Shape[0], -1)
        batch = b.node("Unsqueeze", [b.node("Gather", [b.node("Shape", [pooled]),
                                                        b.constant(np.array(0, np.int64))], axis=0)], axes=[0])
        flat = b.node("Reshape", [pooled, b.node("Concat", [batch, b.ints([-1])], axis=0)])
    logits = b.node("Gemm", [flat, b.weight("fc_w", (10, 64)), b.weight("fc_b", (10,), 0.1)], transB=1,
                    alpha=1.0, beta=1.0)
    b.output(logits, ["batch", 10])
    return b.model()


def make_ocr(opset: int = 13, seed: int = 2) -> onnx.ModelProto:
    """Text-line segmenter: ``x[batch, 1, 32, width]`` (width a multiple of 4) -> ``mask[batch, 8, 32, width]``,
    ``probs[batch, width, 8]``, ``best[batch, width]`` (int64), ``top2[batch, width, 2]`` (int64)."""
    net = _Net(f"ocr_opset{opset}", opset, seed)
    b = net.b
    x = b.input("x", ["batch", 1, 32, "width"])
    c1 = b.node("Relu", [net.conv(x, 1, 8, 3, bias=True)])
    p1 = b.node("MaxPool", [c1], kernel_shape=[2, 2], strides=[2, 2])
    c2 = b.node("LeakyRelu", [net.conv(p1, 8, 16, 3, bias=True)], alpha=0.1)
    p2 = b.node("MaxPool", [c2], kernel_shape=[2, 2], strides=[2, 2])
    c3 = b.node("PRelu", [net.conv(p2, 16, 16, 3, bias=True), b.weight("prelu", (16, 1, 1), 0.1, 0.25)])
    up = b.node("ConvTranspose", [c3, b.weight("deconv_w", (16, 8, 2, 2), 0.25), b.weight("deconv_b", (8,), 0.1)],
                kernel_shape=[2, 2], strides=[2, 2])
    merged = b.node("Concat", [up, c2], axis=1)  # [batch, 24, 16, width / 2]
    empty = b.constant(np.zeros(0, np.float32), "empty")
    nearest = b.node("Resize", [merged, empty, b.constant(np.array([1, 1, 2, 2], np.float32))], mode="nearest")
    # A linear branch resized to c1's size, as exporters write F.interpolate(size=other.shape[2:]).
    sizes = b.node("Concat", [b.node("Slice", [b.node("Shape", [merged]), b.ints([0]), b.ints([2]), b.ints([0])]),
                              b.node("Slice", [b.node("Shape", [c1]), b.ints([2]), b.ints([4]), b.ints([0])])],
                   axis=0)
    linear = b.node("Resize", [merged, empty, empty, sizes], mode="linear",
                    coordinate_transformation_mode="pytorch_half_pixel")
    fused = b.node("Concat", [b.node("Add", [nearest, linear]), c1], axis=1)  # [batch, 32, 32, width]
    pads = b.ints([0, 0, 1, 1, 0, 0, 1, 1])
    padded = b.node("Pad", [fused, pads], mode="reflect")
    mask = b.node("Sigmoid", [net.conv(padded, 32, 8, 3, pad=0, bias=True)])
    b.output(mask, ["batch", 8, 32, "width"])
    column = b.node("ReduceMean", [mask], axes=[2], keepdims=0) if opset < 18 else \
        b.node("ReduceMean", [mask, b.ints([2])], keepdims=0)
    logits = b.node("Transpose", [column], perm=[0, 2, 1])
    probs = b.node("Softmax", [logits], axis=-1)
    b.output(probs, ["batch", "width", 8])
    b.output(b.node("ArgMax", [logits], axis=-1, keepdims=0), ["batch", "width"], TensorProto.INT64)
    _, top2 = b.node("TopK", [probs, b.ints([2])], outputs=2, axis=-1)
    b.output(top2, ["batch", "width", 2], TensorProto.INT64)
    return b.model()
