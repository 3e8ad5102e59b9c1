"""``GroupNorm``: ``aclnnGroupNorm(self, gamma, beta, N, C, HxW, group, eps) -> out, meanOut, rstdOut``.

``self`` is ``[N, C, *spatial]`` (at least 2 dims); its channels form ``group`` groups of
``C / group`` consecutive channels, and each (sample, group) is normalized over its channels
and spatial positions: ``out = (x - mean) * rstd * gamma[c] + beta[c]`` with
``rstd = 1 / sqrt(var + eps)`` (biased variance).  ``gamma``/``beta`` are ``[C]`` and optional
(ones/zeros).  ``N``, ``C`` and ``HxW`` restate ``self``'s shape as aclnn asks for them; they
are optional here (taken from the shape) and must match it when given.  ``meanOut`` and
``rstdOut`` (``[N, group]``, float32 or ``self``'s dtype) are optional outputs.
``group = C`` is instance normalization (ONNX ``InstanceNormalization``).

Inputs are float32, float16 or bfloat16, computed in float32.  The per-(sample, group) mean
and rstd are kept in the workspace in float32 (``2 * N * group * 4`` bytes), written and read
back there by the kernel.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..dtypes import DType
from ..tensor import TensorDesc
from .base import OpPlan, OpSpec, op_error
from .checks import (
    FLOATS,
    argument,
    compute_view,
    need,
    need_dtype,
    need_output,
    scratch_layout,
    scratch_view,
    store,
)
from .norm import _epsilon, _flat, _optional_output, _parameter
from .registry import register
from .shape import int_attr

__all__ = ["GroupNorm"]


class GroupNorm(OpSpec):
    name = "GroupNorm"
    inputs = ("self", "gammaOptional", "betaOptional")
    outputs = ("out", "meanOut", "rstdOut")
    attrs = {"N": None, "C": None, "HxW": None, "group": None, "eps": 1e-5}

    def _check(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]
               ) -> tuple[TensorDesc, int, int, int, int, float]:
        x = need(self.name, "self", argument(inputs, 0))
        need_dtype(self.name, "self", x, FLOATS)
        if x.ndim < 2:
            raise op_error(self.name, "self", "[N, C, *spatial] (at least 2 dims)", list(x.shape))
        batch, channels, spatial = x.shape[0], x.shape[1], math.prod(x.shape[2:])
        for name, actual in (("N", batch), ("C", channels), ("HxW", spatial)):
            given = attrs.get(name)
            if given is not None and int_attr(self.name, name, given) != actual:
                raise op_error(self.name, name, f"{actual} (from self {list(x.shape)})", given)
        if attrs.get("group") is None:
            raise op_error(self.name, "group", f"a positive divisor of C={channels}", "NULL", null=True)
        group = int_attr(self.name, "group", attrs.get("group"), minimum=1)
        assert group is not None
        if channels % group:
            raise op_error(self.name, "group", f"a positive divisor of C={channels}", group)
        for index, name in ((1, "gammaOptional"), (2, "betaOptional")):
            _parameter(self.name, name, argument(inputs, index), (channels,), x.dtype, required=False)
        return x, batch, channels, spatial, group, _epsilon(self.name, "eps", attrs, 1e-5)

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        x, batch, _, _, group, _ = self._check(inputs, attrs)
        stats = TensorDesc.contiguous((batch, group), DType.float32)
        return [TensorDesc.contiguous(x.shape, x.dtype), stats, stats]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        x, batch, channels, spatial, group, eps = self._check(inputs, attrs)
        out = need_output(self.name, "out", argument(outputs, 0), x.shape, x.dtype)
        _optional_output(self.name, "meanOut", argument(outputs, 1), (batch, group), x.dtype)
        _optional_output(self.name, "rstdOut", argument(outputs, 2), (batch, group), x.dtype)
        rows = batch * group
        workspace_size, (mean_at, rstd_at) = scratch_layout(rows * 4, rows * 4)
        dtype, shape = x.dtype, x.shape

        def kernel(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            assert ins[0] is not None and outs[0] is not None
            if x.numel == 0:
                return
            values = compute_view(ins[0], dtype).reshape(rows, -1)
            mean = scratch_view(workspace, mean_at, (rows,), np.float32)
            rstd = scratch_view(workspace, rstd_at, (rows,), np.float32)
            np.mean(values, axis=1, out=mean)
            centered = values - mean[:, None]
            np.copyto(rstd, 1.0 / np.sqrt(np.mean(centered * centered, axis=1) + np.float32(eps)))
            normalized = (centered * rstd[:, None]).reshape(batch, channels, spatial)
            gamma, beta = _flat(argument(ins, 1), channels, 1.0), _flat(argument(ins, 2), channels, 0.0)
            store(outs[0], (normalized * gamma[:, None] + beta[:, None]).reshape(shape))
            for index, statistic in ((1, mean), (2, rstd)):
                target = argument(outs, index)
                if target is not None:
                    store(target, statistic.reshape(batch, group))

        return OpPlan(kernel, workspace_size, 8.0 * x.numel, float(x.nbytes + out.nbytes + 4 * workspace_size),
                      variant="groups-fp32-stats")


register(GroupNorm())
