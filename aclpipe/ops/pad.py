"""``PadV3``: pad (or crop) every dim, with a constant, by reflection, by the edge, or by wrapping.

Named after CANN's PadV3 operator.  Attributes:

- ``paddings``: ``2 * ndim`` ints, a ``(before, after)`` pair per dim from dim 0
  (``[d0_before, d0_after, d1_before, d1_after, ...]``).  A negative amount crops that many
  elements from that side; cropping happens before padding.
- ``mode``: ``"constant"`` (fill with ``value``), ``"reflect"`` (mirror without repeating the
  edge: ``[1, 2, 3]`` padded by 2 gives ``[3, 2, 1, 2, 3, 2, 1]``), ``"edge"`` (repeat the
  edge element) or ``"wrap"`` (continue periodically).  Reflect, edge and wrap need a
  non-empty dim wherever they pad it; pads wider than the dim repeat the rule (NumPy's
  ``np.pad``, which the ONNX reference follows).
- ``value``: the fill of constant mode (a Python number representable in the dtype).

Every dtype; the output keeps it.  No workspace.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..tensor import TensorDesc
from .base import OpPlan, OpSpec, op_error
from .checks import ALL, argument, need, need_dtype, need_output, store
from .elementwise import cast_scalar, scalar_attr
from .registry import register

__all__ = ["MODES", "PadV3"]

MODES = ("constant", "reflect", "edge", "wrap")


class PadV3(OpSpec):
    """``aclnnPadV3``: constant, reflect, edge (replicate) or wrap padding."""

    name = "PadV3"
    inputs = ("self",)
    outputs = ("out",)
    attrs = {"paddings": None, "mode": "constant", "value": 0}

    def _check(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]
               ) -> tuple[TensorDesc, list[tuple[int, int]], str, Any, tuple[int, ...]]:
        x = need(self.name, "self", argument(inputs, 0))
        need_dtype(self.name, "self", x, ALL)
        pairs = self._pairs(x, attrs.get("paddings"))
        mode = attrs.get("mode", "constant")
        if mode not in MODES:
            raise op_error(self.name, "mode", f"one of {', '.join(MODES)}", repr(mode))
        value = cast_scalar(self.name, "value", scalar_attr(self.name, "value", attrs, 0), x.dtype) \
            if mode == "constant" else None
        shape = tuple(size + before + after for size, (before, after) in zip(x.shape, pairs))
        if any(size < 0 for size in shape):
            raise op_error(self.name, "paddings", f"crops no larger than the dims {list(x.shape)}",
                           [amount for pair in pairs for amount in pair])
        for axis, (size, (before, after)) in enumerate(zip(x.shape, pairs)):
            kept = size + min(before, 0) + min(after, 0)
            if mode != "constant" and kept == 0 and (before > 0 or after > 0):
                raise op_error(self.name, "self", f"a non-empty dim {axis} to pad in {mode} mode", list(x.shape))
        return x, pairs, mode, value, shape

    def _pairs(self, x: TensorDesc, paddings: Any) -> list[tuple[int, int]]:
        if paddings is None:
            raise op_error(self.name, "paddings", f"{2 * x.ndim} ints", "NULL", null=True)
        items = list(paddings) if isinstance(paddings, (list, tuple)) else None
        if items is None or len(items) != 2 * x.ndim or not all(
                isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in items):
            raise op_error(self.name, "paddings", f"{2 * x.ndim} ints (a before/after pair per dim)",
                           repr(paddings))
        return [(int(items[2 * axis]), int(items[2 * axis + 1])) for axis in range(x.ndim)]

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        x, _, _, _, shape = self._check(inputs, attrs)
        return [TensorDesc.contiguous(shape, x.dtype)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        x, pairs, mode, value, shape = self._check(inputs, attrs)
        out = need_output(self.name, "out", argument(outputs, 0), shape, x.dtype)
        crop = tuple(slice(max(-before, 0), size - max(-after, 0)) for size, (before, after) in zip(x.shape, pairs))
        widths = [(max(before, 0), max(after, 0)) for before, after in pairs]

        def kernel(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            assert ins[0] is not None and outs[0] is not None
            if outs[0].size == 0:
                return
            kept = ins[0][crop]
            if mode == "constant":
                padded = np.pad(kept, widths, mode="constant", constant_values=value)
            else:
                padded = np.pad(kept, widths, mode=mode)  # type: ignore[call-overload]
            store(outs[0], padded)

        return OpPlan(kernel, 0, 0.0, float(x.nbytes + out.nbytes))


register(PadV3())
