"""Clamp, Hardsigmoid, Hardswish, LeakyRelu and Prelu on the simulator."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import FLOAT_DTYPES, INT_DTYPES, assert_close, prepare, random_array, run_op

from aclpipe.errors import InvalidArgumentError
from aclpipe.tensor import TensorDesc


def _hardsigmoid(x):
    return np.clip(x / 6 + 0.5, 0, 1)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("op,attrs,reference", [
    ("Hardsigmoid", {}, _hardsigmoid),
    ("Hardswish", {}, lambda x: x * _hardsigmoid(x)),
    ("LeakyRelu", {}, lambda x: np.where(x >= 0, x, 0.01 * x)),
    ("LeakyRelu", {"negativeSlope": 0.2}, lambda x: np.where(x >= 0, x, 0.2 * x)),
    ("Clamp", {"min": -1.5, "max": 2.0}, lambda x: np.clip(x, -1.5, 2.0)),
    ("Clamp", {"min": 0.5}, lambda x: np.maximum(x, 0.5)),
    ("Clamp", {"max": 0.0}, lambda x: np.minimum(x, 0.0)),
])
def test_pointwise_functions_match_numpy(device, dtype, op, attrs, reference):
    x = random_array(np.random.default_rng(5), (4, 6), dtype, low=-5, high=5)
    for layout in ("contiguous", "transposed"):
        (out,) = run_op(device, op, [x], attrs, layout=layout)
        assert_close(out, reference(x.astype(np.float64)), dtype, scale=2.0)


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_clamp_keeps_integer_dtypes(device, dtype):
    x = random_array(np.random.default_rng(6), (5, 3), dtype, low=0, high=100)
    (out,) = run_op(device, "Clamp", [x], {"min": 10, "max": 50}, layout="strided")
    assert out.dtype == x.dtype
    np.testing.assert_array_equal(out, np.clip(x, 10, 50))


def test_clamp_with_min_above_max_gives_max_and_keeps_nan(device):
    x = np.array([-3.0, 0.0, np.nan, 7.0], dtype=np.float32)
    (out,) = run_op(device, "Clamp", [x], {"min": 2.0, "max": 1.0})
    np.testing.assert_array_equal(out[[0, 1, 3]], [1.0, 1.0, 1.0])
    assert np.isnan(out[2])


@pytest.mark.parametrize("attrs,code,needle", [
    ({}, 161001, "min"),
    ({"min": 0.5}, 161002, "int32"),
    ({"max": 300}, 161002, "max"),
])
def test_clamp_refuses_missing_or_unrepresentable_bounds(attrs, code, needle):
    dtype = "int32" if attrs.get("min") == 0.5 else "uint8"
    with pytest.raises(InvalidArgumentError) as caught:
        prepare("Clamp", [TensorDesc.contiguous((3,), dtype)], attrs)
    assert caught.value.code == code and needle in str(caught.value)


@pytest.mark.parametrize("shape,slopes", [((2, 3, 4, 5), 3), ((2, 3, 4, 5), 1), ((4, 3), 3), ((6,), 6)])
def test_prelu_scales_negative_values_per_channel(device, shape, slopes):
    rng = np.random.default_rng(7)
    x = random_array(rng, shape, "float32")
    weight = random_array(rng, (slopes,), "float32", low=0, high=1)
    broadcast = weight.reshape((-1,) + (1,) * (len(shape) - 2)) if len(shape) >= 2 else weight
    (out,) = run_op(device, "Prelu", [x, weight], layout=["transposed", "strided"])
    assert_close(out, np.where(x >= 0, x, x * broadcast), "float32")


def test_prelu_refuses_a_weight_that_is_not_per_channel():
    with pytest.raises(InvalidArgumentError, match="weight"):
        prepare("Prelu", [TensorDesc.contiguous((2, 3, 4), "float32"), TensorDesc.contiguous((4,), "float32")])


@pytest.mark.parametrize("dtype,op,attrs", [
    ("float32", "Hardsigmoid", {}), ("float32", "Hardswish", {}), ("float32", "Clamp", {"min": -1.5, "max": 2.0}),
    ("float32", "Clamp", {"min": 0.5}), ("float32", "Clamp", {"max": 0.0}), ("float32", "Relu", {}),
    ("int32", "Clamp", {"min": -2, "max": 3}), ("int32", "Clamp", {"max": 1}), ("int32", "Relu", {}),
])
def test_ops_written_straight_into_the_output_give_the_bits_of_their_plain_form(device, dtype, op, attrs):
    from aclpipe.ops import get_op

    x = random_array(np.random.default_rng(8), (3, 5, 7), dtype, low=-9, high=9)
    if dtype == "float32":
        x.reshape(-1)[:4] = [np.nan, np.inf, -np.inf, -0.0]
    spec = get_op(op)
    params = spec.parse_attrs(op, attrs) if spec.parse_attrs else {}
    with np.errstate(invalid="ignore"):  # Hardswish of -inf: -inf * 0 is nan, as on the device
        expected = np.asarray(spec.function(x, params)).astype(dtype)
    for layout in ("contiguous", "transposed"):
        (out,) = run_op(device, op, [x], attrs, layout=layout)
        assert out.dtype == x.dtype
        np.testing.assert_array_equal(out.view(np.uint32 if dtype == "float32" else np.int32),
                                      expected.view(np.uint32 if dtype == "float32" else np.int32))
    plan = spec.prepare([TensorDesc.contiguous(x.shape, dtype)], [TensorDesc.contiguous(x.shape, dtype)], attrs)
    assert plan.kernel.__qualname__.startswith("_into_unary")  # the straight path is the one tested


@pytest.mark.parametrize("op", ["Hardswish", "Hardsigmoid", "Relu", "Clamp"])
def test_an_into_form_over_its_own_input_gives_the_bits_of_the_plain_form(op):
    """An output that is the input's own memory (an in-place launch): Hardswish keeps its
    Hardsigmoid apart, since its product still reads the input."""
    from aclpipe.ops import get_op

    x = random_array(np.random.default_rng(9), (4, 33), "float32", low=-9, high=9)
    x.reshape(-1)[:4] = [np.nan, np.inf, -np.inf, -0.0]
    spec = get_op(op)
    attrs = {"min": -1.0, "max": 2.0} if op == "Clamp" else {}
    params = spec.parse_attrs(op, attrs) if spec.parse_attrs else {}
    buffer = x.copy()
    run = spec.into(buffer, buffer, params)
    with np.errstate(invalid="ignore"):  # Hardswish of -inf: -inf * 0 is nan, as on the device
        expected = np.asarray(spec.function(x, params)).astype(np.float32)
        for _ in range(2):  # a bound run again on new values in the same memory
            run()
            np.testing.assert_array_equal(buffer.view(np.uint32), expected.view(np.uint32))
            buffer[...] = x
