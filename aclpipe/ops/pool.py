"""2-D pooling over the last two dims of ``[N, C, H, W]`` (NCHW) or ``[C, H, W]`` inputs.

- ``MaxPool2d`` stands for ``aclnnMaxPool2dWithIndices`` without the ``indices`` output
  (CANN has no plain ``aclnnMaxPool2d``; aclpipe graphs only need the values).  Attributes
  ``kernelSize``, ``stride`` (empty or missing: ``kernelSize``), ``padding`` (at most half
  the kernel, as PyTorch requires), ``dilation``, ``ceilMode``.  NaN propagates.
- ``AvgPool2d`` follows ``aclnnAvgPool2d``: ``kernelSize``, ``strides``, ``paddings``,
  ``ceilMode``, ``countIncludePad`` (default True), ``divisorOverride`` (0: none) and
  ``cubeMathType``, which is validated (0..4) and otherwise has no effect: the simulator
  sums in float32 on the vector unit.
- ``AdaptiveAvgPool2d`` takes ``outputSize`` (1 or 2 ints); window ``i`` of an axis covers
  ``[floor(i*in/out), ceil((i+1)*in/out))`` like PyTorch.

Inputs are float32, float16 or bfloat16, computed in float32; the output keeps the input's
dtype and format.  None of them needs a workspace.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..dtypes import Format
from ..tensor import TensorDesc
from .base import Kernel, OpPlan, OpSpec, op_error
from .checks import FLOATS, compute_view, need, need_dtype, need_output, store
from .conv import Window, int_list
from .matmul import cube_math_type
from .registry import register

__all__ = ["AdaptiveAvgPool2d", "AvgPool2d", "MaxPool2d"]


def _flag(op: str, name: str, attrs: Mapping[str, Any], default: bool) -> bool:
    value = attrs.get(name, default)
    if value is None:
        return default
    if not isinstance(value, (bool, np.bool_, int)) or value not in (0, 1):
        raise op_error(op, name, "a bool", repr(value))
    return bool(value)


class _Pool2d(OpSpec):
    """Shared input checks, output descriptor and plan for the pooling ops."""

    inputs = ("self",)

    def _input(self, inputs: Sequence[TensorDesc | None]) -> TensorDesc:
        x = need(self.name, "self", inputs[0] if inputs else None)
        need_dtype(self.name, "self", x, FLOATS)
        if x.ndim not in (3, 4):
            raise op_error(self.name, "self", "3-D [C, H, W] or 4-D [N, C, H, W] (NCHW)", list(x.shape))
        if x.format not in (Format.ND, Format.NCHW):
            raise op_error(self.name, "self", "format ND or NCHW", x.format.name)
        return x

    def _output_spatial(self, x: TensorDesc, attrs: Mapping[str, Any]) -> tuple[int, int]:
        raise NotImplementedError

    def _kernel(self, x: TensorDesc, attrs: Mapping[str, Any]) -> tuple[Kernel, float]:
        """The kernel and its flops per output element."""
        raise NotImplementedError

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        x = self._input(inputs)
        shape = x.shape[:-2] + self._output_spatial(x, attrs)
        return [TensorDesc.contiguous(shape, x.dtype, format=x.format)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        x = self._input(inputs)
        shape = x.shape[:-2] + self._output_spatial(x, attrs)
        out = need_output(self.name, "out", outputs[0] if outputs else None, shape, x.dtype)
        kernel, flops_per_output = self._kernel(x, attrs)
        return OpPlan(kernel, 0, out.numel * flops_per_output, float(x.nbytes + out.nbytes))


class _SlidingPool2d(_Pool2d):
    """Pools whose windows slide with kernel, stride, padding (and dilation)."""

    keys = ("kernelSize", "stride", "padding", "dilation")

    def _window(self, x: TensorDesc, attrs: Mapping[str, Any]) -> Window:
        kernel_key, stride_key, padding_key, dilation_key = self.keys
        kernel = int_list(self.name, kernel_key, attrs.get(kernel_key), 2, 1)
        stride_value = attrs.get(stride_key)
        stride = int_list(self.name, stride_key, stride_value, 2, 1) if stride_value not in (None, []) else kernel
        padding = int_list(self.name, padding_key, attrs.get(padding_key, 0), 2, 0)
        dilation = int_list(self.name, dilation_key, attrs.get(dilation_key, 1), 2, 1) if dilation_key else (1, 1)
        if any(2 * p > k for p, k in zip(padding, kernel)):
            raise op_error(self.name, padding_key, f"at most half the kernel size {list(kernel)}", list(padding))
        ceil_mode = _flag(self.name, "ceilMode", attrs, False)
        return Window.fit(self.name, "self", x.shape[-2:], kernel, stride, padding, dilation, ceil_mode)

    def _output_spatial(self, x: TensorDesc, attrs: Mapping[str, Any]) -> tuple[int, int]:
        out = self._window(x, attrs).out
        return out[0], out[1]


def _pooled(values: np.ndarray, window: Window, fill: float, combine: Any) -> np.ndarray:
    """``combine`` folded over every kernel position of ``values`` padded with ``fill``."""
    padded = window.padded(values, fill)
    lead = (slice(None),) * (padded.ndim - 2)
    result = np.full(values.shape[:-2] + window.out, fill, dtype=np.float32)
    for _, slices in window.slices():
        result = combine(result, padded[lead + slices])
    return result


class MaxPool2d(_SlidingPool2d):
    """``aclnnMaxPool2dWithIndices`` without the indices: maximum over kernel windows (NCHW)."""

    name = "MaxPool2d"
    attrs = {"kernelSize": None, "stride": [], "padding": [0], "dilation": [1], "ceilMode": False}

    def _kernel(self, x: TensorDesc, attrs: Mapping[str, Any]) -> tuple[Kernel, float]:
        window, dtype = self._window(x, attrs), x.dtype

        def kernel(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            source, out = inputs[0], outputs[0]
            assert source is not None and out is not None
            if out.size:
                store(out, _pooled(compute_view(source, dtype), window, -np.inf, np.maximum))

        return kernel, float(math.prod(window.kernel))


class AvgPool2d(_SlidingPool2d):
    """``aclnnAvgPool2d``: average over kernel windows (NCHW)."""

    name = "AvgPool2d"
    keys = ("kernelSize", "strides", "paddings", "")
    attrs = {"kernelSize": None, "strides": [], "paddings": [0], "ceilMode": False, "countIncludePad": True,
             "divisorOverride": 0, "cubeMathType": 0}

    def _kernel(self, x: TensorDesc, attrs: Mapping[str, Any]) -> tuple[Kernel, float]:
        window, dtype = self._window(x, attrs), x.dtype
        cube_math_type(self.name, attrs)
        divisor = self._divisor(x, window, attrs)

        def kernel(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            source, out = inputs[0], outputs[0]
            assert source is not None and out is not None
            if out.size:
                store(out, _pooled(compute_view(source, dtype), window, 0.0, np.add) / divisor)

        return kernel, float(math.prod(window.kernel))

    def _divisor(self, x: TensorDesc, window: Window, attrs: Mapping[str, Any]) -> np.ndarray:
        override = attrs.get("divisorOverride", 0) or 0
        if isinstance(override, bool) or not isinstance(override, (int, np.integer)) or override < 0:
            raise op_error(self.name, "divisorOverride", "an int >= 0 (0: no override)", repr(override))
        include_pad = _flag(self.name, "countIncludePad", attrs, True)
        if override:
            return np.array(override, dtype=np.float32)
        counts = []
        for size, k, s, p, o in zip(x.shape[-2:], window.kernel, window.stride, window.padding, window.out):
            starts = np.arange(o) * s - p
            if include_pad:
                counts.append(np.minimum(starts + k, size + p) - starts)
            else:
                counts.append(np.minimum(starts + k, size) - np.maximum(starts, 0))
        return np.outer(counts[0], counts[1]).astype(np.float32)


class AdaptiveAvgPool2d(_Pool2d):
    """``aclnnAdaptiveAvgPool2d``: average pooling to a given output size."""

    name = "AdaptiveAvgPool2d"
    attrs = {"outputSize": None}

    def _output_spatial(self, x: TensorDesc, attrs: Mapping[str, Any]) -> tuple[int, int]:
        size = int_list(self.name, "outputSize", attrs.get("outputSize"), 2, 1)
        return size[0], size[1]

    def _kernel(self, x: TensorDesc, attrs: Mapping[str, Any]) -> tuple[Kernel, float]:
        out_h, out_w = self._output_spatial(x, attrs)
        rows, cols = _averaging(x.shape[-2], out_h), _averaging(x.shape[-1], out_w)
        dtype = x.dtype

        def kernel(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            source, out = inputs[0], outputs[0]
            assert source is not None and out is not None
            if out.size:
                store(out, np.einsum("hi,...ij,wj->...hw", rows, compute_view(source, dtype), cols))

        # An adaptive window spans at most ceil(in / out) + 1 elements per axis.
        largest_window = (math.ceil(x.shape[-2] / out_h) + 1) * (math.ceil(x.shape[-1] / out_w) + 1)
        return kernel, float(largest_window)


def _averaging(size: int, out: int) -> np.ndarray:
    """``[out, size]`` matrix whose row ``i`` averages PyTorch's adaptive window ``i``."""
    matrix = np.zeros((out, size), dtype=np.float32)
    for index in range(out):
        start, end = (index * size) // out, -(-((index + 1) * size) // out)
        matrix[index, start:end] = 1.0 / max(end - start, 1)
    return matrix


for _spec in (MaxPool2d(), AvgPool2d(), AdaptiveAvgPool2d()):
    register(_spec)
