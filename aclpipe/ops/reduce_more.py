"""More reductions: ``Amin`` and ``Prod``, rows of :class:`~aclpipe.ops.reduce.ReduceOp`.

- ``Amin(dim, keepdim)``: the smallest element; keeps the input's dtype (bool included) and,
  like ``Amax``, refuses to reduce a dim of size 0 when the result would not be empty.
- ``Prod(dim, keepDim, dtype)``: the product (``torch.prod``; ``dim`` may list several dims,
  None or ``[]`` reduces all).  Floats keep their dtype, integers and bool give int64 unless
  ``dtype`` says otherwise (the input is cast to ``dtype`` first).  The product of nothing is 1.

As in :mod:`aclpipe.ops.reduce`, the kernel accumulates into a workspace buffer shaped like
the kept-dims result (fp32 for float products, int64 for integer ones, the compute dtype for
``Amin``) and rounds once into the output.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..dtypes import DType
from ..tensor import TensorDesc
from .base import OpPlan, op_error
from .checks import NUMERIC, argument, need_output, scratch_layout, scratch_view, store
from .reduce import ReduceOp, _Reduction
from .registry import register

__all__ = ["ExtraReduceOp"]


def _keep(op: str, source: DType, requested: DType | None) -> DType:
    return source


def _product_dtype(op: str, source: DType, requested: DType | None) -> DType:
    if requested is not None:
        if requested not in NUMERIC:
            raise op_error(op, "dtype", "a float or integer dtype", requested.name)
        return requested
    return source if source.is_floating else DType.int64


class ExtraReduceOp(ReduceOp):
    """A ReduceOp whose kernel is ``np.min`` (kind ``"min"``) or ``np.prod`` (kind ``"prod"``)."""

    def _check(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> _Reduction:
        reduction = super()._check(inputs, attrs)
        if self.kind == "min" and reduction.count == 0 and math.prod(reduction.shape) > 0:
            sizes = [reduction.input.shape[d] for d in reduction.dims]
            raise op_error(self.name, self.dims_attr, "reduced dims of non-zero size", f"sizes {sizes}")
        return reduction

    def _accumulator(self, source: DType, result: DType) -> np.dtype[Any]:
        if self.kind == "min":
            return source.compute
        return np.dtype(np.float32) if result.is_floating else np.dtype(np.int64)

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        reduction = self._check(inputs, attrs)
        out = need_output(self.name, "out", argument(outputs, 0), reduction.shape, reduction.dtype)
        accumulate, keep_shape, dims, shape = reduction.accumulate, reduction.keep_shape, reduction.dims, \
            reduction.shape
        numel = math.prod(keep_shape)
        workspace_size, (accumulator_at,) = scratch_layout(numel * accumulate.itemsize)
        operand = reduction.dtype.compute if self.kind == "prod" else reduction.input.dtype.compute
        reducer: Callable[..., Any] = np.min if self.kind == "min" else np.prod

        def kernel(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            assert ins[0] is not None and outs[0] is not None
            if numel == 0:
                return
            accumulator = scratch_view(workspace, accumulator_at, keep_shape, accumulate)
            values = ins[0].astype(operand, copy=False)
            with np.errstate(all="ignore"):  # overflow to inf is data, as on the device
                if self.kind == "prod":
                    reducer(values, axis=dims, keepdims=True, out=accumulator, dtype=accumulate)
                else:
                    reducer(values, axis=dims, keepdims=True, out=accumulator)
                store(outs[0], accumulator.reshape(shape))

        traffic = float(reduction.input.nbytes + out.nbytes + 2 * workspace_size)
        return OpPlan(kernel, workspace_size, float(reduction.input.numel), traffic,
                      variant="workspace-accumulator")


for _spec in (ExtraReduceOp("Amin", "min", _keep, dims="dim", keep="keepdim", has_dtype=False),
              ExtraReduceOp("Prod", "prod", _product_dtype, dims="dim", keep="keepDim", has_dtype=True)):
    register(_spec)
