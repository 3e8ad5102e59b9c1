"""Comparisons and logical ops: bool results of elementwise tests.

Comparisons ``EqTensor``, ``NeTensor``, ``LtTensor``, ``LeTensor``, ``GtTensor``,
``GeTensor`` (aclnn's names) compare two tensors that broadcast NumPy-style; the operands are
promoted to a common dtype first (:func:`~aclpipe.dtypes.promote_types`), as PyTorch does,
so ``int32 < int64`` and ``float16 == float32`` compare exact values.  They take every
aclpipe dtype (``Lt``/``Le``/``Gt``/``Ge`` on bool order ``False < True``).  NaN compares
unequal to everything, itself included (IEEE), so ``NeTensor(nan, nan)`` is true.

Logical ops ``LogicalAnd``, ``LogicalOr``, ``LogicalXor`` (two tensors, broadcast) and
``LogicalNot`` (one) take every dtype and read a non-zero element as true.

Every output is bool and must be given as bool.  None needs a workspace.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..dtypes import DType, promote_types
from ..tensor import TensorDesc
from .base import OpPlan, OpSpec
from .checks import ALL, argument, broadcast_shapes, elementwise_cost, need, need_dtype, need_output, store
from .fp_errors import ignore_fp_errors
from .registry import register

__all__ = ["CompareOp", "LogicalOp"]

Predicate = Callable[..., np.ndarray]


class CompareOp(OpSpec):
    """``out = predicate(self, other)`` elementwise, as bool; operands promoted, then broadcast.

    Parameters
    ----------
    name:
        The aclnn name (``"EqTensor"``).
    predicate:
        A numpy ufunc of two arrays of the promoted compute dtype.
    """

    inputs = ("self", "other")
    outputs = ("out",)
    attrs: Mapping[str, Any] = {}

    def __init__(self, name: str, predicate: Predicate):
        self.name = name
        self.predicate = predicate

    def _check(self, inputs: Sequence[TensorDesc | None]) -> tuple[list[TensorDesc], tuple[int, ...], DType]:
        tensors = [need(self.name, name, argument(inputs, index)) for index, name in enumerate(self.inputs)]
        for name, tensor in zip(self.inputs, tensors):
            need_dtype(self.name, name, tensor, ALL)
        shape = broadcast_shapes(self.name, [(name, t.shape) for name, t in zip(self.inputs, tensors)])
        return tensors, shape, promote_types(tensors[0].dtype, tensors[1].dtype)

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        _, shape, _ = self._check(inputs)
        return [TensorDesc.contiguous(shape, DType.bool)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        tensors, shape, common = self._check(inputs)
        out = need_output(self.name, "out", argument(outputs, 0), shape, DType.bool)
        predicate, compute = self.predicate, common.compute

        def kernel(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            assert ins[0] is not None and ins[1] is not None and outs[0] is not None
            with ignore_fp_errors():  # comparisons with nan are data
                store(outs[0], predicate(ins[0].astype(compute, copy=False), ins[1].astype(compute, copy=False)))

        flops, traffic = elementwise_cost(out.numel, [*tensors, out])
        return OpPlan(kernel, 0, flops, traffic)


class LogicalOp(OpSpec):
    """A logical function of one or two tensors read as truth values (non-zero is true)."""

    outputs = ("out",)
    attrs: Mapping[str, Any] = {}

    def __init__(self, name: str, function: Predicate, arity: int):
        self.name = name
        self.function = function
        self.inputs = ("self", "other")[:arity]

    def _check(self, inputs: Sequence[TensorDesc | None]) -> tuple[list[TensorDesc], tuple[int, ...]]:
        tensors = [need(self.name, name, argument(inputs, index)) for index, name in enumerate(self.inputs)]
        for name, tensor in zip(self.inputs, tensors):
            need_dtype(self.name, name, tensor, ALL)
        shape = broadcast_shapes(self.name, [(name, t.shape) for name, t in zip(self.inputs, tensors)])
        return tensors, shape

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        _, shape = self._check(inputs)
        return [TensorDesc.contiguous(shape, DType.bool)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        tensors, shape = self._check(inputs)
        out = need_output(self.name, "out", argument(outputs, 0), shape, DType.bool)
        function, arity = self.function, len(self.inputs)

        def kernel(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            assert outs[0] is not None
            truths = [np.asarray(view) != 0 for view in ins[:arity]]
            store(outs[0], function(*truths))

        flops, traffic = elementwise_cost(out.numel, [*tensors, out])
        return OpPlan(kernel, 0, flops, traffic)


_COMPARISONS = (
    CompareOp("EqTensor", np.equal),
    CompareOp("NeTensor", np.not_equal),
    CompareOp("LtTensor", np.less),
    CompareOp("LeTensor", np.less_equal),
    CompareOp("GtTensor", np.greater),
    CompareOp("GeTensor", np.greater_equal),
)

_LOGICAL = (
    LogicalOp("LogicalNot", np.logical_not, 1),
    LogicalOp("LogicalAnd", np.logical_and, 2),
    LogicalOp("LogicalOr", np.logical_or, 2),
    LogicalOp("LogicalXor", np.logical_xor, 2),
)

for _spec in (*_COMPARISONS, *_LOGICAL):
    register(_spec)
