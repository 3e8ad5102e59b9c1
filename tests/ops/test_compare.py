"""Comparisons and logical ops on the simulator: promotion, broadcasting, NaN, strided inputs."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import FLOAT_DTYPES, INT_DTYPES, prepare, random_array, run_op

from aclpipe.errors import InvalidArgumentError
from aclpipe.tensor import TensorDesc

COMPARISONS = [("EqTensor", np.equal), ("NeTensor", np.not_equal), ("LtTensor", np.less),
               ("LeTensor", np.less_equal), ("GtTensor", np.greater), ("GeTensor", np.greater_equal)]


@pytest.mark.parametrize("op,reference", COMPARISONS)
@pytest.mark.parametrize("dtype", [*FLOAT_DTYPES, *INT_DTYPES, "bool"])
def test_comparisons_match_numpy_with_broadcasting(device, op, reference, dtype):
    rng = np.random.default_rng(3)
    a = random_array(rng, (3, 4), dtype, low=-2, high=2)
    b = random_array(rng, (4,), dtype, low=-2, high=2)
    for layout in ("contiguous", "transposed"):
        (out,) = run_op(device, op, [a, b], layout=[layout, "strided"])
        assert out.dtype == np.bool_
        np.testing.assert_array_equal(out, reference(a, b))


def test_comparisons_promote_before_comparing_and_nan_is_unequal(device):
    big = np.array([2 ** 40 + 1], dtype=np.int64)
    (out,) = run_op(device, "EqTensor", [big, np.array([1], dtype=np.int32)])
    assert not out[0]
    x = np.array([np.nan, 1.0], dtype=np.float32)
    assert run_op(device, "EqTensor", [x, x])[0].tolist() == [False, True]
    assert run_op(device, "NeTensor", [x, x])[0].tolist() == [True, False]
    assert run_op(device, "LtTensor", [x, np.float32([2.0])])[0].tolist() == [False, True]


@pytest.mark.parametrize("op,reference", [("LogicalAnd", np.logical_and), ("LogicalOr", np.logical_or),
                                          ("LogicalXor", np.logical_xor)])
@pytest.mark.parametrize("dtype", ["bool", "int32", "float16"])
def test_binary_logic_reads_non_zero_as_true(device, op, reference, dtype):
    rng = np.random.default_rng(4)
    a, b = random_array(rng, (2, 3, 4), dtype, low=-1, high=1), random_array(rng, (3, 1), dtype, low=-1, high=1)
    (out,) = run_op(device, op, [a, b], layout="strided")
    np.testing.assert_array_equal(out, reference(a != 0, b != 0))


def test_logical_not(device):
    x = np.array([[0, 2], [-1, 0]], dtype=np.int8)
    (out,) = run_op(device, "LogicalNot", [x], layout="transposed")
    np.testing.assert_array_equal(out, x == 0)


@pytest.mark.parametrize("inputs,out,needle", [
    ([TensorDesc.contiguous((3,), "float32"), TensorDesc.contiguous((4,), "float32")],
     TensorDesc.contiguous((3,), "bool"), "broadcast"),
    ([TensorDesc.contiguous((3,), "float32"), None], TensorDesc.contiguous((3,), "bool"), "other"),
    ([TensorDesc.contiguous((3,), "float32"), TensorDesc.contiguous((3,), "float32")],
     TensorDesc.contiguous((3,), "float32"), "out"),
])
def test_phase_one_refuses_bad_arguments(inputs, out, needle):
    with pytest.raises(InvalidArgumentError) as caught:
        prepare("GtTensor", inputs, {}, [out])
    assert "aclnnGtTensor" in str(caught.value) and needle in str(caught.value)
