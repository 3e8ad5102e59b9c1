"""ArgMax, ArgMin and Topk on the simulator: first index on ties, stable order, workspace."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import FLOAT_DTYPES, INT_DTYPES, OpCall, prepare, random_array, run_op

from aclpipe.errors import InvalidArgumentError
from aclpipe.tensor import TensorDesc


@pytest.mark.parametrize("op,reference", [("ArgMax", np.argmax), ("ArgMin", np.argmin)])
@pytest.mark.parametrize("dtype", [*FLOAT_DTYPES, *INT_DTYPES, "bool"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_arg_extremes_give_the_first_index(device, op, reference, dtype, dim):
    x = random_array(np.random.default_rng(10), (4, 5, 3), dtype, low=-3, high=3)  # many ties
    for keep in (False, True):
        (out,) = run_op(device, op, [x], {"dim": dim, "keepdim": keep}, layout="transposed")
        expected = reference(x, axis=dim)
        assert out.dtype == np.int64
        np.testing.assert_array_equal(out, np.expand_dims(expected, dim) if keep else expected)


def _reference_topk(x, k, dim, largest):
    moved = np.moveaxis(x, dim, -1)
    key = -moved.astype(np.float64) if largest else moved.astype(np.float64)
    order = np.argsort(key, axis=-1, kind="stable")[..., :k]
    return np.moveaxis(np.take_along_axis(moved, order, -1), -1, dim), np.moveaxis(order, -1, dim)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "uint8", "int64"])
@pytest.mark.parametrize("dim,k,largest", [(-1, 3, True), (0, 2, False), (1, 5, True), (1, 0, True)])
def test_topk_matches_a_stable_sort(device, dtype, dim, k, largest):
    x = random_array(np.random.default_rng(11), (4, 5, 6), dtype, low=0, high=4)  # ties everywhere
    values, indices = run_op(device, "Topk", [x], {"k": k, "dim": dim, "largest": largest}, layout="strided")
    want_values, want_indices = _reference_topk(x, k, dim, largest)
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(indices, want_indices)


def test_topk_sorts_in_its_workspace(device):
    call = OpCall(device, "Topk", [np.zeros((3, 8), np.float32)], {"k": 2})
    assert call.workspace_size == 3 * 8 * 8
    stream = device.create_stream()
    with pytest.raises(InvalidArgumentError):
        call.launch(stream, None, 0)
    stream.sync()


@pytest.mark.parametrize("op,attrs,needle", [
    ("Topk", {"k": 9}, "k"), ("Topk", {}, "k"), ("ArgMax", {"dim": 3}, "dim"),
])
def test_phase_one_refuses_bad_arguments(op, attrs, needle):
    with pytest.raises(InvalidArgumentError) as caught:
        prepare(op, [TensorDesc.contiguous((3, 8), "float32")], attrs)
    assert f"aclnn{op}" in str(caught.value) and needle in str(caught.value)
