"""``InplaceScatterUpdate``: CANN's ``aclnnInplaceScatterUpdate`` (hicann/ops-nn ``index/scatter``).

``aclnnInplaceScatterUpdateGetWorkspaceSize(data, indices, updates, axis, ...)`` writes
``updates`` into ``data`` in place, one row of ``updates`` per index, each a run of
``updates.shape[axis]`` positions along ``axis`` starting at an offset:

- 1-D ``indices`` ``(a,)``: ``data[i][j][indices[i] + k][l] = updates[i][j][k][l]`` (axis -2);
- 2-D ``indices`` ``(n, 2)``: a (batch index, offset) pair per row of ``updates``,
  ``data[indices[n, 0]][j][indices[n, 1] + k][l] = updates[n][j][k][l]``;
- 0-d ``indices``: one offset, for ``updates`` of dim 0 = 1.

Like ``InplaceCopy``'s ``selfRef``, the written ``data`` is modelled as the *output*
``dataRef`` (``inputs = (indices, updates)``, ``outputs = (dataRef,)``) and launches declare
the write.  A graph cannot infer the written tensor from the inputs, so ``infer`` reads it
from ``dataShape`` (a graph-building attribute; aclnn has no such argument, and ``prepare``
only checks ``dataRef`` against it when given).

Phase one checks what the doc lists (161001 for a missing tensor, 161002 otherwise): data
and updates INT8, UINT8, FLOAT16, FLOAT32, INT32 or BFLOAT16 (the fp8 types exist on the 950
series only, and aclpipe has none), of one dtype and rank, 2-8 dims; indices INT32 or INT64
with 0-2 dims (a 2-D one of 2 columns); no empty tensor; ``axis`` in ``(-rank, rank)`` and
not 0; ``updates`` dim 0 equal to ``indices``' (1 for 0-d indices) and at most ``data``'s;
the other dims equal except ``axis``; and the indices' bytes + 224 within the unified buffer
(192 KiB on Atlas A2).  Index values are read at launch: CANN requires them non-negative and
in bounds without checking; here one that is not fails the launch with
ACLNN_ERR_RUNTIME_ERROR (361001) naming it.  With duplicate indices the result is
unspecified on CANN (here the last row wins).  No workspace.

Products (the doc's support table): Atlas A2 and A3, the 950 series and the Atlas training
series; not the Atlas inference series (310P) nor Atlas 200I/500 A2 (:data:`UNSUPPORTED_ON`).
The catalog's phase one does not know the product (no op here refuses per product); a
caller that targets those cards must not use it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..dtypes import DType
from ..errors import error_from_code
from ..tensor import TensorDesc
from .base import OpPlan, OpSpec, op_error
from .checks import argument, need, need_dtype
from .index import INDEX_DTYPES
from .registry import register

__all__ = ["DATA_DTYPES", "UNIFIED_BUFFER_BYTES", "UNSUPPORTED_ON", "InplaceScatterUpdate"]

#: What ``data`` and ``updates`` may hold (the doc's list less the 950-only fp8 types).
DATA_DTYPES = frozenset({DType.int8, DType.uint8, DType.float16, DType.float32, DType.int32, DType.bfloat16})
#: The unified buffer of an Atlas A2 AI core: the indices' bytes + 224 must fit it.
UNIFIED_BUFFER_BYTES = 192 * 1024
#: Products whose CANN has no ``aclnnInplaceScatterUpdate`` (device spec names).
UNSUPPORTED_ON = frozenset({"atlas-310p", "atlas-200i-a2"})

_OP = "InplaceScatterUpdate"


class InplaceScatterUpdate(OpSpec):
    """``aclnnInplaceScatterUpdate``: write ``updates`` into ``dataRef`` at ``indices`` along
    ``axis``, in place (see the module doc)."""

    name = _OP
    inputs = ("indices", "updates")
    outputs = ("dataRef",)
    attrs = {"axis": None, "dataShape": None}

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        shape = attrs.get("dataShape")
        if not isinstance(shape, (tuple, list)) or not all(_is_int(size) and size > 0 for size in shape):
            raise op_error(self.name, "dataShape", "the written tensor's shape (a graph names the tensor it "
                           "updates in place), e.g. dataShape=(slots, heads, capacity, head_dim)", shape)
        updates = need(self.name, "updates", argument(inputs, 1))
        data = TensorDesc.contiguous(tuple(shape), updates.dtype)
        self._check(data, inputs, attrs)
        return [data]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        data = need(self.name, "dataRef", argument(outputs, 0))
        shape = attrs.get("dataShape")
        if shape is not None and tuple(shape) != data.shape:
            raise op_error(self.name, "dataRef", f"the shape dataShape names, {list(shape)}", list(data.shape))
        axis = self._check(data, inputs, attrs)
        updates = need(self.name, "updates", argument(inputs, 1))
        return OpPlan(_kernel(data.shape, updates.shape, axis), 0, 0.0, float(2 * updates.nbytes))

    def _check(self, data: TensorDesc, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> int:
        """Phase one's checks (the module doc); returns ``axis`` made non-negative."""
        indices = need(self.name, "indices", argument(inputs, 0))
        updates = need(self.name, "updates", argument(inputs, 1))
        need_dtype(self.name, "dataRef", data, DATA_DTYPES)
        need_dtype(self.name, "indices", indices, INDEX_DTYPES)
        if updates.dtype != data.dtype:
            raise op_error(self.name, "updates", f"dataRef's dtype {data.dtype.name}", updates.dtype.name)
        if not 2 <= data.ndim <= 8:
            raise op_error(self.name, "dataRef", "2 to 8 dims", list(data.shape))
        if updates.ndim != data.ndim:
            raise op_error(self.name, "updates", f"dataRef's {data.ndim} dims", list(updates.shape))
        if indices.ndim > 2 or (indices.ndim == 2 and indices.shape[1] != 2):
            raise op_error(self.name, "indices", "0, 1 or 2 dims ((batch index, offset) pairs: [n, 2] when 2)",
                           list(indices.shape))
        for label, tensor in (("dataRef", data), ("indices", indices), ("updates", updates)):
            if tensor.numel == 0:
                raise op_error(self.name, label, "a non-empty tensor", list(tensor.shape))
        axis = self._axis(attrs.get("axis"), data.ndim)
        self._check_shapes(data, indices, updates, axis)
        used = indices.numel * indices.dtype.itemsize + 224
        if used > UNIFIED_BUFFER_BYTES:
            raise op_error(self.name, "indices", f"at most {(UNIFIED_BUFFER_BYTES - 224) // indices.dtype.itemsize} "
                           "values (their bytes + 224 must fit the AI core's unified buffer)", indices.numel)
        return axis

    def _axis(self, axis: Any, rank: int) -> int:
        if not _is_int(axis) or not -rank < axis < rank or axis == 0:
            raise op_error(self.name, "axis", f"an int in ({-rank}, {rank}) other than 0", axis)
        return int(axis) % rank

    def _check_shapes(self, data: TensorDesc, indices: TensorDesc, updates: TensorDesc, axis: int) -> None:
        rows = indices.shape[0] if indices.ndim else 1
        if updates.shape[0] != rows:
            what = "1 (indices is 0-d)" if indices.ndim == 0 else f"indices' dim 0, {rows}"
            raise op_error(self.name, "updates", f"a dim 0 of {what}", list(updates.shape))
        if updates.shape[0] > data.shape[0]:
            raise op_error(self.name, "updates", f"a dim 0 of at most dataRef's {data.shape[0]}", list(updates.shape))
        for dim in range(1, data.ndim):
            if dim == axis:
                continue
            if updates.shape[dim] != data.shape[dim]:
                raise op_error(self.name, "updates", f"dataRef's dims except 0 and axis {axis}, "
                               f"{list(data.shape)}", list(updates.shape))
        if updates.shape[axis] > data.shape[axis]:
            raise op_error(self.name, "updates", f"at most dataRef's {data.shape[axis]} along axis {axis}",
                           list(updates.shape))


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _targets(index: np.ndarray, rows: int, data_shape: tuple[int, ...], run: int,
             axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's (batch index, offset) as int64 arrays, or the 361001 launch error for one
    that is negative or runs past ``data``."""
    values = np.asarray(index, dtype=np.int64)
    if values.ndim == 2:
        batches, offsets = values[:, 0], values[:, 1]
    else:
        batches, offsets = np.arange(rows, dtype=np.int64), values.reshape(rows)
    wrong = np.flatnonzero((batches < 0) | (batches >= data_shape[0]) | (offsets < 0)
                           | (offsets + run > data_shape[axis]))
    if wrong.size:
        row = int(wrong[0])
        seen = values[row].tolist() if values.ndim == 2 else int(offsets[row])
        raise error_from_code(
            361001, f"aclnn{_OP}: indices[{row}] = {seen}: expected a batch index in [0, {data_shape[0]}) and an "
                    f"offset in [0, {data_shape[axis] - run}] ({run} positions along axis {axis} of "
                    f"{data_shape[axis]}); CANN reads neither negative nor out-of-bounds indices", {"op": _OP})
    return batches, offsets


def _kernel(data_shape: tuple[int, ...], updates_shape: tuple[int, ...], axis: int) -> Any:
    rows, run = updates_shape[0], updates_shape[axis]

    def kernel(views: Sequence[np.ndarray | None], results: Sequence[np.ndarray | None],
               workspace: np.ndarray | None) -> None:
        index, new, out = views[0], views[1], results[0]
        assert index is not None and new is not None and out is not None
        batches, offsets = _targets(index, rows, data_shape, run, axis)
        if run == 1:  # one fancy-indexed write for every row (a decode step)
            where: list[Any] = [slice(None)] * out.ndim
            where[0], where[axis] = batches, offsets
            out[tuple(where)] = np.take(new, 0, axis=axis)
            return
        for row, (batch, offset) in enumerate(zip(batches.tolist(), offsets.tolist())):
            where = [slice(None)] * (out.ndim - 1)
            where[axis - 1] = slice(offset, offset + run)
            out[batch][tuple(where)] = new[row]

    return kernel


register(InplaceScatterUpdate())
