"""Floor, Ceil, Round, Sign, Remainder and Fmod on the simulator."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import random_array, run_op


@pytest.mark.parametrize("op,reference", [("Floor", np.floor), ("Ceil", np.ceil), ("Round", np.round),
                                          ("Sign", np.sign)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
def test_rounding_matches_numpy(device, op, reference, dtype):
    x = (random_array(np.random.default_rng(13), (4, 5), "float32", low=-4, high=4) * 2).round(1) / 2
    x = x.astype(dtype) if dtype != "int32" else np.rint(x).astype(np.int32)
    x[0, :3] = np.array([0.5, 1.5, -2.5]).astype(x.dtype)  # round half to even
    (out,) = run_op(device, op, [x], layout="transposed")
    assert out.dtype == x.dtype
    np.testing.assert_array_equal(out, reference(x))


@pytest.mark.parametrize("op,reference", [("Remainder", np.mod), ("Fmod", np.fmod)])
@pytest.mark.parametrize("dtype", ["int64", "int32", "float32"])
def test_remainders_take_the_sign_of_the_divisor_or_the_dividend(device, op, reference, dtype):
    a = np.array([[7, -7, 7, -7, 0]], dtype=dtype)
    b = np.array([3, 3, -3, -3, 5], dtype=dtype)
    (out,) = run_op(device, op, [a, b], layout=["strided", "contiguous"])
    np.testing.assert_array_equal(out, reference(a, b))


def test_integer_remainder_by_zero_is_zero(device):
    (out,) = run_op(device, "Remainder", [np.array([5, 6], np.int32), np.array([0, 4], np.int32)])
    np.testing.assert_array_equal(out, [0, 2])
