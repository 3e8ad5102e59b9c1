"""GatherNd, ScatterNd and Scatter on the simulator against numpy loops."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers import desc, prepare, run_op

from aclpipe.errors import DeviceFault, InvalidArgumentError

RNG = np.random.default_rng(11)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8", "int64", "bool"])
def test_gather_nd_with_batch_dims_and_negative_indices(device, dtype):
    data = (RNG.standard_normal((2, 3, 4, 5)) * 10).astype(dtype)
    index = np.stack([RNG.integers(-3, 3, (2, 6)), RNG.integers(-4, 4, (2, 6))], axis=-1)
    (out,) = run_op(device, "GatherNd", [data, index], {"batchDims": 1, "negativeIndexSupport": True})
    expected = np.stack([data[b][index[b, :, 0], index[b, :, 1]] for b in range(2)])
    np.testing.assert_array_equal(out, expected)


def test_gather_nd_out_of_range_fails_the_launch(device):
    with pytest.raises(DeviceFault, match=r"indices\[\.\.\., 0\]"):
        run_op(device, "GatherNd", [np.zeros((3, 2), np.float32), np.array([[3]], np.int64)])


@pytest.mark.parametrize("reduce,combine", [(0, None), (1, np.add), (2, np.multiply), (3, np.maximum),
                                            (4, np.minimum)])
def test_scatter_nd_reductions(device, reduce, combine):
    data = RNG.standard_normal((4, 3, 2)).astype(np.float32)
    index = np.array([[1, 0], [3, 2], [-3, 0]], np.int64)  # -3 is row 1 again: duplicates combine
    updates = RNG.standard_normal((3, 2)).astype(np.float32)
    (out,) = run_op(device, "ScatterNd", [data, index, updates], {"reduce": reduce})
    expected = data.copy()
    for (row, column), update in zip(index % np.array([4, 3]), updates):
        expected[row, column] = update if combine is None else combine(expected[row, column], update)
    np.testing.assert_allclose(out, expected, rtol=1e-6)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("reduce", [0, 1, 2])
def test_scatter_along_dim(device, dim, reduce):
    data = RNG.standard_normal((3, 4)).astype(np.float32)
    src = RNG.standard_normal((3, 4)).astype(np.float32)
    index = RNG.integers(0, data.shape[dim], (2, 3)).astype(np.int32)
    (out,) = run_op(device, "Scatter", [data, index, src], {"dim": dim, "reduce": reduce})
    expected = data.copy()
    for i, j in itertools.product(range(2), range(3)):
        target = (index[i, j], j) if dim == 0 else (i, index[i, j])
        expected[target] = src[i, j] if reduce == 0 else (expected[target] + src[i, j] if reduce == 1 else
                                                         expected[target] * src[i, j])
    if reduce == 0:  # duplicates: the last write wins, in row-major order of index
        np.testing.assert_allclose(out, expected, rtol=1e-6)
    else:
        np.testing.assert_allclose(out, expected, rtol=1e-5)


@pytest.mark.parametrize("op,inputs,attrs,code,argument", [
    ("GatherNd", [desc((3, 4)), None], {}, 161001, "indices"),
    ("GatherNd", [desc((3, 4)), desc((2, 3), "int64")], {}, 161002, "indices"),
    ("GatherNd", [desc((3, 4)), desc((2, 1), "float32")], {}, 161002, "indices"),
    ("GatherNd", [desc((3, 4)), desc((2, 1), "int64")], {"batchDims": 1}, 161002, "indices"),
    ("ScatterNd", [desc((3, 4)), desc((2, 1), "int64"), desc((2, 3))], {}, 161002, "updates"),
    ("ScatterNd", [desc((3, 4)), desc((2, 1), "int64"), desc((2, 4), "float16")], {}, 161002, "updates"),
    ("ScatterNd", [desc((3, 4)), desc((2, 1), "int64"), desc((2, 4))], {"reduce": 7}, 161002, "reduce"),
    ("Scatter", [desc((3, 4)), desc((2, 5), "int64"), desc((2, 5))], {"dim": 0}, 161002, "index"),
    ("Scatter", [desc((3, 4)), desc((2, 2), "int64"), desc((2, 2))], {"dim": 2}, 161002, "dim"),
])
def test_phase_one_errors(op, inputs, attrs, code, argument):
    with pytest.raises(InvalidArgumentError) as caught:
        prepare(op, inputs, attrs)
    assert caught.value.code == code and f"aclnn{op}: {argument}" in str(caught.value)
