"""Triangles and one-hot encodings: ``Triu``, ``Tril`` and ``OneHot``.

- ``Triu(self; diagonal=0)`` / ``Tril`` follow ``aclnnTriu`` / ``aclnnTril``
  (``torch.triu``/``tril``): over the last two dims, keep the elements on and above (below)
  the ``diagonal``-th diagonal and zero the rest.  Every dtype; ``self`` has at least 2 dims.
- ``OneHot(self, onValue, offValue; numClasses, axis=-1)`` follows ``aclnnOneHot``: ``out``
  has ``self``'s shape with ``numClasses`` inserted at ``axis``, holding ``onValue`` where
  the class equals the index and ``offValue`` elsewhere.  ``self`` is int32 or int64; an
  index outside ``[0, numClasses)`` gives a row of ``offValue`` (ONNX's rule for out-of-range
  indices; negative ones are wrapped by the ONNX converter).  ``onValue``/``offValue`` are
  one-element tensors of the output dtype.

None needs a workspace.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..tensor import TensorDesc
from .base import OpPlan, OpSpec, op_error
from .checks import ALL, argument, need, need_dtype, need_output
from .index import INDEX_DTYPES
from .registry import register
from .shape import copy_into, copy_plan, int_attr

__all__ = ["OneHot", "Triangle"]


class Triangle(OpSpec):
    inputs = ("self",)
    attrs = {"diagonal": 0}

    def __init__(self, name: str, *, upper: bool):
        self.name = name
        self.upper = upper

    def _check(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> tuple[TensorDesc, int]:
        x = need(self.name, "self", argument(inputs, 0))
        need_dtype(self.name, "self", x, ALL)
        if x.ndim < 2:
            raise op_error(self.name, "self", "at least 2 dims", list(x.shape))
        diagonal = int_attr(self.name, "diagonal", attrs.get("diagonal", 0))
        assert diagonal is not None
        return x, diagonal

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        x, _ = self._check(inputs, attrs)
        return [TensorDesc.contiguous(x.shape, x.dtype)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        x, diagonal = self._check(inputs, attrs)
        out = need_output(self.name, "out", argument(outputs, 0), x.shape, x.dtype)
        rows, columns = x.shape[-2:]
        offsets = np.arange(columns)[None, :] - np.arange(rows)[:, None]
        keep = offsets >= diagonal if self.upper else offsets <= diagonal

        def kernel(views: Sequence[np.ndarray | None], results: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            source, result = views[0], results[0]
            assert source is not None and result is not None
            copy_into(result, np.where(keep, source, np.zeros((), source.dtype)))

        return copy_plan(kernel, [x, out])


class OneHot(OpSpec):
    name = "OneHot"
    inputs = ("self", "onValue", "offValue")
    attrs = {"numClasses": None, "axis": -1}

    def _check(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]
               ) -> tuple[TensorDesc, TensorDesc, int, int]:
        index = need(self.name, "self", argument(inputs, 0))
        on = need(self.name, "onValue", argument(inputs, 1))
        off = need(self.name, "offValue", argument(inputs, 2))
        need_dtype(self.name, "self", index, INDEX_DTYPES)
        need_dtype(self.name, "onValue", on, ALL)
        for name, tensor in (("onValue", on), ("offValue", off)):
            if tensor.numel != 1:
                raise op_error(self.name, name, "one element", list(tensor.shape))
        if off.dtype != on.dtype:
            raise op_error(self.name, "offValue", f"dtype {on.dtype.name} (same as onValue)", off.dtype.name)
        if attrs.get("numClasses") is None:
            raise op_error(self.name, "numClasses", "an integer >= 1", "NULL", null=True)
        classes = int_attr(self.name, "numClasses", attrs.get("numClasses"), minimum=1)
        axis = int_attr(self.name, "axis", attrs.get("axis", -1))
        assert classes is not None and axis is not None
        if not -index.ndim - 1 <= axis <= index.ndim:
            raise op_error(self.name, "axis", f"an axis in [{-index.ndim - 1}, {index.ndim}]", axis)
        return index, on, classes, axis % (index.ndim + 1)

    def _shape(self, index: TensorDesc, classes: int, axis: int) -> tuple[int, ...]:
        return index.shape[:axis] + (classes,) + index.shape[axis:]

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        index, on, classes, axis = self._check(inputs, attrs)
        return [TensorDesc.contiguous(self._shape(index, classes, axis), on.dtype)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        index, on, classes, axis = self._check(inputs, attrs)
        out = need_output(self.name, "out", argument(outputs, 0), self._shape(index, classes, axis), on.dtype)
        shape = [1] * (index.ndim + 1)
        shape[axis] = classes
        class_ids = np.arange(classes).reshape(shape)

        def kernel(views: Sequence[np.ndarray | None], results: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            positions, on_value, off_value, result = views[0], views[1], views[2], results[0]
            assert positions is not None and on_value is not None and off_value is not None and result is not None
            hit = np.expand_dims(np.asarray(positions, np.int64), axis) == class_ids
            copy_into(result, np.where(hit, on_value.reshape(()), off_value.reshape(())))

        return copy_plan(kernel, [index, on, out])


for _spec in (Triangle("Triu", upper=True), Triangle("Tril", upper=False), OneHot()):
    register(_spec)
