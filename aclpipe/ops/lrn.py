"""``LocalResponseNorm``: normalize each element by the energy of its neighbouring channels.

``out[n, c, ...] = x[n, c, ...] / (bias + alpha / size * square_sum[n, c, ...]) ** beta`` with
``square_sum`` the sum of ``x ** 2`` over channels ``c - floor((size - 1) / 2)`` to
``c + ceil((size - 1) / 2)`` (clipped to the existing channels).  This is ONNX's ``LRN``
window (CANN's LRN operator); for even ``size`` PyTorch's ``local_response_norm`` puts the
extra channel on the other side.  Attributes: ``size`` (>= 1), ``alpha`` (1e-4), ``beta``
(0.75), ``bias`` (1.0).  Input ``[N, C, ...]`` of a float dtype.

The kernel keeps the per-element square sums (fp32, the size of the input) in the workspace.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..tensor import TensorDesc
from .base import OpPlan, OpSpec, op_error
from .checks import FLOATS, argument, compute_view, need, need_dtype, need_output, scratch_layout, scratch_view, store
from .elementwise import scalar_attr
from .registry import register

__all__ = ["LocalResponseNorm"]


class LocalResponseNorm(OpSpec):
    """Local response normalization across channels (ONNX LRN)."""

    name = "LocalResponseNorm"
    inputs = ("self",)
    outputs = ("out",)
    attrs = {"size": None, "alpha": 1e-4, "beta": 0.75, "bias": 1.0}

    def _check(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]
               ) -> tuple[TensorDesc, int, float, float, float]:
        x = need(self.name, "self", argument(inputs, 0))
        need_dtype(self.name, "self", x, FLOATS)
        if x.ndim < 2:
            raise op_error(self.name, "self", "a tensor [N, C, ...] of rank >= 2", list(x.shape))
        size = attrs.get("size")
        if size is None:
            raise op_error(self.name, "size", "an int >= 1", "NULL", null=True)
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise op_error(self.name, "size", "an int >= 1", repr(size))
        alpha, beta, bias = (float(scalar_attr(self.name, key, attrs, default))
                             for key, default in (("alpha", 1e-4), ("beta", 0.75), ("bias", 1.0)))
        return x, int(size), alpha, beta, bias

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        x, *_ = self._check(inputs, attrs)
        return [TensorDesc.contiguous(x.shape, x.dtype)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        x, size, alpha, beta, bias = self._check(inputs, attrs)
        out = need_output(self.name, "out", argument(outputs, 0), x.shape, x.dtype)
        workspace_size, (sums_at,) = scratch_layout(x.numel * 4)
        before, after = (size - 1) // 2, size // 2  # floor and ceil of (size - 1) / 2
        channels, dtype, shape = x.shape[1], x.dtype, x.shape

        def kernel(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            assert ins[0] is not None and outs[0] is not None
            if outs[0].size == 0:
                return
            values = compute_view(ins[0], dtype).astype(np.float32, copy=False)
            sums = scratch_view(workspace, sums_at, shape, np.float32)
            squares = values * values
            sums[...] = 0
            for shift in range(-before, after + 1):  # channel c gathers c + shift where it exists
                low, high = max(0, -shift), min(channels, channels - shift)
                if low < high:
                    sums[:, low:high] += squares[:, low + shift:high + shift]
            store(outs[0], values / (bias + alpha / size * sums) ** beta)

        return OpPlan(kernel, workspace_size, float(x.numel * (size + 4)), float(x.nbytes + out.nbytes +
                                                                                   2 * workspace_size))


register(LocalResponseNorm())
