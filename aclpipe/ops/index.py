"""Indexing: Gather, IndexSelect, Embedding, and Where.

Semantics are PyTorch's (``torch.gather``, ``torch.index_select``,
``torch.nn.functional.embedding``, ``torch.where``).  Data tensors take every aclpipe
dtype; index tensors are int32 or int64 and must hold values in ``[0, size)`` (negative
indices are out of range, as in PyTorch).

Indices live in device memory, so phase one cannot see them: the kernel checks them and an
out-of-range index fails the launch with ACLNN_ERR_RUNTIME_ERROR (361001, a
:class:`DeviceFault`) naming the index, its position and the dim's size.  The stream's
error is sticky until the next sync reports it; the device stays usable afterwards.

``Where(condition, self, other)``: ``condition`` is bool; the three broadcast together and
the output has the promoted dtype of ``self`` and ``other``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..dtypes import DType, promote_types
from ..errors import error_from_code
from ..tensor import TensorDesc
from .base import OpPlan, OpSpec, op_error
from .checks import ALL, broadcast_shapes, kept_view, need, need_dtype, need_output, normalize_dim
from .registry import register
from .shape import copy_into, copy_plan

__all__ = ["INDEX_DTYPES", "Embedding", "Gather", "IndexSelect", "Where", "checked_indices"]

INDEX_DTYPES = frozenset({DType.int32, DType.int64})


def checked_indices(op: str, name: str, index: np.ndarray, size: int, dim: int) -> np.ndarray:
    """``index`` as int64, or the 361001 runtime error when a value lies outside ``[0, size)``."""
    values = np.asarray(index, dtype=np.int64)
    bad = (values < 0) | (values >= size)
    if bad.any():
        position = tuple(int(i) for i in np.argwhere(bad)[0])
        raise error_from_code(
            361001, f"aclnn{op}: {name}{list(position)} = {int(values[position])} is out of range for dim "
                    f"{dim} of size {size}; indices must lie in [0, {size})", {"op": op})
    return values


class _Indexing(OpSpec):
    """Two inputs (data, index) -> one output; subclasses give the shape and the gather."""

    data_name = "self"
    index_name = "index"

    def _tensors(self, inputs: Sequence[TensorDesc | None]) -> tuple[TensorDesc, TensorDesc]:
        if len(inputs) != 2:
            raise op_error(self.name, "inputs", f"2 tensors {self.inputs}", f"{len(inputs)} tensors")
        data = need(self.name, self.data_name, inputs[0])
        index = need(self.name, self.index_name, inputs[1])
        need_dtype(self.name, self.data_name, data, ALL)
        need_dtype(self.name, self.index_name, index, INDEX_DTYPES)
        return data, index

    def _shape(self, data: TensorDesc, index: TensorDesc, attrs: Mapping[str, Any]) -> tuple[tuple[int, ...], int]:
        """Output shape and the (normalized) dim that the index addresses."""
        raise NotImplementedError

    def _gather(self, data: np.ndarray, index: np.ndarray, dim: int) -> np.ndarray:
        raise NotImplementedError

    #: For gathers that are one ``np.take`` along ``dim``: the shape the index is taken as.
    take_shape: Callable[[np.ndarray], tuple[int, ...]] | None = None

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        data, index = self._tensors(inputs)
        shape, _ = self._shape(data, index, attrs)
        return [TensorDesc.contiguous(shape, data.dtype)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        data, index = self._tensors(inputs)
        shape, dim = self._shape(data, index, attrs)
        out = need_output(self.name, "out", outputs[0] if outputs else None, shape, data.dtype)
        size = data.shape[dim] if data.ndim else 1  # a 0-d self is indexed like a 1-element dim

        def kernel(views: Sequence[np.ndarray | None], results: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            source, positions, result = views[0], views[1], results[0]
            assert source is not None and positions is not None and result is not None
            values = checked_indices(self.name, self.index_name, positions, size, dim)
            if result.size:
                copy_into(result, self._gather(source, values, dim))

        def bind(views: Sequence[np.ndarray | None], results: Sequence[np.ndarray | None],
                 workspace: np.ndarray | None) -> Callable[[], None]:
            """``np.take`` straight into a contiguous output of the data's dtype (IndexSelect,
            Embedding), the indices checked by their extremes first (the full check, with its
            error, only when one is out of range); anything else runs ``kernel``."""
            source, positions, result = views[0], views[1], results[0]
            take_shape = self.take_shape
            if positions is None or take_shape is None:
                return functools.partial(kernel, views, results, workspace)
            flat = kept_view(positions, take_shape(positions))
            if (flat is None or source is None or result is None or source.ndim == 0
                    or result.dtype != source.dtype or not result.flags.c_contiguous):
                return functools.partial(kernel, views, results, workspace)
            index_view, axis = positions, dim

            def run() -> None:
                if flat.min() < 0 or flat.max() >= size:
                    checked_indices(self.name, self.index_name, index_view, size, dim)
                np.take(source, flat, axis=axis, out=result)

            return run

        # Reads the index and the gathered elements (as many as it writes).
        return OpPlan(kernel, 0, 0.0, float(index.nbytes + 2 * out.nbytes), bind=bind)


class Gather(_Indexing):
    """``torch.gather(self, dim, index)``: ``out[i][j] = self[index[i][j]][j]`` (dim 0)."""

    name = "Gather"
    inputs = ("self", "index")
    attrs = {"dim": 0}

    def _shape(self, data: TensorDesc, index: TensorDesc, attrs: Mapping[str, Any]) -> tuple[tuple[int, ...], int]:
        dim = normalize_dim(self.name, "dim", attrs.get("dim", 0), data.ndim)
        if index.ndim != data.ndim or any(i > s for axis, (i, s) in enumerate(zip(index.shape, data.shape))
                                         if axis != dim):
            raise op_error(self.name, "index", f"rank {data.ndim} with each dim except {dim} at most self's "
                           f"{list(data.shape)}", list(index.shape))
        return index.shape, dim

    def _gather(self, data: np.ndarray, index: np.ndarray, dim: int) -> np.ndarray:
        if data.ndim == 0:
            return data
        # Other dims of index may be shorter than self's: gather from the leading block.
        block = tuple(slice(None) if axis == dim else slice(0, size) for axis, size in enumerate(index.shape))
        return np.take_along_axis(data[block], index, axis=dim)


class IndexSelect(_Indexing):
    """``torch.index_select(self, dim, index)`` with a 1-D (or 0-d) index."""

    name = "IndexSelect"
    inputs = ("self", "index")
    attrs = {"dim": 0}

    def _shape(self, data: TensorDesc, index: TensorDesc, attrs: Mapping[str, Any]) -> tuple[tuple[int, ...], int]:
        if data.ndim == 0:
            raise op_error(self.name, "self", "at least 1 dim", "a 0-d tensor")
        dim = normalize_dim(self.name, "dim", attrs.get("dim", 0), data.ndim)
        if index.ndim > 1:
            raise op_error(self.name, "index", "a 1-D (or 0-d) tensor", list(index.shape))
        return data.shape[:dim] + (index.numel,) + data.shape[dim + 1:], dim

    def _gather(self, data: np.ndarray, index: np.ndarray, dim: int) -> np.ndarray:
        return np.take(data, index.reshape(-1), axis=dim)

    take_shape = staticmethod(lambda index: (-1,))


class Embedding(_Indexing):
    """``embedding(indices, weight)``: rows of the 2-D ``weight``; ``out = indices.shape + [dim]``."""

    name = "Embedding"
    inputs = ("weight", "indices")
    data_name = "weight"
    index_name = "indices"

    def _shape(self, data: TensorDesc, index: TensorDesc, attrs: Mapping[str, Any]) -> tuple[tuple[int, ...], int]:
        if data.ndim != 2:
            raise op_error(self.name, "weight", "a 2-D [num_embeddings, embedding_dim] tensor", list(data.shape))
        return index.shape + (data.shape[1],), 0

    def _gather(self, data: np.ndarray, index: np.ndarray, dim: int) -> np.ndarray:
        return np.take(data, index, axis=0)

    take_shape = staticmethod(lambda index: index.shape)


class Where(OpSpec):
    """``aclnnSWhere``: ``self`` where ``condition`` holds, else ``other`` (broadcast)."""

    name = "Where"
    inputs = ("condition", "self", "other")

    def _output(self, inputs: Sequence[TensorDesc | None]) -> tuple[tuple[int, ...], DType, list[TensorDesc]]:
        if len(inputs) != 3:
            raise op_error(self.name, "inputs", "3 tensors (condition, self, other)", f"{len(inputs)} tensors")
        tensors = [need(self.name, name, t) for name, t in zip(self.inputs, inputs)]
        need_dtype(self.name, "condition", tensors[0], {DType.bool})
        need_dtype(self.name, "self", tensors[1], ALL)
        need_dtype(self.name, "other", tensors[2], ALL)
        shape = broadcast_shapes(self.name, [(n, t.shape) for n, t in zip(self.inputs, tensors)])
        return shape, promote_types(tensors[1].dtype, tensors[2].dtype), tensors

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        shape, dtype, _ = self._output(inputs)
        return [TensorDesc.contiguous(shape, dtype)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        shape, dtype, tensors = self._output(inputs)
        out = need_output(self.name, "out", outputs[0] if outputs else None, shape, dtype)
        numpy_dtype = dtype.numpy

        def kernel(views: Sequence[np.ndarray | None], results: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            condition, first, second = views
            assert condition is not None and first is not None and second is not None and results[0] is not None
            copy_into(results[0], np.where(condition, first.astype(numpy_dtype, copy=False),
                                           second.astype(numpy_dtype, copy=False)))

        return copy_plan(kernel, tensors + [out])


for _spec in (Gather(), IndexSelect(), Embedding(), Where()):
    register(_spec)
