"""Triu, Tril and OneHot on the simulator against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import desc, prepare, random, run_op

from aclpipe.errors import InvalidArgumentError


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int64", "bool"])
@pytest.mark.parametrize("diagonal", [-2, 0, 1, 5])
def test_triangles_match_numpy(device, dtype, diagonal):
    x = random((2, 4, 5), dtype, 2)
    (upper,) = run_op(device, "Triu", [x], {"diagonal": diagonal})
    (lower,) = run_op(device, "Tril", [x.transpose(0, 2, 1)], {"diagonal": diagonal})
    np.testing.assert_array_equal(upper, np.triu(x, diagonal))
    np.testing.assert_array_equal(lower, np.tril(x.transpose(0, 2, 1), diagonal))


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot_with_out_of_range_rows(device, axis):
    index = np.array([[0, 3], [4, -1]], np.int64)  # 4 and -1 are outside [0, 4): rows of offValue
    on, off = np.array([5.0], np.float32), np.array([-1.0], np.float32)
    (out,) = run_op(device, "OneHot", [index, on, off], {"numClasses": 4, "axis": axis})
    expected = np.where(np.expand_dims(index, axis) == np.arange(4).reshape([4 if a == axis % 3 else 1
                                                                          for a in range(3)]), 5.0, -1.0)
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("op,inputs,attrs,code,argument", [
    ("Triu", [desc((4,))], {}, 161002, "self"),
    ("Tril", [desc((4, 4))], {"diagonal": 1.5}, 161002, "diagonal"),
    ("OneHot", [desc((3,), "int64"), desc((1,)), desc((1,))], {}, 161001, "numClasses"),
    ("OneHot", [desc((3,), "float32"), desc((1,)), desc((1,))], {"numClasses": 2}, 161002, "self"),
    ("OneHot", [desc((3,), "int64"), desc((2,)), desc((1,))], {"numClasses": 2}, 161002, "onValue"),
    ("OneHot", [desc((3,), "int64"), desc((1,)), desc((1,), "int32")], {"numClasses": 2}, 161002, "offValue"),
    ("OneHot", [desc((3,), "int64"), desc((1,)), desc((1,))], {"numClasses": 2, "axis": 3}, 161002, "axis"),
])
def test_phase_one_errors(op, inputs, attrs, code, argument):
    with pytest.raises(InvalidArgumentError) as caught:
        prepare(op, inputs, attrs)
    assert caught.value.code == code and f"aclnn{op}: {argument}:" in str(caught.value)
