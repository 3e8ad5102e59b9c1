"""Elementwise math: binary ops, their scalar forms, and unary functions.

Binary: ``Add``/``Sub`` (``out = self ± alpha * other``), ``Mul``, ``Div``, ``Maximum``,
``Minimum``, ``Pow``; scalar forms ``Adds``, ``Subs``, ``Muls``, ``Divs`` take the scalar
as the attribute ``other`` (a Python number).  Unary: ``Neg``, ``Abs``, ``Exp``, ``Log``,
``Sqrt``, ``Rsqrt``, ``Reciprocal``, ``Erf``.

Dtype rules follow aclnn, which follows PyTorch:

- two tensors promote with :func:`~aclpipe.dtypes.promote_types`; a tensor and a scalar with
  :func:`~aclpipe.dtypes.result_type_with_scalar` (an integer tensor plus a float scalar
  gives float32); tensors broadcast NumPy-style;
- ``Div``/``Divs`` are true division: integer operands give float32, like ``torch.div``;
- ``Exp``, ``Log``, ``Sqrt``, ``Rsqrt``, ``Reciprocal`` and ``Erf`` accept integer and bool
  tensors and return float32 (``torch.exp(int_tensor)`` is float32);
- ``Add``/``Sub``/``Div``/``Pow``/``Neg``/``Abs`` take floats and integers; ``Mul``,
  ``Maximum`` and ``Minimum`` also take bool (logical and / or / and);
- ``alpha`` and scalar operands must be representable in the result dtype: a float ``alpha``
  with integer tensors, or an integer too large for the integer result, is refused (161002)
  rather than silently wrapped;
- ``Pow`` raises ``self`` to the tensor ``other``, or, when ``other`` is absent, to the scalar
  attribute ``exponent``.  Integer powers with a negative exponent truncate toward zero as
  PyTorch's integer ``pow`` does (``2 ** -1 == 0``, ``(-1) ** -3 == -1``).

The output dtype must equal the inferred dtype.  fp16/bf16 compute in fp32 and round once
when stored.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..dtypes import DType, promote_types, result_type_with_scalar
from ..tensor import TensorDesc
from .base import Bind, Kernel, OpPlan, OpSpec, op_error
from .checks import (
    ALL,
    NUMERIC,
    argument,
    broadcast_shapes,
    constant,
    elementwise_cost,
    need,
    need_dtype,
    need_output,
    store,
)
from .fp_errors import fp_errors_ignored, ignore_fp_errors
from .registry import register

__all__ = ["BinaryOp", "UnaryOp", "erf", "float_result", "keep_dtype", "sigmoid"]

UnaryFn = Callable[[np.ndarray, Mapping[str, Any]], Any]
BinaryFn = Callable[[Any, Any, Mapping[str, Any]], Any]
#: ``into(x, out, params)``: the run writing a unary function straight into ``out`` (see :class:`UnaryOp`).
UnaryInto = Callable[[np.ndarray, np.ndarray, Mapping[str, Any]], Callable[[], None]]
#: ``bound(x, out, params)``: the run computing the function of ``x`` into ``out`` (see :class:`UnaryOp`).
UnaryBound = Callable[[np.ndarray, np.ndarray, Mapping[str, Any]], Callable[[], None]]
DTypeRule = Callable[[DType], DType]
AttrParser = Callable[[str, Mapping[str, Any]], dict[str, Any]]


# -- dtype rules ----------------------------------------------------------------------------
def keep_dtype(dtype: DType) -> DType:
    """The result has the input's dtype."""
    return dtype


def float_result(dtype: DType) -> DType:
    """Floats keep their dtype; integers and bool give float32 (PyTorch's default float)."""
    return dtype if dtype.is_floating else DType.float32


# -- math numpy lacks -----------------------------------------------------------------------
def _erf_table(steps: int, end: float) -> np.ndarray:
    """Per interval ``[i/steps, (i+1)/steps)`` of ``[0, end)``, a row: the cubic (Hermite) through
    erf and its slope at both ends, as coefficients of ``t`` in ``[0, 1)``, highest power first."""
    nodes = np.arange(int(end * steps) + 1) / steps
    values = np.array([math.erf(node) for node in nodes])
    slopes = 2.0 / math.sqrt(math.pi) / steps * np.exp(-np.square(nodes))  # erf' scaled to t
    v0, v1, s0, s1 = values[:-1], values[1:], slopes[:-1], slopes[1:]
    return np.ascontiguousarray(np.stack([2.0 * (v0 - v1) + s0 + s1, 3.0 * (v1 - v0) - 2.0 * s0 - s1, s0, v0],
                                         axis=1))


# erf from a table of cubic pieces, 32 per unit on [0, 4): erf(4) = 1 - 1.5e-8 already rounds to
# 1 in fp32, so larger |x| are clamped there.  Evaluated in float64, the pieces are within 9.1e-8
# relative of erf at every fp32 x (checked against float64 erf on 4.4 million points, tiny x
# included: the first piece starts at erf(0) = 0 with erf's own slope), under what an fp32
# result needs; no exp and no second branch, a third of what a fitted erfc with exp costs.
_ERF_STEPS = 32
_ERF_PIECES = _erf_table(_ERF_STEPS, 4.0)
_ERF_LAST = math.nextafter(float(len(_ERF_PIECES)), 0.0)  # the last piece's t stays below 1
# each power's coefficients as one contiguous table: one np.take per power into one contiguous
# array beats one take of four into rows that every Horner step then reads with a stride
_ERF_COLUMNS = tuple(np.ascontiguousarray(_ERF_PIECES[:, power]) for power in range(4))


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, in float64, within 1e-7 relative of erf (enough for fp32); nan stays nan.

    ``|x|`` picks a cubic piece (an ``np.take`` of each of its four coefficients, clipped: a
    nan's index is garbage, its ``t`` nan) evaluated by Horner in place, and the sign is copied back:
    the steps of :func:`erf_bound`, run once."""
    x64 = np.asarray(x, dtype=np.float64)
    result = np.empty(x64.shape, np.float64)
    erf_bound(x64, result, {})()
    return result


def erf_bound(x: np.ndarray, out: np.ndarray, params: Mapping[str, Any]) -> Callable[[], None]:
    """:func:`erf` of ``x`` into ``out`` as a run with its temporaries made once (no large
    allocation per launch)."""
    shape = x.shape
    x64, scaled, result, coefficient = (np.empty(shape, np.float64) for _ in range(4))
    index = np.empty(shape, np.intp)
    # The clamp compares against an array (numpy's minimum with a scalar has no SIMD loop here:
    # checks.constant), and the piece's start is floor(scaled) in float64, the value the int
    # index converts back to exactly (scaled >= 0): a float subtraction instead of a mixed
    # float - int one (a nan's index is garbage either way, its t nan).  The same bits.
    last = constant(shape, np.float64, _ERF_LAST)
    start = result  # free until the Horner steps write it

    def run() -> None:
        np.copyto(x64, x)
        np.abs(x64, out=scaled)
        np.multiply(scaled, _ERF_STEPS, out=scaled)
        np.minimum(scaled, last, out=scaled)
        np.floor(scaled, out=start)
        np.copyto(index, start, casting="unsafe")
        np.subtract(scaled, start, out=scaled)
        np.take(_ERF_COLUMNS[0], index, out=coefficient, mode="clip")
        np.multiply(coefficient, scaled, out=result)
        for power in (1, 2, 3):
            np.take(_ERF_COLUMNS[power], index, out=coefficient, mode="clip")
            np.add(result, coefficient, out=result)
            if power < 3:
                np.multiply(result, scaled, out=result)
        np.copysign(result, x64, out=result)
        np.copyto(out, result, casting="unsafe")

    return run


def sigmoid(x: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-x))``; exp overflow for very negative x gives the right 0 (kernels run
    under ``np.errstate``, so the overflow is not an error)."""
    return np.asarray(1.0 / (1.0 + np.exp(-x)))


# -- scalar attributes ----------------------------------------------------------------------
_MISSING = object()


def scalar_attr(op: str, name: str, attrs: Mapping[str, Any], default: Any = _MISSING) -> int | float | bool:
    """A Python-number attribute (aclScalar); NULL is 161001, anything else not a number 161002."""
    value = attrs.get(name, default)
    if value is None or value is _MISSING:
        raise op_error(op, name, "a scalar", "NULL", null=True)
    if isinstance(value, np.generic):
        value = value.item()
    if not isinstance(value, (bool, numbers.Integral, numbers.Real)):
        raise op_error(op, name, "a Python number (bool, int or float)", repr(value))
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    return value if isinstance(value, bool) else float(value)


def cast_scalar(op: str, name: str, value: float | bool, dtype: DType) -> Any:
    """``value`` as a numpy scalar of ``dtype``'s compute type, refusing values it cannot hold."""
    if dtype.is_integer:
        if isinstance(value, float):
            raise op_error(op, name, f"an integer for {dtype.name} tensors", repr(value))
        info = np.iinfo(dtype.numpy)
        if not info.min <= int(value) <= info.max:
            raise op_error(op, name, f"a value in [{info.min}, {info.max}] ({dtype.name})", value)
    if dtype == DType.bool and not isinstance(value, bool):
        raise op_error(op, name, "a bool for bool tensors", repr(value))
    return dtype.compute.type(value)


# -- unary ----------------------------------------------------------------------------------
class UnaryOp(OpSpec):
    """An elementwise function of one tensor, described by a table row.

    Parameters
    ----------
    name:
        The aclnn name (``"Exp"`` for ``aclnnExp``).
    function:
        ``function(x, params)``: ``x`` is the input in the compute dtype, ``params`` what
        ``parse_attrs`` returned.
    allowed:
        Input dtypes the op accepts.
    result:
        The output dtype as a function of the input dtype.
    flops:
        Cost-model FLOPs per element.
    parse_attrs:
        Validates the attributes and returns the kernel's parameters (none by default).
    into:
        ``into(x, out, params)``: the run computing the same function straight into the
        output view ``out`` (every step a ufunc with ``out=``, bit-identical to ``function``),
        used when input and output already have the compute dtype: no temporary, no cast, no
        copy.  The plan's ``bind`` makes it once per bound launch (with any constant operand
        it compares against); the one-shot kernel makes it and runs it once.
    bound:
        ``bound(x, out, params)``: for an input already in the compute dtype, the run that
        writes ``function(x)`` into ``out`` (cast as ``store`` casts, bit-identical), made once
        per bound launch with its temporaries (the plan's ``bind``).
    """

    def __init__(self, name: str, function: UnaryFn, allowed: Iterable[DType], result: DTypeRule = keep_dtype,
                 *, flops: float = 1.0, parse_attrs: AttrParser | None = None,
                 names: tuple[str, str] = ("self", "out"), attrs: Mapping[str, Any] | None = None,
                 into: UnaryInto | None = None, bound: UnaryBound | None = None):
        self.name = name
        self.function = function
        self.into = into
        self.bound = bound
        self.allowed = frozenset(allowed)
        self.result = result
        self.flops = flops
        self.parse_attrs = parse_attrs
        self.inputs = (names[0],)
        self.outputs = (names[1],)
        self.attrs = dict(attrs or {})

    def _check(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]
               ) -> tuple[TensorDesc, DType, dict[str, Any]]:
        x = need(self.name, self.inputs[0], argument(inputs, 0))
        need_dtype(self.name, self.inputs[0], x, self.allowed)
        params = self.parse_attrs(self.name, attrs) if self.parse_attrs else {}
        return x, self.result(x.dtype), params

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        x, dtype, _ = self._check(inputs, attrs)
        return [TensorDesc.contiguous(x.shape, dtype)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        x, dtype, params = self._check(inputs, attrs)
        out = need_output(self.name, self.outputs[0], argument(outputs, 0), x.shape, dtype)
        function, compute, bound = self.function, dtype.compute, self.bound
        ufunc: np.ufunc | None = getattr(function, "ufunc", None)
        if x.dtype.numpy == compute and out.dtype.numpy == compute:
            if ufunc is not None:
                return OpPlan(_direct_unary(ufunc), 0, *elementwise_cost(out.numel, [x, out], self.flops),
                              bind=_bind_direct_unary(ufunc))
            if self.into is not None:
                return OpPlan(_into_unary(self.into, params), 0, *elementwise_cost(out.numel, [x, out], self.flops),
                              bind=_bind_into_unary(self.into, params))

        def kernel(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            assert ins[0] is not None and outs[0] is not None
            with ignore_fp_errors():  # inf/nan results are data, as on the device
                store(outs[0], function(ins[0].astype(compute, copy=False), params))

        def bind(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None],
                 workspace: np.ndarray | None) -> Callable[[], None]:
            x_view, out_view = ins[0], outs[0]
            if bound is None or x_view is None or out_view is None or x_view.dtype != compute:
                return functools.partial(kernel, ins, outs, workspace)
            return fp_errors_ignored(bound(x_view, out_view, params))

        flops, traffic = elementwise_cost(out.numel, [x, out], self.flops)
        return OpPlan(kernel, 0, flops, traffic, bind=None if bound is None else bind)


def _direct_unary(ufunc: np.ufunc) -> Kernel:
    """A kernel writing ``ufunc(self)`` into the output view: no casts, no temporary."""

    def kernel(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None],
               workspace: np.ndarray | None) -> None:
        with ignore_fp_errors():  # inf/nan results are data, as on the device
            ufunc(ins[0], out=outs[0])

    return kernel


def _bind_direct_unary(ufunc: np.ufunc) -> Bind:
    """:func:`_direct_unary` on views fixed once."""

    def bind(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None],
             workspace: np.ndarray | None) -> Callable[[], None]:
        return fp_errors_ignored(functools.partial(ufunc, ins[0], out=outs[0]))

    return bind


def _bind_into_unary(into: UnaryInto, params: dict[str, Any]) -> Bind:
    """:func:`_into_unary` on views fixed once."""

    def bind(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None],
             workspace: np.ndarray | None) -> Callable[[], None]:
        x, out = ins[0], outs[0]
        assert x is not None and out is not None
        return fp_errors_ignored(into(x, out, params))

    return bind


def _into_unary(into: UnaryInto, params: dict[str, Any]) -> Kernel:
    """A kernel computing ``into(self, out, params)`` in the output view (see :class:`UnaryOp`)."""

    def kernel(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None],
               workspace: np.ndarray | None) -> None:
        with ignore_fp_errors():  # inf/nan results are data, as on the device
            into(ins[0], outs[0], params)()  # type: ignore[arg-type]

    return kernel


# -- binary ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class _BinaryCall:
    """A validated binary call: the tensors read, the output shape and dtype, kernel params."""

    tensors: tuple[TensorDesc, ...]
    shape: tuple[int, ...]
    dtype: DType
    params: dict[str, Any] = field(default_factory=dict)


class BinaryOp(OpSpec):
    """An elementwise function of two operands (a tensor and a tensor or a scalar attribute).

    Parameters
    ----------
    name:
        The aclnn name.
    function:
        ``function(a, b, params)`` on operands already cast to the result's compute dtype;
        ``b`` is an array, or for scalar forms a numpy scalar.  ``params`` holds ``alpha``.
    allowed:
        Dtypes each tensor operand may have.
    tensor:
        The op takes a second tensor ``other``.
    scalar:
        Attribute holding a scalar second operand: used when ``other`` is absent.
    alpha:
        The op takes ``alpha`` (default 1).
    true_divide:
        Integer results become float32.
    """

    def __init__(self, name: str, function: BinaryFn, allowed: Iterable[DType], *, tensor: bool = True,
                 scalar: str | None = None, alpha: bool = False, true_divide: bool = False, flops: float = 1.0):
        self.name = name
        self.function = function
        self.allowed = frozenset(allowed)
        self.tensor = tensor
        self.scalar = scalar
        self.alpha = alpha
        self.true_divide = true_divide
        self.flops = flops
        self.inputs = ("self", "other") if tensor else ("self",)
        attrs: dict[str, Any] = {}
        if scalar:
            attrs[scalar] = None
        if alpha:
            attrs["alpha"] = 1
        self.attrs = attrs

    def _check(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> _BinaryCall:
        x = need(self.name, "self", argument(inputs, 0))
        need_dtype(self.name, "self", x, self.allowed)
        other = argument(inputs, 1) if self.tensor else None
        if other is None and self.tensor and (self.scalar is None or attrs.get(self.scalar) is None):
            raise op_error(self.name, "other", "a tensor" + (f" or the {self.scalar} attribute" if self.scalar
                                                              else ""), "NULL", null=True)
        if other is not None and self.scalar and attrs.get(self.scalar) is not None:
            raise op_error(self.name, self.scalar, "no scalar when the tensor other is given", attrs[self.scalar])
        call = self._with_tensor(x, other) if other is not None else self._with_scalar(x, attrs)
        if self.alpha:
            call.params["alpha"] = cast_scalar(self.name, "alpha", scalar_attr(self.name, "alpha", attrs, 1),
                                               call.dtype)
        return call

    def _with_tensor(self, x: TensorDesc, other: TensorDesc) -> _BinaryCall:
        need(self.name, "other", other)
        need_dtype(self.name, "other", other, self.allowed)
        shape = broadcast_shapes(self.name, [("self", x.shape), ("other", other.shape)])
        return _BinaryCall((x, other), shape, self._result(promote_types(x.dtype, other.dtype)))

    def _with_scalar(self, x: TensorDesc, attrs: Mapping[str, Any]) -> _BinaryCall:
        assert self.scalar is not None
        value = scalar_attr(self.name, self.scalar, attrs)
        dtype = self._result(result_type_with_scalar(x.dtype, value))
        return _BinaryCall((x,), x.shape, dtype, {"scalar": cast_scalar(self.name, self.scalar, value, dtype)})

    def _result(self, dtype: DType) -> DType:
        return float_result(dtype) if self.true_divide else dtype

    def _direct_ufunc(self, call: _BinaryCall, out: TensorDesc) -> np.ufunc | None:
        """The ufunc that computes this call straight into the output view (every tensor
        already in the compute dtype, alpha 1), or None: the general path casts and stores."""
        ufunc: np.ufunc | None = getattr(self.function, "ufunc", None)
        compute = call.dtype.compute
        if ufunc is None or call.params.get("alpha", 1) != 1:
            return None
        if any(t.dtype.numpy != compute for t in (*call.tensors, out)):
            return None
        return ufunc

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        call = self._check(inputs, attrs)
        return [TensorDesc.contiguous(call.shape, call.dtype)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        call = self._check(inputs, attrs)
        out = need_output(self.name, "out", argument(outputs, 0), call.shape, call.dtype)
        function, compute, params = self.function, call.dtype.compute, call.params
        scalar_operand = "scalar" in params
        direct = self._direct_ufunc(call, out)
        if direct is not None:
            return OpPlan(_direct_binary(direct, params.get("scalar")), 0,
                          *elementwise_cost(out.numel, [*call.tensors, out], self.flops),
                          bind=_bind_direct_binary(direct, params.get("scalar")))

        def kernel(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            assert ins[0] is not None and outs[0] is not None
            first = ins[0].astype(compute, copy=False)
            second = params["scalar"] if scalar_operand else np.asarray(ins[1]).astype(compute, copy=False)
            with ignore_fp_errors():  # x/0, overflow: inf/nan are data, as on the device
                store(outs[0], function(first, second, params))

        flops, traffic = elementwise_cost(out.numel, [*call.tensors, out], self.flops)
        return OpPlan(kernel, 0, flops, traffic)


def _direct_binary(ufunc: np.ufunc, scalar: Any) -> Kernel:
    """A kernel writing ``ufunc(self, other)`` (or ``ufunc(self, scalar)``) into the output
    view: no casts, no temporary (ufuncs handle an output that overlaps an input)."""

    def kernel(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None],
               workspace: np.ndarray | None) -> None:
        with ignore_fp_errors():  # x/0, overflow: inf/nan are data, as on the device
            ufunc(ins[0], scalar if scalar is not None else ins[1], out=outs[0])

    return kernel


def _bind_direct_binary(ufunc: np.ufunc, scalar: Any) -> Bind:
    """:func:`_direct_binary` on views fixed once."""

    def bind(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None],
             workspace: np.ndarray | None) -> Callable[[], None]:
        second = scalar if scalar is not None else ins[1]
        return fp_errors_ignored(functools.partial(ufunc, ins[0], second, out=outs[0]))

    return bind


# -- kernels --------------------------------------------------------------------------------
class _Ufunc2:
    """A binary function that is one ufunc (``ufunc`` lets the op call it with ``out=``)."""

    def __init__(self, ufunc: np.ufunc):
        self.ufunc = ufunc

    def __call__(self, a: Any, b: Any, params: Mapping[str, Any]) -> Any:
        return self.ufunc(a, b)


class _AlphaUfunc(_Ufunc2):
    """``a ± alpha * b``: the ufunc alone when alpha is 1 (bit-exact: no multiply)."""

    def __call__(self, a: Any, b: Any, params: Mapping[str, Any]) -> Any:
        alpha = params["alpha"]
        return self.ufunc(a, b) if alpha == 1 else self.ufunc(a, b * alpha)


_add = _AlphaUfunc(np.add)
_sub = _AlphaUfunc(np.subtract)


def _ufunc2(ufunc: np.ufunc) -> BinaryFn:
    return _Ufunc2(ufunc)


class _Ufunc1:
    """A unary function that is one ufunc (``ufunc`` lets the op call it with ``out=``)."""

    def __init__(self, ufunc: np.ufunc):
        self.ufunc = ufunc

    def __call__(self, x: np.ndarray, params: Mapping[str, Any]) -> Any:
        return self.ufunc(x)


def _ufunc1(ufunc: np.ufunc) -> UnaryFn:
    return _Ufunc1(ufunc)


def _power(base: Any, exponent: Any, params: Mapping[str, Any]) -> Any:
    if not np.issubdtype(np.result_type(base, exponent), np.integer):
        if np.ndim(exponent) == 0 and np.ndim(base) > 0:
            return _float_power_by_one_exponent(base, exponent)
        return np.power(base, exponent)
    base, exponent = np.broadcast_arrays(np.asarray(base), np.asarray(exponent))
    negative = exponent < 0
    result = np.power(base, np.where(negative, 0, exponent).astype(exponent.dtype))
    # PyTorch's integer pow: 1/base**n truncated toward zero, so only |base| == 1 survives.
    odd = exponent % 2 != 0
    inverse = np.where(base == 1, 1, np.where(base == -1, np.where(odd, -1, 1), 0))
    return np.where(negative, inverse.astype(result.dtype), result)


def _float_power_by_one_exponent(base: np.ndarray, exponent: Any) -> Any:
    """``base ** exponent`` for one float exponent: squares and cubes as products, in the order
    onnxruntime's Pow multiplies them (``x * x``, ``(x * x) * x``: its results bit for bit), a
    hundred times faster than numpy's scalar ``powf`` loop (GELU's cube in T5 and GPT models)."""
    value = float(exponent)
    if value == 2.0:
        return np.multiply(base, base)
    if value == 3.0:
        cube = np.multiply(base, base)
        return np.multiply(cube, base, out=cube)
    return np.power(base, exponent)


_LOGICAL = ALL  # Mul, Maximum, Minimum on bool act as and, or, and

_BINARY_OPS = (
    BinaryOp("Add", _add, NUMERIC, alpha=True),
    BinaryOp("Adds", _add, NUMERIC, tensor=False, scalar="other", alpha=True),
    BinaryOp("Sub", _sub, NUMERIC, alpha=True),
    BinaryOp("Subs", _sub, NUMERIC, tensor=False, scalar="other", alpha=True),
    BinaryOp("Mul", _ufunc2(np.multiply), _LOGICAL),
    BinaryOp("Muls", _ufunc2(np.multiply), _LOGICAL, tensor=False, scalar="other"),
    BinaryOp("Div", _ufunc2(np.true_divide), NUMERIC, true_divide=True),
    BinaryOp("Divs", _ufunc2(np.true_divide), NUMERIC, tensor=False, scalar="other", true_divide=True),
    BinaryOp("Maximum", _ufunc2(np.maximum), _LOGICAL),
    BinaryOp("Minimum", _ufunc2(np.minimum), _LOGICAL),
    BinaryOp("Pow", _power, NUMERIC, scalar="exponent", flops=8.0),
)

_UNARY_OPS = (
    UnaryOp("Neg", _ufunc1(np.negative), NUMERIC),
    UnaryOp("Abs", _ufunc1(np.abs), NUMERIC),
    UnaryOp("Exp", _ufunc1(np.exp), ALL, float_result, flops=4.0),
    UnaryOp("Log", _ufunc1(np.log), ALL, float_result, flops=4.0),
    UnaryOp("Sqrt", _ufunc1(np.sqrt), ALL, float_result, flops=2.0),
    UnaryOp("Rsqrt", lambda x, params: 1.0 / np.sqrt(x), ALL, float_result, flops=3.0),
    UnaryOp("Reciprocal", lambda x, params: 1.0 / x, ALL, float_result),
    UnaryOp("Erf", lambda x, params: erf(x), ALL, float_result, flops=20.0, bound=erf_bound),
)

for _spec in (*_BINARY_OPS, *_UNARY_OPS):
    register(_spec)
