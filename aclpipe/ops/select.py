"""Index-valued selections: ``ArgMax``, ``ArgMin`` and ``Topk``.

- ``ArgMax(dim, keepdim)`` / ``ArgMin(dim, keepdim)`` (aclnn's names): the int64 index of the
  first largest / smallest element along ``dim`` (NaN counts as the extreme, as in PyTorch).
  The dim must not be empty.  Every dtype (bool orders ``False < True``).
- ``Topk(k, dim=-1, largest=True, sorted=True)`` (aclnnTopk): the ``k`` largest (or smallest)
  elements along ``dim`` and their int64 indices (outputs ``valuesOut``, ``indicesOut``).
  Equal elements keep their index order (the lower index comes first), so results are
  deterministic; ``sorted=False`` returns them sorted as well.  ``0 <= k <= size of dim``.
  NaN sorts after every number either way (it is picked only when nothing else is left).
  The kernel writes the sort permutation of each row to the workspace
  (``rows * length * 8`` bytes) and gathers from it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..dtypes import DType
from ..tensor import TensorDesc
from .base import OpPlan, OpSpec, op_error
from .checks import ALL, argument, need, need_dtype, need_output, normalize_dim, scratch_layout, scratch_view, store
from .registry import register

__all__ = ["ArgExtremeOp", "Topk", "descending_key"]


def descending_key(values: np.ndarray) -> np.ndarray:
    """An array whose ascending order is ``values``' descending order, without overflow
    (``~x`` for integers and bool, ``-x`` for floats)."""
    key: np.ndarray = np.invert(values) if values.dtype.kind in "iub" else np.negative(values)
    return key


def _flag(op: str, name: str, attrs: Mapping[str, Any], default: bool) -> bool:
    value = attrs.get(name, default)
    if not isinstance(value, (bool, np.bool_, int, np.integer)) or value not in (0, 1):
        raise op_error(op, name, "a bool", repr(value))
    return bool(value)


class ArgExtremeOp(OpSpec):
    """The index of the first maximum (``largest``) or minimum along ``dim``."""

    inputs = ("self",)
    outputs = ("out",)
    attrs = {"dim": 0, "keepdim": False}

    def __init__(self, name: str, *, largest: bool):
        self.name = name
        self.largest = largest

    def _check(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]
               ) -> tuple[TensorDesc, int, tuple[int, ...]]:
        x = need(self.name, "self", argument(inputs, 0))
        need_dtype(self.name, "self", x, ALL)
        dim = normalize_dim(self.name, "dim", attrs.get("dim", 0), x.ndim)
        keep = _flag(self.name, "keepdim", attrs, False)
        if x.ndim and x.shape[dim] == 0:
            raise op_error(self.name, "dim", "a dim of non-zero size", f"dim {dim} of {list(x.shape)}")
        if not x.ndim:
            return x, 0, ()
        shape = tuple(1 if axis == dim else size for axis, size in enumerate(x.shape) if keep or axis != dim)
        return x, dim, shape

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        _, _, shape = self._check(inputs, attrs)
        return [TensorDesc.contiguous(shape, DType.int64)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        x, dim, shape = self._check(inputs, attrs)
        out = need_output(self.name, "out", argument(outputs, 0), shape, DType.int64)
        pick = np.argmax if self.largest else np.argmin

        def kernel(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            assert ins[0] is not None and outs[0] is not None
            if outs[0].size == 0:
                return
            values = ins[0].reshape(1) if ins[0].ndim == 0 else ins[0]
            store(outs[0], pick(values, axis=dim).reshape(shape))

        return OpPlan(kernel, 0, float(x.numel), float(x.nbytes + out.nbytes))


class Topk(OpSpec):
    """The ``k`` largest (or smallest) elements along ``dim`` and their indices."""

    name = "Topk"
    inputs = ("self",)
    outputs = ("valuesOut", "indicesOut")
    attrs = {"k": None, "dim": -1, "largest": True, "sorted": True}

    def _check(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]
               ) -> tuple[TensorDesc, int, int, tuple[int, ...], bool]:
        x = need(self.name, "self", argument(inputs, 0))
        need_dtype(self.name, "self", x, ALL)
        if x.ndim == 0:
            raise op_error(self.name, "self", "a tensor of rank >= 1", "a scalar")
        dim = normalize_dim(self.name, "dim", attrs.get("dim", -1), x.ndim)
        k = attrs.get("k")
        if k is None:
            raise op_error(self.name, "k", "an int", "NULL", null=True)
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k <= x.shape[dim]:
            raise op_error(self.name, "k", f"an int in [0, {x.shape[dim]}] (the size of dim {dim})", repr(k))
        largest = _flag(self.name, "largest", attrs, True)
        _flag(self.name, "sorted", attrs, True)
        shape = tuple(int(k) if axis == dim else size for axis, size in enumerate(x.shape))
        return x, dim, int(k), shape, largest

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        x, _, _, shape, _ = self._check(inputs, attrs)
        return [TensorDesc.contiguous(shape, x.dtype), TensorDesc.contiguous(shape, DType.int64)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        x, dim, k, shape, largest = self._check(inputs, attrs)
        values_out = need_output(self.name, "valuesOut", argument(outputs, 0), shape, x.dtype)
        indices_out = need_output(self.name, "indicesOut", argument(outputs, 1), shape, DType.int64)
        moved = tuple(size for axis, size in enumerate(x.shape) if axis != dim) + (x.shape[dim],)
        workspace_size, (order_at,) = scratch_layout(math.prod(moved) * 8)

        def kernel(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            assert ins[0] is not None and outs[0] is not None and outs[1] is not None
            if outs[0].size == 0:
                return
            rows = np.moveaxis(ins[0], dim, -1)
            order = scratch_view(workspace, order_at, moved, np.int64)
            key = descending_key(rows) if largest else rows
            order[...] = np.argsort(key, axis=-1, kind="stable")  # stable: ties keep index order
            chosen = order[..., :k]
            store(outs[0], np.moveaxis(np.take_along_axis(rows, chosen, axis=-1), -1, dim))
            store(outs[1], np.moveaxis(chosen, -1, dim))

        flops = float(x.numel * max(1.0, math.log2(max(x.shape[dim], 2))))
        traffic = float(x.nbytes + values_out.nbytes + indices_out.nbytes + 2 * workspace_size)
        return OpPlan(kernel, workspace_size, flops, traffic, variant="stable-sort")


for _spec in (ArgExtremeOp("ArgMax", largest=True), ArgExtremeOp("ArgMin", largest=False), Topk()):
    register(_spec)
