"""Cumulative sums: ``Cumsum`` and ``CumsumV2``.

- ``Cumsum(self; dim, dtype)`` follows ``aclnnCumsum``: ``out[i] = self[0] + ... + self[i]``
  along ``dim``, stored in ``dtype`` (default: ``self``'s dtype).
- ``CumsumV2(self; dim, exclusive=False, reverse=False)`` follows ``aclnnCumsumV2``:
  ``exclusive`` leaves each element out of its own sum (the first is 0), ``reverse`` sums
  from the end (ONNX CumSum's two attributes).

Inputs take every numeric dtype.  Floats accumulate in float32 (fp16/bf16 round once when
stored), integers in int64 (wrapping on store, as the device does); the running sums are kept
in the workspace in that accumulation dtype (``numel * itemsize`` bytes), so a short
workspace is refused at launch and a shared one is a hazard.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..dtypes import DType, as_dtype
from ..tensor import TensorDesc
from .base import OpPlan, OpSpec, op_error
from .checks import (
    NUMERIC,
    argument,
    need,
    need_dtype,
    need_output,
    normalize_dim,
    scratch_view,
)
from .registry import register
from .shape import copy_into

__all__ = ["Cumsum"]


def _flag(op: str, name: str, attrs: Mapping[str, Any]) -> bool:
    value = attrs.get(name, False)
    if not isinstance(value, (bool, np.bool_, int, np.integer)) or value not in (0, 1):
        raise op_error(op, name, "a bool", repr(value))
    return bool(value)


def _accumulator(dtype: DType) -> np.dtype[Any]:
    return np.dtype(np.float32) if dtype.is_floating else np.dtype(np.int64)


class Cumsum(OpSpec):
    """``Cumsum`` (``dtype`` chooses the output) and ``CumsumV2`` (``exclusive``, ``reverse``)."""

    inputs = ("self",)

    def __init__(self, name: str, *, v2: bool):
        self.name = name
        self.v2 = v2
        self.attrs = {"dim": 0, "exclusive": False, "reverse": False} if v2 else {"dim": 0, "dtype": None}

    def _check(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]
               ) -> tuple[TensorDesc, int, DType, bool, bool]:
        x = need(self.name, "self", argument(inputs, 0))
        need_dtype(self.name, "self", x, NUMERIC)
        dim = normalize_dim(self.name, "dim", attrs.get("dim", 0), x.ndim)
        if self.v2:
            return x, dim, x.dtype, _flag(self.name, "exclusive", attrs), _flag(self.name, "reverse", attrs)
        wanted = attrs.get("dtype")
        try:
            dtype = x.dtype if wanted is None else as_dtype(wanted)
        except (TypeError, ValueError):
            raise op_error(self.name, "dtype", "a numeric aclDataType", repr(wanted)) from None
        if dtype not in NUMERIC:
            raise op_error(self.name, "dtype", "a numeric aclDataType", dtype.name)
        return x, dim, dtype, False, False

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        x, _, dtype, _, _ = self._check(inputs, attrs)
        return [TensorDesc.contiguous(x.shape, dtype)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        x, dim, dtype, exclusive, reverse = self._check(inputs, attrs)
        out = need_output(self.name, "out", argument(outputs, 0), x.shape, dtype)
        accumulate = _accumulator(x.dtype if x.dtype.is_floating or dtype.is_integer else dtype)
        workspace_size = x.numel * accumulate.itemsize
        shape, axis = x.shape, dim

        def kernel(views: Sequence[np.ndarray | None], results: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            source, result = views[0], results[0]
            assert source is not None and result is not None
            if not result.size:
                return
            running = scratch_view(workspace, 0, shape, accumulate)
            values = source.astype(accumulate, copy=False)
            if reverse:
                values = np.flip(values, axis)
            with np.errstate(over="ignore"):
                if not exclusive:
                    np.cumsum(values, axis=axis, dtype=accumulate, out=running)
                else:  # the inclusive sums shifted by one: each element left out of its own sum
                    head = (slice(None),) * axis
                    running[head + (0,)] = 0
                    np.cumsum(values[head + (slice(0, -1),)], axis=axis, dtype=accumulate,
                              out=running[head + (slice(1, None),)])
            copy_into(result, np.flip(running, axis) if reverse else running)

        traffic = float(x.nbytes + out.nbytes + 2 * workspace_size)
        return OpPlan(kernel, workspace_size, float(x.numel), traffic)


for _spec in (Cumsum("Cumsum", v2=False), Cumsum("CumsumV2", v2=True)):
    register(_spec)
