"""3-D pooling and max pooling with indices.

- ``MaxPool3d`` and ``AvgPool3d`` pool the last three dims of ``[N, C, D, H, W]`` (NCDHW) or
  ``[C, D, H, W]`` inputs.  ``MaxPool3d`` stands for ``aclnnMaxPool3dWithArgmax`` without the
  argmax output (attributes ``kernelSize``, ``stride`` (empty: ``kernelSize``), ``padding``,
  ``dilation``, ``ceilMode``); ``AvgPool3d`` follows ``aclnnAvgPool3d`` (``kernelSize``,
  ``stride``, ``padding``, ``ceilMode``, ``countIncludePad`` (default True),
  ``divisorOverride``).  Padding is at most half the kernel (PyTorch's rule).
- ``MaxPool2dWithIndices`` follows ``aclnnMaxPool2dWithIndices``: ``MaxPool2d``'s values
  and, per output element, the flat index ``h * W + w`` of the input element it came from
  within its ``[H, W]`` plane (int64; the first maximum in window order wins, as in PyTorch).

Inputs are float32, float16 or bfloat16, computed in float32.  None needs a workspace.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..dtypes import DType, Format
from ..tensor import TensorDesc
from .base import OpPlan, OpSpec, op_error
from .checks import FLOATS, argument, compute_view, need, need_dtype, need_output, store
from .conv import Window, int_list
from .pool import _flag
from .registry import register

__all__ = ["PoolNd"]

_FORMATS = {2: Format.NCHW, 3: Format.NCDHW}


class PoolNd(OpSpec):
    """Max or average pooling over the trailing ``dims`` spatial dims (optionally with indices)."""

    inputs = ("self",)

    def __init__(self, name: str, dims: int, *, average: bool, indices: bool = False):
        self.name = name
        self.dims = dims
        self.average = average
        self.indices = indices
        self.outputs = ("out", "indices") if indices else ("out",)
        self.attrs = ({"kernelSize": None, "stride": [], "padding": [0], "ceilMode": False, "countIncludePad": True,
                       "divisorOverride": 0} if average else
                      {"kernelSize": None, "stride": [], "padding": [0], "dilation": [1], "ceilMode": False})

    def _input(self, inputs: Sequence[TensorDesc | None]) -> TensorDesc:
        x = need(self.name, "self", argument(inputs, 0))
        need_dtype(self.name, "self", x, FLOATS)
        if x.ndim not in (self.dims + 1, self.dims + 2):
            expected = f"{self.dims + 1}-D or {self.dims + 2}-D (N, C, {self.dims} spatial dims)"
            raise op_error(self.name, "self", expected, list(x.shape))
        if x.format not in (Format.ND, _FORMATS[self.dims]):
            raise op_error(self.name, "self", f"format ND or {_FORMATS[self.dims].name}", x.format.name)
        return x

    def _window(self, x: TensorDesc, attrs: Mapping[str, Any]) -> Window:
        dims, op = self.dims, self.name
        kernel = int_list(op, "kernelSize", attrs.get("kernelSize"), dims, 1)
        stride_value = attrs.get("stride")
        stride = int_list(op, "stride", stride_value, dims, 1) if stride_value not in (None, []) else kernel
        padding = int_list(op, "padding", attrs.get("padding", 0), dims, 0)
        dilation = (1,) * dims if self.average else int_list(op, "dilation", attrs.get("dilation", 1), dims, 1)
        if any(2 * p > k for p, k in zip(padding, kernel)):
            raise op_error(op, "padding", f"at most half the kernel size {list(kernel)}", list(padding))
        ceil_mode = _flag(op, "ceilMode", attrs, False)
        return Window.fit(op, "self", x.shape[-dims:], kernel, stride, padding, dilation, ceil_mode)

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        x = self._input(inputs)
        shape = x.shape[:-self.dims] + self._window(x, attrs).out
        values = TensorDesc.contiguous(shape, x.dtype, format=x.format)
        return [values, TensorDesc.contiguous(shape, DType.int64)] if self.indices else [values]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        x = self._input(inputs)
        window = self._window(x, attrs)
        shape = x.shape[:-self.dims] + window.out
        out = need_output(self.name, "out", argument(outputs, 0), shape, x.dtype)
        if self.indices:
            need_output(self.name, "indices", argument(outputs, 1), shape, DType.int64)
        kernel = self._average_kernel(x, window, attrs) if self.average else self._max_kernel(x, window)
        return OpPlan(kernel, 0, float(out.numel * math.prod(window.kernel)), float(x.nbytes + out.nbytes))

    def _max_kernel(self, x: TensorDesc, window: Window) -> Any:
        dims, dtype, with_indices = self.dims, x.dtype, self.indices
        spatial = x.shape[-dims:]

        def kernel(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            assert ins[0] is not None and outs[0] is not None
            if not outs[0].size:
                return
            padded = window.padded(compute_view(ins[0], dtype), -np.inf)
            lead = (slice(None),) * (padded.ndim - dims)
            best = np.full(outs[0].shape, -np.inf, np.float32)
            where = np.zeros(outs[0].shape, np.int64)
            for position, slices in window.slices():
                candidate = padded[lead + slices]
                better = (candidate > best) | (np.isnan(candidate) & ~np.isnan(best))
                best = np.where(better, candidate, best)
                if with_indices:
                    where = np.where(better, _flat_index(position, window, spatial), where)
            store(outs[0], best)
            if with_indices:
                store(outs[1], where)  # type: ignore[arg-type]

        return kernel

    def _average_kernel(self, x: TensorDesc, window: Window, attrs: Mapping[str, Any]) -> Any:
        dims, dtype = self.dims, x.dtype
        divisor = self._divisor(x, window, attrs)

        def kernel(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            assert ins[0] is not None and outs[0] is not None
            if not outs[0].size:
                return
            padded = window.padded(compute_view(ins[0], dtype), 0.0)
            lead = (slice(None),) * (padded.ndim - dims)
            total = np.zeros(outs[0].shape, np.float32)
            for _, slices in window.slices():
                total += padded[lead + slices]
            store(outs[0], total / divisor)

        return kernel

    def _divisor(self, x: TensorDesc, window: Window, attrs: Mapping[str, Any]) -> np.ndarray:
        override = attrs.get("divisorOverride", 0) or 0
        if isinstance(override, bool) or not isinstance(override, (int, np.integer)) or override < 0:
            raise op_error(self.name, "divisorOverride", "an int >= 0 (0: no override)", repr(override))
        if override:
            return np.array(override, dtype=np.float32)
        include_pad = _flag(self.name, "countIncludePad", attrs, True)
        counts = []
        for size, k, s, p, o in zip(x.shape[-self.dims:], window.kernel, window.stride, window.padding, window.out):
            starts = np.arange(o) * s - p
            ends = np.minimum(starts + k, size + p) if include_pad else np.minimum(starts + k, size)
            counts.append(ends - (starts if include_pad else np.maximum(starts, 0)))
        grid = counts[0].astype(np.float32)
        for count in counts[1:]:
            grid = np.multiply.outer(grid, count.astype(np.float32))
        return grid


def _flat_index(position: tuple[int, ...], window: Window, spatial: tuple[int, ...]) -> np.ndarray:
    """Row-major index, within the unpadded spatial plane, of the element each output window
    meets at kernel ``position``."""
    index = np.zeros(window.out, np.int64)
    for axis, (p, s, d, pad, o, size) in enumerate(zip(position, window.stride, window.dilation, window.padding,
                                                      window.out, spatial)):
        coordinate = np.arange(o) * s - pad + p * d
        shape = [1] * len(window.out)
        shape[axis] = o
        index = index * size + coordinate.reshape(shape)
    return index


for _spec in (PoolNd("MaxPool3d", 3, average=False), PoolNd("AvgPool3d", 3, average=True),
              PoolNd("MaxPool2dWithIndices", 2, average=False, indices=True)):
    register(_spec)

