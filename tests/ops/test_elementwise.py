"""Elementwise ops on the simulator against float64/int64 numpy references."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers import FLOAT_DTYPES, INT_DTYPES, assert_close, prepare, random_array, run_op
from hypothesis import given, settings
from hypothesis.extra.numpy import mutually_broadcastable_shapes
from ort_single import ort_node

from aclpipe.dtypes import DType, as_dtype
from aclpipe.errors import InvalidArgumentError
from aclpipe.ops import get_op
from aclpipe.tensor import TensorDesc

SHAPE = (3, 5)


def _reference(function: Callable[..., Any], *arrays: np.ndarray, result: str) -> np.ndarray:
    """``function`` on exact values: float64 for float results, int64 (wrapping) for integers."""
    wide = np.float64 if as_dtype(result).is_floating else (np.bool_ if result == "bool" else np.int64)
    with np.errstate(all="ignore"):
        return np.asarray(function(*(np.asarray(a).astype(wide) for a in arrays))).astype(wide)


_erf = np.vectorize(math.erf, otypes=[np.float64])

BINARY = {
    "Add": (lambda a, b: a + 2 * b, {"alpha": 2}, (*FLOAT_DTYPES, *INT_DTYPES)),
    "Sub": (lambda a, b: a - b, {}, (*FLOAT_DTYPES, *INT_DTYPES)),
    "Mul": (lambda a, b: a * b, {}, (*FLOAT_DTYPES, *INT_DTYPES, "bool")),
    "Div": (lambda a, b: a / b, {}, (*FLOAT_DTYPES, *INT_DTYPES)),
    "Maximum": (np.maximum, {}, (*FLOAT_DTYPES, *INT_DTYPES, "bool")),
    "Minimum": (np.minimum, {}, (*FLOAT_DTYPES, *INT_DTYPES, "bool")),
    "Pow": (np.power, {}, (*FLOAT_DTYPES, *INT_DTYPES)),
}


def _operands(rng: np.random.Generator, op: str, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    a = random_array(rng, SHAPE, dtype)
    b = random_array(rng, SHAPE, dtype)
    if op == "Div":  # keep divisors away from zero: division by zero has its own test
        b = random_array(rng, SHAPE, dtype, low=1, high=3)
    if op == "Pow":
        a = random_array(rng, SHAPE, dtype, low=0.5 if dtype in FLOAT_DTYPES else 0, high=3)
        b = random_array(rng, SHAPE, dtype, low=-2 if dtype in FLOAT_DTYPES else 0, high=3)
    return a, b


@pytest.mark.parametrize("op,dtype", [(op, d) for op, (_, _, dtypes) in BINARY.items() for d in dtypes])
def test_binary_ops_match_numpy_for_every_dtype_and_layout(device, op, dtype):
    function, attrs, _ = BINARY[op]
    rng = np.random.default_rng(hash((op, dtype)) % 2**32)
    a, b = _operands(rng, op, dtype)
    result = "float32" if op == "Div" and dtype not in FLOAT_DTYPES else dtype
    expected = _reference(function, a, b, result=result)
    for layout in ("contiguous", ("strided", "transposed")):
        (out,) = run_op(device, op, [a, b], attrs, layout=layout)
        assert_close(out, expected, result)


SCALAR_CASES = [
    ("Adds", "float32", {"other": 2.5, "alpha": -1.5}, lambda a: a - 1.5 * 2.5, "float32"),
    ("Adds", "int32", {"other": 7, "alpha": 3}, lambda a: a + 21, "int32"),
    ("Adds", "int8", {"other": 2.5}, lambda a: a + 2.5, "float32"),
    ("Subs", "float16", {"other": 0.5}, lambda a: a - 0.5, "float16"),
    ("Subs", "bfloat16", {"other": 1, "alpha": 2}, lambda a: a - 2, "bfloat16"),
    ("Muls", "float32", {"other": -3.0}, lambda a: a * -3.0, "float32"),
    ("Muls", "bool", {"other": True}, lambda a: a, "bool"),
    ("Muls", "uint8", {"other": 3}, lambda a: a * 3, "uint8"),
    ("Divs", "float16", {"other": 4.0}, lambda a: a / 4.0, "float16"),
    ("Divs", "int64", {"other": 2}, lambda a: a / 2, "float32"),
    ("Pow", "float32", {"exponent": 2.0}, lambda a: a ** 2, "float32"),
    ("Pow", "int32", {"exponent": 3}, lambda a: a ** 3, "int32"),
    ("Pow", "int32", {"exponent": 0.5}, lambda a: np.abs(a) ** 0.5, "float32"),
]


@pytest.mark.parametrize("op,dtype,attrs,function,result", SCALAR_CASES)
def test_scalar_forms_follow_pytorch_promotion(device, op, dtype, attrs, function, result):
    rng = np.random.default_rng(7)
    a = random_array(rng, SHAPE, dtype, low=0 if "exponent" in attrs else -3)
    inputs = [a, None] if op == "Pow" else [a]
    (out,) = run_op(device, op, inputs, attrs, layout="strided")
    assert_close(out, _reference(function, a, result=result), result)


_EVERY = (*FLOAT_DTYPES, *INT_DTYPES, "bool")
UNARY = {
    "Neg": (np.negative, (*FLOAT_DTYPES, *INT_DTYPES)),
    "Abs": (np.abs, (*FLOAT_DTYPES, *INT_DTYPES)),
    "Exp": (np.exp, _EVERY),
    "Log": (np.log, _EVERY),
    "Sqrt": (np.sqrt, _EVERY),
    "Rsqrt": (lambda x: 1 / np.sqrt(x), _EVERY),
    "Reciprocal": (lambda x: 1 / x, _EVERY),
    "Erf": (_erf, _EVERY),
}
_POSITIVE = {"Log", "Sqrt", "Rsqrt", "Reciprocal"}


@pytest.mark.parametrize("op,dtype", [(op, d) for op, (_, dtypes) in UNARY.items() for d in dtypes])
def test_unary_ops_match_numpy_and_integers_give_float32(device, op, dtype):
    function, _ = UNARY[op]
    rng = np.random.default_rng(3)
    low = 1 if op in _POSITIVE else -3
    x = random_array(rng, (4, 6), dtype, low=low, high=4)
    result = dtype if dtype in FLOAT_DTYPES or op in ("Neg", "Abs") else "float32"
    assert get_op(op).infer([TensorDesc.contiguous(x.shape, dtype)], {})[0].dtype == as_dtype(result)
    expected = _reference(function, x, result=result)
    for layout in ("contiguous", "transposed"):
        (out,) = run_op(device, op, [x], layout=layout)
        assert_close(out, expected, result, scale=2.0)


def test_erf_is_accurate_across_its_range(device):
    x = np.concatenate([np.linspace(-6, 6, 241), [0.0, 1e-8, -1e-30, 0.4999, 0.5, np.inf, -np.inf]]).astype(
        np.float32)
    (out,) = run_op(device, "Erf", [x])
    np.testing.assert_allclose(out, _erf(x.astype(np.float64)), rtol=2e-7, atol=1e-30)


def test_erf_takes_the_piece_start_as_the_integer_index_would():
    """erf_bound subtracts floor(scaled) (a float) where the plain form subtracts the int index
    of the piece, and clamps against an array: the same bits on every kind of fp32 value (random
    bit patterns: nan payloads, infinities, subnormals) and in float64."""
    from aclpipe.ops.elementwise import _ERF_LAST, _ERF_PIECES, _ERF_STEPS, erf_bound

    def by_index(x: np.ndarray) -> np.ndarray:
        scaled = np.minimum(np.abs(x.astype(np.float64)) * _ERF_STEPS, _ERF_LAST)
        index = scaled.astype(np.intp)
        t = scaled - index
        pieces = np.take(_ERF_PIECES, index, axis=0, mode="clip")
        result = pieces[..., 0] * t
        for power in (1, 2, 3):
            result = result + pieces[..., power]
            result = result * t if power < 3 else result
        return np.copysign(result, x.astype(np.float64)).astype(x.dtype)

    rng = np.random.default_rng(12)
    patterns = np.frombuffer(rng.integers(0, 2**32, 200_000, dtype=np.uint32).tobytes(), np.float32)
    for x in (patterns.reshape(2, -1), rng.standard_normal(50_000) * 3, np.array(-0.0, np.float32)):
        out = np.empty_like(x)
        with np.errstate(all="ignore"):
            erf_bound(x, out, {})()
            expected = by_index(x)
        view = np.uint32 if x.dtype == np.float32 else np.uint64
        np.testing.assert_array_equal(out.view(view), expected.view(view))


def test_erf_pieces_are_within_1e_7_everywhere_including_their_ends_and_tiny_values():
    from aclpipe.ops.elementwise import erf

    ends = np.arange(0, 4 * 32 + 1) / 32
    x = np.concatenate([np.linspace(-4.5, 4.5, 90_001), ends, -ends, np.nextafter(ends, 5), np.nextafter(ends, -1),
                        np.geomspace(1e-38, 1.0, 2_001), -np.geomspace(1e-38, 1.0, 2_001)]).astype(np.float32)
    wide = x.astype(np.float64)
    exact = _erf(wide)
    got = erf(x)
    assert got.dtype == np.float64
    nonzero = exact != 0
    assert np.max(np.abs(got[nonzero] - exact[nonzero]) / np.abs(exact[nonzero])) < 1e-7
    np.testing.assert_array_equal(got[~nonzero], exact[~nonzero])  # erf(+-0) is +-0, sign included
    assert np.array_equal(np.signbit(got[~nonzero]), np.signbit(wide[~nonzero]))
    with np.errstate(invalid="ignore"):
        special = erf(np.array([np.nan, np.inf, -np.inf, 1e30, -1e30], np.float32))
    assert np.isnan(special[0]) and special[1:].astype(np.float32).tolist() == [1.0, -1.0, 1.0, -1.0]


def test_erf_of_a_scalar_tensor_matches_the_same_value_in_a_vector(device):
    from aclpipe.ops.elementwise import erf

    # 0-d arrays: np.abs of one is a numpy scalar, which ufuncs' out= refuses.
    assert erf(np.array(0.3, np.float32)).tolist() == erf(np.array([0.3], np.float32)).tolist()[0]
    (out,) = run_op(device, "Erf", [np.array(-1.25, np.float32)])
    assert out.shape == () and out.item() == erf(np.array([-1.25], np.float32)).astype(np.float32)[0]


@pytest.mark.parametrize("shapes,expected", [
    (((3, 1), (1, 4)), (3, 4)),
    (((2, 3, 4), (4,)), (2, 3, 4)),
    (((), (2, 2)), (2, 2)),
    (((5, 1, 2), (3, 1)), (5, 3, 2)),
])
def test_binary_ops_broadcast_like_numpy(device, shapes, expected):
    rng = np.random.default_rng(1)
    a, b = (random_array(rng, shape, "float32") for shape in shapes)
    (out,) = run_op(device, "Mul", [a, b])
    assert out.shape == expected
    assert_close(out, a.astype(np.float64) * b, "float32")


@given(shapes=mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3))
@settings(max_examples=12, deadline=None)
def test_add_broadcasts_any_compatible_shapes(shapes):
    import aclpipe

    a, b = (np.arange(np.prod(s), dtype=np.float32).reshape(s) - 2 for s in shapes.input_shapes)
    with aclpipe.open_device("sim", sanitizer=True) as device:
        (out,) = run_op(device, "Sub", [a, b], {"alpha": 0.5}, layout="strided")
    assert_close(out, a.astype(np.float64) - 0.5 * b, "float32")


@pytest.mark.parametrize("left,right,result", [
    ("float16", "float32", "float32"),
    ("int8", "uint8", "int32"),
    ("bfloat16", "float16", "float32"),
    ("int32", "float16", "float16"),
    ("bool", "int64", "int64"),
])
def test_tensor_tensor_promotion(device, left, right, result):
    rng = np.random.default_rng(5)
    a, b = random_array(rng, SHAPE, left), random_array(rng, SHAPE, right)
    (out,) = run_op(device, "Maximum", [a, b])
    assert_close(out, _reference(np.maximum, a, b, result=result), result)


def test_division_by_zero_gives_inf_and_nan(device):
    a = np.array([1, -1, 0, 4], dtype=np.int32)
    b = np.array([0, 0, 0, 2], dtype=np.int32)
    (out,) = run_op(device, "Div", [a, b])
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, np.array([np.inf, -np.inf, np.nan, 2.0], dtype=np.float32))


def test_integer_pow_with_negative_exponents_truncates_like_pytorch(device):
    base = np.array([2, 1, -1, -1, 3, -2], dtype=np.int64)
    exponent = np.array([-1, -5, -3, -2, 2, 3], dtype=np.int64)
    (out,) = run_op(device, "Pow", [base, exponent])
    np.testing.assert_array_equal(out, [0, 1, -1, 1, 9, -8])


@pytest.mark.parametrize("value", [2.0, 3.0])
@pytest.mark.parametrize("scalar", [False, True])
def test_float_pow_by_one_exponent_matches_onnxruntime_bit_for_bit(device, value, scalar):
    # onnxruntime squares and cubes by products (x * x * x), not powf: up to 2 ulp apart
    base = np.random.default_rng(3).standard_normal(4096).astype(np.float32) * 3
    exponent = np.array(value, np.float32)
    if scalar:
        (out,) = run_op(device, "Pow", [base, None], {"exponent": value})
    else:
        (out,) = run_op(device, "Pow", [base, exponent])
    np.testing.assert_array_equal(out, ort_node("Pow", [base, exponent])[0])


def test_integer_add_wraps_like_the_device(device):
    a = np.array([127, -128], dtype=np.int8)
    (out,) = run_op(device, "Adds", [a], {"other": 1})
    np.testing.assert_array_equal(out, np.array([-128, -127], dtype=np.int8))


def test_elementwise_ops_need_no_workspace():
    x = TensorDesc.contiguous((2, 3), "float32")
    assert prepare("Add", [x, x]).workspace_size == 0
    assert prepare("Exp", [x]).workspace_size == 0


# -- phase-one errors ----------------------------------------------------------------------------
def _error(op: str, inputs: list[TensorDesc | None], attrs: dict[str, Any] | None = None,
           outputs: list[TensorDesc | None] | None = None) -> InvalidArgumentError:
    with pytest.raises(InvalidArgumentError) as caught:
        prepare(op, inputs, attrs, outputs)
    assert f"aclnn{op}" in str(caught.value)
    return caught.value


F32 = TensorDesc.contiguous((3, 4), "float32")
I32 = TensorDesc.contiguous((3, 4), "int32")
B = TensorDesc.contiguous((3, 4), "bool")


@pytest.mark.parametrize("op,inputs,attrs", [
    ("Add", [None, F32], {}),
    ("Add", [F32, None], {}),
    ("Add", [F32, F32], {"alpha": None}),
    ("Adds", [F32], {}),
    ("Pow", [F32, None], {}),
    ("Exp", [None], {}),
])
def test_null_arguments_are_161001(op, inputs, attrs):
    assert _error(op, inputs, attrs).code == 161001


@pytest.mark.parametrize("op,inputs,attrs,argument", [
    ("Add", [B, B], {}, "self"),
    ("Sub", [F32, B], {}, "other"),
    ("Neg", [B], {}, "self"),
    ("Add", [F32, TensorDesc.contiguous((5,), "float32")], {}, "other"),
    ("Add", [I32, I32], {"alpha": 1.5}, "alpha"),
    ("Adds", [TensorDesc.contiguous((2,), "int8")], {"other": 300}, "other"),
    ("Adds", [F32], {"other": "two"}, "other"),
    ("Subs", [TensorDesc.contiguous((2,), "uint8")], {"other": -1}, "other"),
    ("Pow", [F32, F32], {"exponent": 2.0}, "exponent"),
    ("Abs", [TensorDesc.contiguous((1,) * 9, "float32")], {}, "self"),
])
def test_invalid_arguments_are_161002_naming_the_argument(op, inputs, attrs, argument):
    error = _error(op, inputs, attrs)
    assert error.code == 161002
    assert f"{argument}:" in str(error)


@pytest.mark.parametrize("out", [
    TensorDesc.contiguous((3, 5), "float32"),
    TensorDesc.contiguous((3, 4), "float16"),
    None,
])
def test_outputs_are_checked(out):
    error = _error("Add", [F32, F32], {}, [out])
    assert error.code == (161001 if out is None else 161002)
    assert "out" in str(error)


def test_integer_division_output_must_be_float32():
    error = _error("Div", [I32, I32], {}, [I32])
    assert "float32" in str(error)


def test_infer_gives_contiguous_nd_outputs():
    mixed = [TensorDesc((4, 3), DType.float16, (1, 4)), TensorDesc.contiguous((3,), "float32")]
    (out,) = get_op("Add").infer(mixed, {})
    assert out.shape == (4, 3) and out.dtype == DType.float32 and out.is_contiguous and out.address == 0
