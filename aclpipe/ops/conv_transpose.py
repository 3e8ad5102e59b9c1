"""``ConvTranspose``: transposed convolution (``torch.nn.functional.conv_transpose1d/2d/3d``).

aclnnConvolution with ``transposed=True`` in CANN; aclpipe's ``Convolution`` refuses that
flag, so the transposed form is its own catalog entry with the same attribute names:
``stride``, ``padding``, ``dilation``, ``outputPadding``, ``groups``, ``cubeMathType``.

Shapes: input ``[N, C_in, *in]`` (NCL, NCHW or NCDHW), weight ``[C_in, C_out / groups, *kernel]``,
optional bias ``[C_out]``; output ``[N, C_out, *out]`` with
``out = (in - 1) * stride - 2 * padding + dilation * (kernel - 1) + outputPadding + 1``.
``outputPadding`` must be smaller than ``stride`` or ``dilation`` (PyTorch's rule).

The kernel is col2im: per group it multiplies the transposed weight by the input, giving one
column per kernel tap and input position, then adds every column into the output canvas at
``position * stride + tap * dilation`` and crops ``padding``.  Both the columns and the
canvas are fp32 and live in the workspace
(``N * C_out * prod(kernel) * prod(in) * 4 + N * C_out * prod(canvas) * 4`` bytes).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..tensor import TensorDesc
from .base import Kernel, OpPlan, OpSpec, op_error
from .checks import FLOATS, need, need_dtype, need_output, need_same_dtype, scratch_layout, scratch_view, store
from .conv import int_list, spatial_format
from .matmul import cube_math_type, cube_operand
from .registry import register

__all__ = ["ConvTranspose"]


@dataclass(frozen=True)
class _Call:
    x: TensorDesc
    weight: TensorDesc
    bias: TensorDesc | None
    groups: int
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    out: tuple[int, ...]
    canvas: tuple[int, ...]  # every position a tap reaches, before cropping the padding

    @property
    def out_channels(self) -> int:
        return self.weight.shape[1] * self.groups

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.x.shape[0], self.out_channels) + self.out


class ConvTranspose(OpSpec):
    """``aclnnConvolution`` with ``transposed=true``: 1-D and 2-D transposed convolution."""

    name = "ConvTranspose"
    inputs = ("input", "weight", "bias")
    outputs = ("output",)
    attrs = {"stride": [1], "padding": [0], "dilation": [1], "outputPadding": [0], "groups": 1, "cubeMathType": 0}

    def _call(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> _Call:
        op = self.name
        x, weight = need(op, "input", inputs[0] if inputs else None), need(op, "weight", inputs[1] if
                                                                             len(inputs) > 1 else None)
        bias = inputs[2] if len(inputs) > 2 else None
        dims = spatial_format(op, "input", x, (1, 2, 3))
        for name, tensor in (("input", x), ("weight", weight), ("bias", bias)):
            if tensor is not None:
                need_dtype(op, name, tensor, FLOATS)
        need_same_dtype(op, ("input", "weight"), (x, weight))
        stride = int_list(op, "stride", attrs.get("stride", 1), dims, 1)
        padding = int_list(op, "padding", attrs.get("padding", 0), dims, 0)
        dilation = int_list(op, "dilation", attrs.get("dilation", 1), dims, 1)
        extra = int_list(op, "outputPadding", attrs.get("outputPadding", 0), dims, 0)
        if any(e >= max(s, d) for e, s, d in zip(extra, stride, dilation)):
            raise op_error(op, "outputPadding", "values smaller than stride or dilation", list(extra))
        groups = self._groups(x, attrs.get("groups", 1))
        if weight.ndim != dims + 2 or weight.shape[0] != x.shape[1] or weight.shape[1] == 0 \
                or any(k < 1 for k in weight.shape[2:]):
            raise op_error(op, "weight", f"[{x.shape[1]} (C_in), C_out/groups, *kernel] with {dims} kernel dims",
                           list(weight.shape))
        if bias is not None and bias.shape != (weight.shape[1] * groups,):
            raise op_error(op, "bias", f"shape [{weight.shape[1] * groups}] (C_out)", list(bias.shape))
        spans = [d * (k - 1) + 1 for d, k in zip(dilation, weight.shape[2:])]
        full = [(size - 1) * s + span for size, s, span in zip(x.shape[2:], stride, spans)]
        out = tuple(f - 2 * p + e for f, p, e in zip(full, padding, extra))
        if any(o < 1 for o in out) or any(size < 1 for size in x.shape[2:]):
            raise op_error(op, "input", "spatial sizes that give an output of at least 1 (padding too large?)",
                           f"{list(x.shape)} -> {list(out)}")
        canvas = tuple(max(f, p + o) for f, p, o in zip(full, padding, out))
        return _Call(x, weight, bias, groups, stride, padding, dilation, out, canvas)

    def _groups(self, x: TensorDesc, groups: Any) -> int:
        channels = x.shape[1]
        if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1 or channels % groups:
            raise op_error(self.name, "groups", f"a positive divisor of the {channels} input channels", repr(groups))
        return int(groups)

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        call = self._call(inputs, attrs)
        cube_math_type(self.name, attrs)
        return [TensorDesc.contiguous(call.shape, call.x.dtype, format=call.x.format)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        call = self._call(inputs, attrs)
        mode = cube_math_type(self.name, attrs)
        out = need_output(self.name, "output", outputs[0] if outputs else None, call.shape, call.x.dtype)
        batch, kernel_size = call.x.shape[0], call.weight.shape[2:]
        columns = batch * call.out_channels * math.prod(kernel_size) * math.prod(call.x.shape[2:])
        canvas = batch * call.out_channels * math.prod(call.canvas)
        workspace_size, offsets = scratch_layout(columns * 4, canvas * 4)
        flops = 2.0 * columns * (call.x.shape[1] // call.groups)
        traffic = float(call.x.nbytes + call.weight.nbytes + out.nbytes + 2 * workspace_size)
        return OpPlan(_col2im_kernel(call, mode, offsets), workspace_size, flops, traffic, cube=True,
                      variant=f"col2im-{len(kernel_size)}d")


def _col2im_kernel(call: _Call, mode: int, offsets: tuple[int, ...]) -> Kernel:
    batch, in_channels = call.x.shape[:2]
    groups, out_channels = call.groups, call.out_channels
    kernel_size, spatial = call.weight.shape[2:], call.x.shape[2:]
    per_group_out = out_channels // groups
    columns_shape = (batch, groups, per_group_out) + tuple(kernel_size) + tuple(spatial)
    canvas_shape = (batch, out_channels) + call.canvas
    crop = (slice(None), slice(None)) + tuple(slice(p, p + o) for p, o in zip(call.padding, call.out))
    dtype = call.x.dtype

    def kernel(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray | None],
               workspace: np.ndarray | None) -> None:
        x, weight, out = inputs[0], inputs[1], outputs[0]
        bias = inputs[2] if len(inputs) > 2 else None
        assert x is not None and weight is not None and out is not None
        columns = scratch_view(workspace, offsets[0], columns_shape, np.float32)
        canvas = scratch_view(workspace, offsets[1], canvas_shape, np.float32)
        # [C_in, C_out/g, *k] -> per group [C_out/g * prod(k), C_in/g]; input -> [N, g, C_in/g, prod(in)].
        filters = cube_operand(weight, dtype, mode).reshape(groups, in_channels // groups, -1).transpose(0, 2, 1)
        images = cube_operand(x, dtype, mode).reshape(batch, groups, in_channels // groups, -1)
        columns.reshape(batch, groups, filters.shape[1], -1)[...] = np.matmul(filters, images)
        canvas[...] = 0
        grouped = canvas.reshape((batch, groups, per_group_out) + call.canvas)
        for tap in itertools.product(*(range(k) for k in kernel_size)):
            target = tuple(slice(t * d, t * d + s * (n - 1) + 1, s)
                           for t, d, s, n in zip(tap, call.dilation, call.stride, spatial))
            grouped[(slice(None), slice(None), slice(None)) + target] += columns[(slice(None),) * 3 + tap]
        result = canvas[crop]
        if bias is not None:
            result = result + bias.astype(np.float32).reshape((-1,) + (1,) * len(spatial))
        store(out, result)

    return kernel


register(ConvTranspose())
