"""``KvView``: what a decode step's attention reads in place of each ``Concat(past, new)``.

The cache write itself is CANN's ``aclnnInplaceScatterUpdate``
(:class:`~aclpipe.ops.scatter_update.InplaceScatterUpdate`, :mod:`.cache_graph`).
``KvView(cache; rows, total)`` is the read: the first ``rows`` slots and ``total`` positions
of the cache, a strided view (it launches nothing; row ``r`` of a decode step is slot ``r``,
and the scratch slot past the sequences' is never among them).  The write is declared over
the whole buffer rather than the view because a kernel may touch up to
``ALIGN_UP(len, 32) + 32`` bytes past what it writes (11-01): past the view, that would be
positions a later, longer view reads (masked, but a masked NaN still poisons the attention's
weighted sum); past the buffer, it is the allocation's own padding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..dtypes import Format
from ..ops.base import OpPlan, OpSpec, op_error
from ..ops.checks import need
from ..ops.registry import get_op, register
from ..tensor import TensorDesc

__all__ = ["KV_VIEW", "KvView"]

#: The catalog name of the view.
KV_VIEW = "KvView"


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
    try:
        get_op(KV_VIEW)
    except Exception:  # noqa: BLE001 - not registered yet (UnsupportedOpError)
        register(KvView())


_register()
