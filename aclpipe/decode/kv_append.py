"""``KvAppend`` and ``KvView``: the in-place cache write that replaces each ``Concat(past, new)``.

``KvAppend(updates, indices; slots, capacity)`` writes ``updates`` ([batch, heads, seq,
head_dim], the step's new keys or values) into its output ``cacheRef``, the whole [slots,
heads, capacity, head_dim] cache of one layer's keys or values: row ``b`` goes to slot
``indices[b, 0]`` from position ``indices[b, 1]`` along the sequence axis, and nothing else is
written (the positions before are that sequence's cache, left in place).  A row whose
position is negative is not written (a padded row, or a slot that is not part of the step).
Like ``InplaceCopy``'s ``selfRef``, the written cache is modelled as the *output* (launches
declare the write), and the decoder binds it to the cache buffer
(:meth:`aclpipe.Pipeline.bind_storage`).

``KvView(cache; rows, total)`` is what a decode step's attention reads in place of the
Concat's present: the first ``rows`` slots and ``total`` positions of the cache, a strided
view (it launches nothing; row ``r`` of a decode step is slot ``r``).  The write is declared
over the whole buffer rather than the view because a kernel may touch up to
``ALIGN_UP(len, 32) + 32`` bytes past what it writes (11-01): past the view, that would be
positions a later, longer view reads (masked, but a masked NaN still poisons the attention's
weighted sum); past the buffer, it is the allocation's own padding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..dtypes import DType, Format
from ..ops.base import OpPlan, OpSpec, op_error
from ..ops.checks import ALL, need, need_dtype
from ..ops.registry import get_op, register
from ..tensor import TensorDesc

__all__ = ["KV_APPEND", "KV_VIEW", "KvAppend", "KvView"]

#: The catalog names of the ops.
KV_APPEND = "KvAppend"
KV_VIEW = "KvView"


class KvAppend(OpSpec):
    """Write each row's new positions into the cache in place (see the module doc)."""

    name = KV_APPEND
    inputs = ("updates", "indices")
    outputs = ("cacheRef",)
    attrs = {"slots": None, "capacity": None}

    def _check(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> TensorDesc:
        updates = need(self.name, "updates", inputs[0] if inputs else None)
        indices = need(self.name, "indices", inputs[1] if len(inputs) > 1 else None)
        need_dtype(self.name, "updates", updates, ALL)
        need_dtype(self.name, "indices", indices, (DType.int64,))
        if updates.ndim != 4:
            raise op_error(self.name, "updates", "[batch, heads, seq, head_dim]", list(updates.shape))
        batch, heads, seq, head_dim = updates.shape
        if indices.shape != (batch, 2):
            raise op_error(self.name, "indices", f"(slot, position) per row: [{batch}, 2]", list(indices.shape))
        sizes = []
        for label, least in (("slots", batch), ("capacity", seq)):
            value = attrs.get(label)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise op_error(self.name, label, f"an int >= {least}", value)
            sizes.append(value)
        return TensorDesc.contiguous((sizes[0], heads, sizes[1], head_dim), updates.dtype)

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        return [self._check(inputs, attrs)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        expected = self._check(inputs, attrs)
        cache = need(self.name, "cacheRef", outputs[0] if outputs else None)
        if (cache.shape, cache.dtype, cache.is_contiguous) != (expected.shape, expected.dtype, True):
            raise op_error(self.name, "cacheRef", f"a contiguous {expected.dtype.name}{list(expected.shape)}",
                           f"{cache}")
        updates = inputs[0]
        assert updates is not None
        slots, seq, capacity = expected.shape[0], updates.shape[2], expected.shape[2]

        def kernel(views: Sequence[np.ndarray | None], results: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            new, index, out = views[0], views[1], results[0]
            assert new is not None and index is not None and out is not None
            rows = np.flatnonzero(index[:, 1] >= 0)
            targets, starts = index[rows, 0], index[rows, 1]
            wrong = np.flatnonzero((starts + seq > capacity) | (targets < 0) | (targets >= slots))
            if wrong.size:
                row = int(rows[wrong[0]])
                raise IndexError(f"aclnn{KV_APPEND}: indices[{row}] = {index[row].tolist()}: expected a slot below "
                                 f"{slots} and {seq} positions from there within the cache's {capacity}")
            if seq == 1:  # a decode step: one fancy-indexed write for every row
                out[targets, :, starts, :] = new[rows, :, 0, :]
                return
            for row, target, start in zip(rows.tolist(), targets.tolist(), starts.tolist()):
                out[target, :, start:start + seq, :] = new[row]

        return OpPlan(kernel, 0, 0.0, float(2 * updates.nbytes))


class KvView(OpSpec):
    """The cache as a step's attention reads it: its first ``rows`` slots and ``total``
    positions, a strided view of the whole (launches nothing)."""

    name = KV_VIEW
    inputs = ("self",)
    attrs = {"rows": None, "total": None}
    is_view = True

    def _shape(self, x: TensorDesc | None, attrs: Mapping[str, Any]) -> tuple[TensorDesc, tuple[int, ...]]:
        x = need(self.name, "self", x)
        if x.ndim != 4:
            raise op_error(self.name, "self", "a [slots, heads, capacity, head_dim] cache", list(x.shape))
        rows, total = attrs.get("rows"), attrs.get("total")
        for label, value, most in (("rows", rows, x.shape[0]), ("total", total, x.shape[2])):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
                raise op_error(self.name, label, f"an int in [0, {most}]", value)
        return x, (rows, x.shape[1], total, x.shape[3])  # type: ignore[return-value]

    def view(self, input: TensorDesc, attrs: Mapping[str, Any]) -> TensorDesc:
        x, shape = self._shape(input, attrs)
        return TensorDesc(shape, x.dtype, x.strides, x.offset, Format.ND, x.address)

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        x, shape = self._shape(inputs[0] if inputs else None, attrs)
        return [TensorDesc.contiguous(shape, x.dtype)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        raise op_error(self.name, "launch", "no launch: a view only changes the descriptor", "a phase-one call")


def _register() -> None:
    for spec in (KvAppend(), KvView()):
        try:
            get_op(spec.name)
        except Exception:  # noqa: BLE001 - not registered yet (UnsupportedOpError)
            register(spec)


_register()
