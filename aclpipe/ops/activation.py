"""Activations: ``Relu``, ``Gelu``, ``GeluV2``, ``Silu``, ``Sigmoid``, ``Tanh``, ``Softmax``,
``LogSoftmax``.

The pointwise ones are rows of the elementwise :class:`~aclpipe.ops.elementwise.UnaryOp`
table.  Dtypes: ``Relu`` keeps any float or integer dtype; ``Gelu``, ``GeluV2`` and ``Silu``
take floats only; ``Sigmoid`` and ``Tanh`` also take integers and bool and return float32,
as PyTorch does.  ``Gelu`` is the exact (erf) form; ``GeluV2``'s ``approximate`` is 0 or
``"none"`` (erf) or 1 or ``"tanh"``.

``Softmax`` and ``LogSoftmax`` (attribute ``dim``, default -1) take floats.  They keep their
per-row statistics, the row maximum and the row sum of exponentials, in fp32 in the
workspace (``2 * rows * 4`` bytes, each region 32-byte aligned), written and read back there
by the kernel, so a short workspace is refused at launch and a shared one is a hazard.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..tensor import TensorDesc
from .base import OpPlan, OpSpec, op_error
from .checks import (
    ALL,
    FLOATS,
    NUMERIC,
    argument,
    compute_view,
    constant,
    kept_view,
    need,
    need_dtype,
    need_output,
    normalize_dim,
    scratch_layout,
    scratch_view,
    store,
    target_view,
)
from .elementwise import UnaryOp, erf, float_result, keep_dtype, sigmoid
from .fp_errors import fp_errors_ignored, ignore_fp_errors
from .registry import register

__all__ = ["SoftmaxOp", "gelu", "gelu_tanh"]

_SQRT_HALF = 1.0 / math.sqrt(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def gelu(x: np.ndarray) -> np.ndarray:
    """Exact GELU: ``x * Phi(x)`` with the normal CDF written through erf."""
    return np.asarray(0.5 * x * (1.0 + erf(x * _SQRT_HALF)))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """The tanh approximation of GELU (``approximate="tanh"``)."""
    return np.asarray(0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x))))


def _relu_into(x: np.ndarray, out: np.ndarray, params: Mapping[str, Any]) -> Callable[[], None]:
    """Relu computed in the output view: the plain form's ufunc and dtype, against an array of
    zeros rather than the scalar (the same bits, about 3x faster: :func:`constant`)."""
    return functools.partial(np.maximum, x, constant(x.shape, x.dtype, 0), out=out)


def _sigmoid_into(x: np.ndarray, out: np.ndarray, params: Mapping[str, Any]) -> Callable[[], None]:
    """Sigmoid computed in the output view: :func:`sigmoid`'s steps (``1 / (1 + exp(-x))``)
    in its dtype, each in place, with no temporary (YOLO-style detectors run one per conv)."""
    one = out.dtype.type(1)

    def run() -> None:
        np.negative(x, out=out)
        np.exp(out, out=out)
        np.add(out, one, out=out)
        np.divide(one, out, out=out)

    return run


_APPROXIMATE = {0: "none", 1: "tanh", "none": "none", "tanh": "tanh"}


def _gelu_v2_attrs(op: str, attrs: Mapping[str, Any]) -> dict[str, Any]:
    value = attrs.get("approximate", 0)
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or value not in _APPROXIMATE:
        raise op_error(op, "approximate", '0 or "none" (erf), 1 or "tanh"', repr(value))
    return {"approximate": _APPROXIMATE[value]}


def _gelu_v2(x: np.ndarray, params: Mapping[str, Any]) -> np.ndarray:
    return gelu_tanh(x) if params["approximate"] == "tanh" else gelu(x)


_POINTWISE = (
    UnaryOp("Relu", lambda x, params: np.maximum(x, x.dtype.type(0)), NUMERIC, keep_dtype,
            into=_relu_into),
    UnaryOp("Gelu", lambda x, params: gelu(x), FLOATS, keep_dtype, flops=20.0),
    UnaryOp("GeluV2", _gelu_v2, FLOATS, keep_dtype, flops=20.0, parse_attrs=_gelu_v2_attrs,
            names=("x", "y"), attrs={"approximate": 0}),
    UnaryOp("Silu", lambda x, params: x * sigmoid(x), FLOATS, keep_dtype, flops=5.0),
    UnaryOp("Sigmoid", lambda x, params: sigmoid(x), ALL, float_result, flops=4.0, into=_sigmoid_into),
    UnaryOp("Tanh", lambda x, params: np.tanh(x), ALL, float_result, flops=6.0),
)


def _as_rows(array: np.ndarray, dim: int) -> np.ndarray:
    """``array`` with ``dim`` moved last and the rest flattened: shape ``(rows, length)``."""
    if array.ndim == 0:
        return array.reshape(1, 1)
    if dim == array.ndim - 1:  # already last: a reshape (np.moveaxis costs 4 µs of Python)
        return array.reshape(-1, array.shape[-1])
    moved = np.moveaxis(array, dim, -1)
    return moved.reshape(-1, moved.shape[-1])


def _from_rows(rows: np.ndarray, shape: tuple[int, ...], dim: int) -> np.ndarray:
    """Undo :func:`_as_rows`."""
    if not shape:
        return rows.reshape(())
    moved_shape = shape[:dim] + shape[dim + 1:] + (shape[dim],)
    return np.moveaxis(rows.reshape(moved_shape), -1, dim)


class SoftmaxOp(OpSpec):
    """``Softmax`` / ``LogSoftmax`` along ``dim`` with fp32 row statistics in the workspace."""

    inputs = ("self",)
    outputs = ("out",)
    attrs = {"dim": -1}

    def __init__(self, name: str, *, log: bool):
        self.name = name
        self.log = log

    def _check(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> tuple[TensorDesc, int]:
        x = need(self.name, "self", argument(inputs, 0))
        need_dtype(self.name, "self", x, FLOATS)
        dim = attrs.get("dim", -1)
        if isinstance(dim, np.integer):
            dim = int(dim)
        return x, normalize_dim(self.name, "dim", dim, x.ndim)

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        x, _ = self._check(inputs, attrs)
        return [TensorDesc.contiguous(x.shape, x.dtype)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        x, dim = self._check(inputs, attrs)
        out = need_output(self.name, "out", argument(outputs, 0), x.shape, x.dtype)
        length = x.shape[dim] if x.ndim else 1
        rows = x.numel // length if length else 0
        workspace_size, (max_at, sum_at) = scratch_layout(rows * 4, rows * 4)
        log, dtype, shape = self.log, x.dtype, x.shape
        last = x.ndim > 0 and dim == x.ndim - 1

        def kernel(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            assert ins[0] is not None and outs[0] is not None
            if outs[0].size == 0:
                return
            values = _as_rows(compute_view(ins[0], dtype), dim)
            row_max = scratch_view(workspace, max_at, (rows,), np.float32)
            row_sum = scratch_view(workspace, sum_at, (rows,), np.float32)
            # Along the last dim the rows are the output's own bytes: compute straight into them.
            target = target_view(outs[0], (rows, length), np.float32) if last else None
            with ignore_fp_errors():  # rows of -inf give nan, as in PyTorch
                np.maximum.reduce(values, axis=1, out=row_max)
                shifted = np.subtract(values, row_max[:, None], out=None if log else target)
                exponentials = np.exp(shifted, out=None if log else shifted)
                np.add.reduce(exponentials, axis=1, out=row_sum)
                if log:
                    result = np.subtract(shifted, np.log(row_sum)[:, None], out=target)
                else:
                    result = np.divide(exponentials, row_sum[:, None], out=exponentials)
            if target is None:
                store(outs[0], _from_rows(result, shape, dim))

        def bind(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None],
                 workspace: np.ndarray | None) -> Callable[[], None]:
            """Softmax of fp32 along the last dim into a contiguous fp32 output (bert's): the
            views made once, ``kernel``'s numpy calls on them; anything else runs ``kernel``."""
            x, y = ins[0], outs[0]
            target = None if y is None or not last else target_view(y, (rows, length), np.float32)
            values = kept_view(x, (rows, length))
            if log or values is None or values.dtype != np.float32 or target is None:
                return functools.partial(kernel, ins, outs, workspace)
            row_max = scratch_view(workspace, max_at, (rows,), np.float32)
            row_sum = scratch_view(workspace, sum_at, (rows,), np.float32)
            max_rows, sum_rows = row_max[:, None], row_sum[:, None]

            def run() -> None:
                np.maximum.reduce(values, axis=1, out=row_max)
                np.subtract(values, max_rows, out=target)
                np.exp(target, out=target)
                np.add.reduce(target, axis=1, out=row_sum)
                np.divide(target, sum_rows, out=target)

            return fp_errors_ignored(run)

        flops = 5.0 * x.numel
        traffic = float(x.nbytes + out.nbytes + 2 * workspace_size)
        return OpPlan(kernel, workspace_size, flops, traffic, variant="rows-fp32-stats", bind=bind)


for _spec in (*_POINTWISE, SoftmaxOp("Softmax", log=False), SoftmaxOp("LogSoftmax", log=True)):
    register(_spec)
