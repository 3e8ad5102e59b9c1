"""Piecewise-linear pointwise functions: ``Clamp``, ``Hardsigmoid``, ``Hardswish``,
``LeakyRelu``, ``Prelu``.

- ``Clamp(min, max)`` (aclnnClamp): ``min(max(self, min), max)``; either bound may be None
  (not both).  Floats and integers; the result keeps the input's dtype, so a bound must be
  representable in it (a float bound on an integer tensor is refused, 161002).  With
  ``min > max`` every element becomes ``max`` (PyTorch's and ONNX's rule); NaN stays NaN.
- ``Hardsigmoid`` (aclnnHardsigmoid): ``clamp(x / 6 + 1/2, 0, 1)``; ``Hardswish``:
  ``x * Hardsigmoid(x)``.  Floats only.
- ``LeakyRelu(negativeSlope=0.01)``: ``x`` where ``x >= 0``, else ``negativeSlope * x``.  Floats.
- ``Prelu(self, weight)`` (aclnnPrelu): LeakyRelu with a learned slope per channel:
  ``weight`` is 1-D with one element or one per channel (dim 1 of ``self``; dim 0 of a 1-D
  ``self``), of ``self``'s dtype.  Floats.

fp16/bf16 compute in fp32 and round once.  None needs a workspace.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..tensor import TensorDesc
from .base import OpPlan, OpSpec, op_error
from .checks import (
    FLOATS,
    NUMERIC,
    argument,
    constant,
    elementwise_cost,
    need,
    need_dtype,
    need_output,
    need_same_dtype,
    store,
)
from .elementwise import UnaryOp, cast_scalar, keep_dtype, scalar_attr
from .registry import register

__all__ = ["Prelu", "hardsigmoid"]


def hardsigmoid(x: np.ndarray) -> np.ndarray:
    """``clamp(x / 6 + 0.5, 0, 1)`` (PyTorch's ``relu6(x + 3) / 6``)."""
    return np.asarray(np.minimum(np.maximum(x / x.dtype.type(6) + x.dtype.type(0.5), 0), 1))


def _hardsigmoid_into(x: np.ndarray, out: np.ndarray, params: Mapping[str, Any]) -> Callable[[], None]:
    """:func:`hardsigmoid` computed in ``out``: the same ufuncs on the same dtype, so the same
    bits; the bounds are arrays (:func:`constant`: a scalar bound takes numpy's slow loop)."""
    kind = x.dtype.type
    zero, one = constant(out.shape, out.dtype, 0), constant(out.shape, out.dtype, 1)

    def run() -> None:
        np.divide(x, kind(6), out=out)
        np.add(out, kind(0.5), out=out)
        np.maximum(out, zero, out=out)
        np.minimum(out, one, out=out)

    return run


def _hardswish_into(x: np.ndarray, out: np.ndarray, params: Mapping[str, Any]) -> Callable[[], None]:
    """``x * hardsigmoid(x)`` computed in ``out``: the Hardsigmoid steps, then the product (the
    same ufuncs on the same dtype, so the same bits).  An output sharing memory with ``x`` gets
    the Hardsigmoid in an array of its own (the product still reads ``x``)."""
    sigmoid = np.empty(out.shape, out.dtype) if np.may_share_memory(x, out) else out
    steps = _hardsigmoid_into(x, sigmoid, params)
    product = functools.partial(np.multiply, x, sigmoid, out=out)

    def run() -> None:
        steps()
        product()

    return run


def _clamp_into(x: np.ndarray, out: np.ndarray, params: Mapping[str, Any]) -> Callable[[], None]:
    """:func:`_clamp` computed in ``out`` (the same ufuncs, so the same bits), against arrays of
    the bounds (:func:`constant`)."""
    low, high = (None if params[key] is None else constant(out.shape, x.dtype, x.dtype.type(params[key]))
                 for key in ("min", "max"))
    if low is None:
        assert high is not None
        return functools.partial(np.minimum, x, high, out=out)
    if high is None:
        return functools.partial(np.maximum, x, low, out=out)
    lower = functools.partial(np.maximum, x, low, out=out)
    upper = functools.partial(np.minimum, out, high, out=out)

    def run() -> None:
        lower()
        upper()

    return run


def _clamp_attrs(op: str, attrs: Mapping[str, Any]) -> dict[str, Any]:
    bounds = {key: None if attrs.get(key) is None else scalar_attr(op, key, attrs) for key in ("min", "max")}
    if bounds["min"] is None and bounds["max"] is None:
        raise op_error(op, "min", "a min or a max bound (both are NULL)", "NULL", null=True)
    return bounds


def _clamp(x: np.ndarray, params: Mapping[str, Any]) -> np.ndarray:
    # Bounds are checked against the tensor's dtype in _checked_clamp's parse step.
    low, high = params["min"], params["max"]
    result = x if low is None else np.maximum(x, x.dtype.type(low))
    return np.asarray(result if high is None else np.minimum(result, x.dtype.type(high)))


class _Clamp(UnaryOp):
    """UnaryOp plus the check that each bound fits the tensor's dtype."""

    def _check(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> Any:
        x, dtype, params = super()._check(inputs, attrs)
        for key in ("min", "max"):
            if params[key] is not None:
                cast_scalar(self.name, key, params[key], dtype)
        return x, dtype, params


def _leaky_attrs(op: str, attrs: Mapping[str, Any]) -> dict[str, Any]:
    return {"slope": float(scalar_attr(op, "negativeSlope", attrs, 0.01))}


def _leaky_relu(x: np.ndarray, params: Mapping[str, Any]) -> np.ndarray:
    return np.asarray(np.where(x >= 0, x, x * x.dtype.type(params["slope"])))


class Prelu(OpSpec):
    """``out = x >= 0 ? x : weight[c] * x`` with ``c`` the channel (dim 1) of each element."""

    name = "Prelu"
    inputs = ("self", "weight")
    outputs = ("out",)
    attrs: Mapping[str, Any] = {}

    def _check(self, inputs: Sequence[TensorDesc | None]) -> tuple[TensorDesc, TensorDesc, int]:
        x = need(self.name, "self", argument(inputs, 0))
        weight = need(self.name, "weight", argument(inputs, 1))
        need_dtype(self.name, "self", x, FLOATS)
        need_same_dtype(self.name, ("self", "weight"), (x, weight))
        channels = 1 if x.ndim == 0 else x.shape[1] if x.ndim >= 2 else x.shape[0]
        if weight.ndim != 1 or weight.shape[0] not in (1, channels):
            raise op_error(self.name, "weight", f"a 1-D tensor of 1 or {channels} (channels) elements",
                           list(weight.shape))
        return x, weight, channels

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        x, _, _ = self._check(inputs)
        return [TensorDesc.contiguous(x.shape, x.dtype)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        x, weight, _ = self._check(inputs)
        out = need_output(self.name, "out", argument(outputs, 0), x.shape, x.dtype)
        compute, ndim = x.dtype.compute, x.ndim
        # The slope vector lines up with dim 1 (dim 0 of a 1-D input), trailing dims broadcast.
        slope_shape = (-1,) + (1,) * (ndim - 2) if ndim >= 2 else (-1,)

        def kernel(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            assert ins[0] is not None and ins[1] is not None and outs[0] is not None
            values = ins[0].astype(compute, copy=False)
            slope = ins[1].astype(compute, copy=False)
            slope = slope.reshape(()) if ndim == 0 else slope.reshape(slope_shape)
            store(outs[0], np.where(values >= 0, values, values * slope))

        flops, traffic = elementwise_cost(out.numel, [x, weight, out], 2.0)
        return OpPlan(kernel, 0, flops, traffic)


_OPS = (
    _Clamp("Clamp", _clamp, NUMERIC, keep_dtype, flops=2.0, parse_attrs=_clamp_attrs,
           attrs={"min": None, "max": None}, into=_clamp_into),
    UnaryOp("Hardsigmoid", lambda x, params: hardsigmoid(x), FLOATS, keep_dtype, flops=4.0,
            into=_hardsigmoid_into),
    UnaryOp("Hardswish", lambda x, params: x * hardsigmoid(x), FLOATS, keep_dtype, flops=5.0,
            into=_hardswish_into),
    UnaryOp("LeakyRelu", _leaky_relu, FLOATS, keep_dtype, flops=2.0, parse_attrs=_leaky_attrs,
            attrs={"negativeSlope": 0.01}),
    Prelu(),
)

for _spec in _OPS:
    register(_spec)
