"""Reductions ``Mean``, ``ReduceSum``, ``Amax``, ``Amin`` and ``Prod``: rows of one ReduceOp.

Attributes use aclnn's names: ``Mean(dim, keepDim, dtype)``, ``ReduceSum(dims, keepDims,
dtype)``, ``Amax(dim, keepdim)``, ``Amin(dim, keepdim)``, ``Prod(dim, keepDim,
dtype)``.  A dim list of None or ``[]`` reduces every dim (as
``torch.mean(x, dim=[])`` does).  ``dtype`` is the output dtype.

Dtypes (PyTorch's rules):

- ``Mean`` gives a float: the input's dtype for float inputs; integer and bool inputs need a
  float ``dtype``.  The mean of zero elements is nan.
- ``ReduceSum`` of integers or bool gives int64 unless ``dtype`` says otherwise; floats keep
  their dtype.  With ``dtype`` the input is cast to it before summing (``torch.sum(dtype=)``).
- ``Amax`` keeps the input's dtype (bool included) and refuses to reduce a dim of size 0
  when the result would not be empty (there is no maximum of nothing).

The kernel accumulates into a buffer in the workspace (fp32 for float results, int64 for
integer sums, the input's compute dtype for ``Amax``) shaped like the kept-dims result, then
rounds once into the output: ``workspace_size`` is that buffer, 32-byte aligned.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..dtypes import DType, as_dtype
from ..tensor import TensorDesc
from .base import OpPlan, OpSpec, op_error
from .checks import (
    ALL,
    NUMERIC,
    argument,
    kept_view,
    need,
    need_dtype,
    need_output,
    normalize_dims,
    scratch_layout,
    scratch_view,
    store,
)
from .fp_errors import fp_errors_ignored, ignore_fp_errors
from .registry import register

__all__ = ["ReduceOp"]


@dataclass(frozen=True)
class _Reduction:
    """A validated reduction: what is reduced, the result, and how it accumulates."""

    input: TensorDesc
    dims: tuple[int, ...]
    keep_shape: tuple[int, ...]
    shape: tuple[int, ...]
    dtype: DType
    accumulate: np.dtype[Any]

    @property
    def count(self) -> int:
        return math.prod(self.input.shape[d] for d in self.dims)


def _mean_dtype(op: str, source: DType, requested: DType | None) -> DType:
    dtype = requested if requested is not None else source  # DType.float32 is 0: never test truthiness
    if not dtype.is_floating:
        raise op_error(op, "self" if requested is None else "dtype",
                       "a float dtype (pass dtype=float32 to average integers)", dtype.name)
    return dtype


def _sum_dtype(op: str, source: DType, requested: DType | None) -> DType:
    if requested is not None:
        if requested not in NUMERIC:
            raise op_error(op, "dtype", "a float or integer dtype", requested.name)
        return requested
    return source if source.is_floating else DType.int64


def _max_dtype(op: str, source: DType, requested: DType | None) -> DType:
    return source


#: Kinds whose result is an element of the input: same dtype, and nothing to pick from an
#: empty dim.
_EXTREMA = ("max", "min")


def _reducer(kind: str, accumulate: np.dtype[Any]) -> Callable[..., Any]:
    """The numpy reduction of ``kind``; sums and products accumulate in ``accumulate``."""
    if kind == "max":
        return np.max
    if kind == "min":
        return np.min
    return functools.partial(np.prod if kind == "prod" else np.sum, dtype=accumulate)


def _rows_form(kind: str, reduction: _Reduction, operand: np.dtype[Any]) -> tuple[int, int] | None:
    """``(rows, length)`` when a float32 sum or mean reduces the trailing dims (a global
    average pool, a mean over the last dim), else None.

    Such a sum is ``np.add.reduce`` along the rows of a ``(rows, length)`` matrix: numpy sums
    trailing contiguous dims as one row either way (pairwise, the same bits as ``np.sum`` over
    the dims), without ``np.sum``'s wrapper and its walk over several axes (mobile's pools:
    5.7 µs instead of 8-10).  A BLAS dot with ones was faster still (1-1.3 µs), but it sums in
    another order and raised mobile's error against onnxruntime from 2.1e-7 to 2.8e-7.
    """
    x, dims, count = reduction.input, reduction.dims, reduction.count
    trailing = tuple(sorted(dims)) == tuple(range(x.ndim - len(dims), x.ndim))
    if kind not in ("sum", "mean") or operand != np.float32 or reduction.accumulate != np.float32 \
            or not dims or not trailing or count == 0:
        return None
    return x.numel // count, count


def _bound_rows(matrix: np.ndarray, accumulator: np.ndarray, result: np.ndarray,
                divisor: int | None) -> Callable[[], None]:
    """The rows form of ``kernel`` into a float32 output: the same sum into the workspace
    accumulator, then the division (or the copy) written straight into the output (the same
    rounding as dividing in place and storing)."""
    total = functools.partial(np.add.reduce, matrix, axis=1, out=accumulator)
    finish = functools.partial(np.copyto, result, accumulator) if divisor is None else \
        functools.partial(np.true_divide, accumulator, divisor, out=result)

    def run() -> None:
        total()
        finish()

    return run


class ReduceOp(OpSpec):
    """A reduction over some dims, described by a table row.

    Parameters
    ----------
    name:
        The aclnn name.
    kind:
        ``"sum"``, ``"mean"``, ``"max"``, ``"min"`` or ``"prod"``.
    result:
        The output dtype from the input dtype and the optional ``dtype`` attribute.
    dims, keep:
        Attribute names of the dim list and the keep-dims flag.
    has_dtype:
        The op takes a ``dtype`` attribute.
    """

    inputs = ("self",)
    outputs = ("out",)

    def __init__(self, name: str, kind: str, result: Callable[[str, DType, DType | None], DType],
                 *, dims: str, keep: str, has_dtype: bool):
        self.name = name
        self.kind = kind
        self.result = result
        self.dims_attr = dims
        self.keep_attr = keep
        self.has_dtype = has_dtype
        self.attrs = {dims: None, keep: False, **({"dtype": None} if has_dtype else {})}

    def _requested_dtype(self, attrs: Mapping[str, Any]) -> DType | None:
        value = attrs.get("dtype") if self.has_dtype else None
        if value is None:
            return None
        try:
            return as_dtype(value)
        except TypeError as error:
            raise op_error(self.name, "dtype", "an aclpipe dtype", repr(value)) from error

    def _check(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> _Reduction:
        x = need(self.name, "self", argument(inputs, 0))
        need_dtype(self.name, "self", x, ALL)
        keep = attrs.get(self.keep_attr, False)
        if not isinstance(keep, (bool, np.bool_)):
            raise op_error(self.name, self.keep_attr, "a bool", repr(keep))
        requested = attrs.get(self.dims_attr)
        all_dims = requested is None or (isinstance(requested, (list, tuple)) and not requested) or x.ndim == 0
        dims = tuple(range(x.ndim)) if all_dims else normalize_dims(self.name, self.dims_attr, requested, x.ndim)
        keep_shape = tuple(1 if axis in dims else size for axis, size in enumerate(x.shape))
        shape = keep_shape if keep else tuple(size for axis, size in enumerate(x.shape) if axis not in dims)
        dtype = self.result(self.name, x.dtype, self._requested_dtype(attrs))
        reduction = _Reduction(x, dims, keep_shape, shape, dtype, self._accumulator(x.dtype, dtype))
        if self.kind in _EXTREMA and reduction.count == 0 and math.prod(shape) > 0:
            sizes = [x.shape[d] for d in dims]
            raise op_error(self.name, self.dims_attr, "reduced dims of non-zero size", f"sizes {sizes}")
        return reduction

    def _accumulator(self, source: DType, result: DType) -> np.dtype[Any]:
        if self.kind in _EXTREMA:
            return source.compute
        return np.dtype(np.float32) if result.is_floating else np.dtype(np.int64)

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        reduction = self._check(inputs, attrs)
        return [TensorDesc.contiguous(reduction.shape, reduction.dtype)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        reduction = self._check(inputs, attrs)
        out = need_output(self.name, "out", argument(outputs, 0), reduction.shape, reduction.dtype)
        accumulate, keep_shape, dims = reduction.accumulate, reduction.keep_shape, reduction.dims
        numel = math.prod(keep_shape)
        workspace_size, (accumulator_at,) = scratch_layout(numel * accumulate.itemsize)
        # The input is cast to the result's dtype first (torch.sum(dtype=) semantics); an
        # extremum's result dtype is its input's.
        operand = reduction.dtype.compute
        reducer = _reducer(self.kind, accumulate)
        divisor, shape = (reduction.count if self.kind == "mean" else None), reduction.shape

        rows = _rows_form(self.kind, reduction, operand)

        def reduce_into(values: np.ndarray, accumulator: np.ndarray) -> None:
            if rows is None:
                reducer(values, axis=dims, keepdims=True, out=accumulator)
            else:  # a float32 sum over trailing dims: along the rows of a matrix (see _rows_form)
                np.add.reduce(np.ascontiguousarray(values).reshape(rows), axis=1, out=accumulator.reshape(-1))

        def kernel(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            assert ins[0] is not None and outs[0] is not None
            if numel == 0:
                return
            accumulator = scratch_view(workspace, accumulator_at, keep_shape, accumulate)
            values = ins[0].astype(operand, copy=False)
            # the mean of nothing is nan, as in PyTorch; overflow to inf is data, as on the device
            with ignore_fp_errors():
                # the accumulator lives in the workspace: partial results are device scratch
                reduce_into(values, accumulator)
                if divisor is not None:
                    accumulator /= divisor
                store(outs[0], accumulator.reshape(shape))

        def bind(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None],
                 workspace: np.ndarray | None) -> Callable[[], None]:
            """An input already in the operand dtype: ``kernel``'s calls on views made once."""
            values, result = ins[0], outs[0]
            if numel == 0 or values is None or result is None or values.dtype != operand:
                return functools.partial(kernel, ins, outs, workspace)
            accumulator = scratch_view(workspace, accumulator_at, keep_shape, accumulate)
            flat = accumulator.reshape(shape)
            if rows is not None:  # the rows form on contiguous views, else ``kernel`` (its copy)
                matrix = kept_view(values, rows)
                if matrix is None or not matrix.flags.c_contiguous or result.dtype != np.float32 \
                        or not result.flags.c_contiguous:
                    return functools.partial(kernel, ins, outs, workspace)
                return fp_errors_ignored(_bound_rows(matrix, accumulator.reshape(-1), result.reshape(-1), divisor))

            def run() -> None:
                reducer(values, axis=dims, keepdims=True, out=accumulator)
                if divisor is not None:
                    np.true_divide(accumulator, divisor, out=accumulator)
                store(result, flat)

            return fp_errors_ignored(run)

        traffic = float(reduction.input.nbytes + out.nbytes + 2 * workspace_size)
        return OpPlan(kernel, workspace_size, float(reduction.input.numel), traffic, variant="workspace-accumulator",
                      bind=bind)


_REDUCTIONS = (
    ReduceOp("Mean", "mean", _mean_dtype, dims="dim", keep="keepDim", has_dtype=True),
    ReduceOp("ReduceSum", "sum", _sum_dtype, dims="dims", keep="keepDims", has_dtype=True),
    ReduceOp("Amax", "max", _max_dtype, dims="dim", keep="keepdim", has_dtype=False),
    # Amin keeps the input's dtype (bool included) and, like Amax, refuses to reduce a dim of size
    # 0 when the result would not be empty; Prod follows ReduceSum's dtype rule, and the product
    # of nothing is 1 (torch.prod: ``dim`` may list several dims, None or [] reduces all).
    ReduceOp("Amin", "min", _max_dtype, dims="dim", keep="keepdim", has_dtype=False),
    ReduceOp("Prod", "prod", _sum_dtype, dims="dim", keep="keepDim", has_dtype=True),
)

for _spec in _REDUCTIONS:
    register(_spec)
