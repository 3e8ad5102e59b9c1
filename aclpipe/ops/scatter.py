"""N-dimensional gathers and scatters: ``GatherNd``, ``ScatterNd`` and ``Scatter``.

- ``GatherNd(self, indices; negativeIndexSupport=False, batchDims=0)`` follows
  ``aclnnGatherNd``: the last dim of ``indices`` (``q``) addresses the first ``q`` dims of
  ``self`` after ``batchDims`` leading batch dims that both share; the output is
  ``indices.shape[:-1] + self.shape[batchDims + q:]``.  ``batchDims`` is ONNX GatherND's
  ``batch_dims`` (aclnn's operator has none: it is 0 there).
- ``ScatterNd(data, indices, updates; reduce=0)`` follows ``aclnnScatterNd``: ``out`` is
  ``data`` with the slices ``indices`` address replaced by ``updates``.  ``reduce`` combines
  instead of replacing: 0 none, 1 add, 2 mul, 3 max, 4 min (ONNX ScatterND's ``reduction``;
  aclnn's operator replaces only).  Negative indices count from the end, as in ONNX.
- ``Scatter(self, index, src; dim, reduce=0)`` follows ``aclnnScatter`` (``torch.scatter``):
  ``out[index[i][j]][j] = src[i][j]`` along ``dim``; ``reduce`` as above (aclnn documents 0,
  1 and 2).

Indices are int32 or int64 and live in device memory: a value out of range fails the launch
with ACLNN_ERR_RUNTIME_ERROR (361001) naming its position, as in :mod:`aclpipe.ops.index`.
With duplicate indices and ``reduce=0`` the last update wins (ONNX leaves it undefined).
None of them needs a workspace.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..tensor import TensorDesc
from .base import OpPlan, OpSpec, op_error
from .checks import ALL, argument, need, need_dtype, need_output, normalize_dim
from .index import INDEX_DTYPES, checked_indices
from .registry import register
from .shape import copy_into, copy_plan, int_attr

__all__ = ["REDUCTIONS", "GatherNd", "Scatter", "ScatterNd"]

#: ``reduce`` attribute -> the ufunc that combines an update with the value it lands on.
REDUCTIONS: dict[int, np.ufunc | None] = {0: None, 1: np.add, 2: np.multiply, 3: np.maximum, 4: np.minimum}


def _reduce(op: str, attrs: Mapping[str, Any]) -> int:
    value = int_attr(op, "reduce", attrs.get("reduce", 0))
    assert value is not None
    if value not in REDUCTIONS:
        raise op_error(op, "reduce", "0 (none), 1 (add), 2 (mul), 3 (max) or 4 (min)", value)
    return value


def _wrapped(op: str, name: str, index: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
    """Index tuples along the last axis of ``index`` with negatives counted from the end,
    checked against ``sizes`` (361001 when one is outside ``[-size, size)``)."""
    values = np.asarray(index, dtype=np.int64).copy()
    for axis, size in enumerate(sizes):
        column = values[..., axis]
        column[column < 0] += size
        checked_indices(op, f"{name}[..., {axis}]", column, size, axis)
    return values


class GatherNd(OpSpec):
    name = "GatherNd"
    inputs = ("self", "indices")
    attrs = {"negativeIndexSupport": False, "batchDims": 0}

    def _check(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]
               ) -> tuple[TensorDesc, TensorDesc, int, tuple[int, ...]]:
        data = need(self.name, "self", argument(inputs, 0))
        index = need(self.name, "indices", argument(inputs, 1))
        need_dtype(self.name, "self", data, ALL)
        need_dtype(self.name, "indices", index, INDEX_DTYPES)
        batch = int_attr(self.name, "batchDims", attrs.get("batchDims", 0), minimum=0)
        assert batch is not None
        if index.ndim < 1 or batch >= min(index.ndim, data.ndim + 1) or data.shape[:batch] != index.shape[:batch]:
            raise op_error(self.name, "indices", f"at least {batch + 1} dims whose first {batch} (batchDims) equal "
                           f"self's {list(data.shape[:batch])}", list(index.shape))
        depth = index.shape[-1]
        if depth > data.ndim - batch:
            raise op_error(self.name, "indices", f"a last dim of at most {data.ndim - batch} (self's dims after "
                           "batchDims)", list(index.shape))
        shape = index.shape[:-1] + data.shape[batch + depth:]
        return data, index, batch, shape

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        data, _, _, shape = self._check(inputs, attrs)
        return [TensorDesc.contiguous(shape, data.dtype)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        data, index, batch, shape = self._check(inputs, attrs)
        out = need_output(self.name, "out", argument(outputs, 0), shape, data.dtype)
        negative = bool(attrs.get("negativeIndexSupport", False))
        depth, sizes = index.shape[-1], data.shape[batch:batch + index.shape[-1]]
        batch_count = math.prod(data.shape[:batch])

        def kernel(views: Sequence[np.ndarray | None], results: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            source, positions, result = views[0], views[1], results[0]
            assert source is not None and positions is not None and result is not None
            if negative:
                tuples = _wrapped(self.name, "indices", positions, sizes)
            else:
                tuples = np.asarray(positions, dtype=np.int64)
                for axis, size in enumerate(sizes):
                    checked_indices(self.name, f"indices[..., {axis}]", tuples[..., axis], size, batch + axis)
            if not result.size:
                return
            blocks = source.reshape((batch_count,) + source.shape[batch:])
            flat = tuples.reshape(batch_count, -1, depth)
            picked = [blocks[b][tuple(flat[b].T)] for b in range(batch_count)]
            copy_into(result, np.stack(picked).reshape(result.shape))

        return copy_plan(kernel, [index, out, out])


class ScatterNd(OpSpec):
    name = "ScatterNd"
    inputs = ("data", "indices", "updates")
    attrs = {"reduce": 0}

    def _check(self, inputs: Sequence[TensorDesc | None]) -> tuple[TensorDesc, TensorDesc, TensorDesc]:
        data = need(self.name, "data", argument(inputs, 0))
        index = need(self.name, "indices", argument(inputs, 1))
        updates = need(self.name, "updates", argument(inputs, 2))
        need_dtype(self.name, "data", data, ALL)
        need_dtype(self.name, "indices", index, INDEX_DTYPES)
        if updates.dtype != data.dtype:
            raise op_error(self.name, "updates", f"dtype {data.dtype.name} (same as data)", updates.dtype.name)
        if index.ndim < 1 or index.shape[-1] > data.ndim:
            raise op_error(self.name, "indices", f"at least 1 dim, the last at most {data.ndim} (data's rank)",
                           list(index.shape))
        expected = index.shape[:-1] + data.shape[index.shape[-1]:]
        if updates.shape != expected:
            raise op_error(self.name, "updates", f"shape {list(expected)} (indices.shape[:-1] + "
                           "data.shape[indices.shape[-1]:])", list(updates.shape))
        return data, index, updates

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        data, _, _ = self._check(inputs)
        _reduce(self.name, attrs)
        return [TensorDesc.contiguous(data.shape, data.dtype)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        data, index, updates = self._check(inputs)
        combine = REDUCTIONS[_reduce(self.name, attrs)]
        out = need_output(self.name, "out", argument(outputs, 0), data.shape, data.dtype)
        depth = index.shape[-1]
        sizes = data.shape[:depth]

        def kernel(views: Sequence[np.ndarray | None], results: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            source, positions, values, result = views[0], views[1], views[2], results[0]
            assert source is not None and positions is not None and values is not None and result is not None
            tuples = _wrapped(self.name, "indices", positions, sizes).reshape(-1, depth)
            merged = np.array(source, copy=True)
            slices = values.reshape((tuples.shape[0],) + data.shape[depth:])
            target = tuple(tuples.T)
            if combine is None:
                merged[target] = slices
            else:
                combine.at(merged, target, slices)
            copy_into(result, merged)

        return copy_plan(kernel, [data, index, updates, out])


class Scatter(OpSpec):
    name = "Scatter"
    inputs = ("self", "index", "src")
    attrs = {"dim": 0, "reduce": 0}

    def _check(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]
               ) -> tuple[TensorDesc, TensorDesc, TensorDesc, int]:
        data = need(self.name, "self", argument(inputs, 0))
        index = need(self.name, "index", argument(inputs, 1))
        src = need(self.name, "src", argument(inputs, 2))
        need_dtype(self.name, "self", data, ALL)
        need_dtype(self.name, "index", index, INDEX_DTYPES)
        if src.dtype != data.dtype:
            raise op_error(self.name, "src", f"dtype {data.dtype.name} (same as self)", src.dtype.name)
        dim = normalize_dim(self.name, "dim", attrs.get("dim", 0), data.ndim)
        fits = index.ndim == data.ndim == src.ndim and all(
            i <= s and (axis == dim or i <= d) for axis, (i, s, d) in enumerate(zip(index.shape, src.shape,
                                                                                     data.shape)))
        if not fits:
            raise op_error(self.name, "index", f"rank {data.ndim}, each dim at most src's {list(src.shape)} and "
                           f"(except dim {dim}) self's {list(data.shape)}", list(index.shape))
        _reduce(self.name, attrs)
        return data, index, src, dim

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        data, _, _, _ = self._check(inputs, attrs)
        return [TensorDesc.contiguous(data.shape, data.dtype)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        data, index, src, dim = self._check(inputs, attrs)
        combine = REDUCTIONS[_reduce(self.name, attrs)]
        out = need_output(self.name, "out", argument(outputs, 0), data.shape, data.dtype)
        size = data.shape[dim]

        def kernel(views: Sequence[np.ndarray | None], results: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            source, positions, values, result = views[0], views[1], views[2], results[0]
            assert source is not None and positions is not None and values is not None and result is not None
            chosen = checked_indices(self.name, "index", positions, size, dim)
            merged = np.array(source, copy=True)
            block = values[tuple(slice(0, n) for n in chosen.shape)]
            grid: list[np.ndarray] = list(np.indices(chosen.shape, sparse=True))
            grid[dim] = chosen
            target = tuple(np.broadcast_arrays(*grid))
            if combine is None:
                merged[target] = block
            else:
                combine.at(merged, target, block)
            copy_into(result, merged)

        return copy_plan(kernel, [data, index, src, out])


for _spec in (GatherNd(), ScatterNd(), Scatter()):
    register(_spec)
