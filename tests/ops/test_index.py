"""Gather, IndexSelect, Embedding, Where on the simulator, every dtype; out-of-range indices."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import OpCall, assert_close_to_peak, desc, random, run_op

from aclpipe.dtypes import DType
from aclpipe.errors import BackendError, DeviceFault, InvalidArgumentError

ALL_DTYPES = [d.name for d in DType]
INDEX_DTYPES = ["int32", "int64"]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_gather_follows_torch_gather(device, dtype, index_dtype):
    data = random((4, 5), dtype, 1)
    rng = np.random.default_rng(2)
    index = rng.integers(0, 4, size=(3, 2)).astype(index_dtype)  # shorter than self along dim 1 too
    (out,) = run_op(device, "Gather", [data, index], {"dim": 0})
    expected = np.array([[data[index[i, j], j] for j in range(2)] for i in range(3)])
    assert_close_to_peak(out, expected, dtype)
    columns = rng.integers(0, 4, size=(5, 2)).astype(index_dtype)
    (out,) = run_op(device, "Gather", [data.T, columns], {"dim": -1})  # strided self
    assert_close_to_peak(out, np.take_along_axis(data.T, columns.astype(np.int64), axis=1), dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_index_select_and_embedding(device, dtype, index_dtype):
    data = random((6, 3), dtype, 3)
    index = np.array([5, 0, 0, 2], index_dtype)
    (out,) = run_op(device, "IndexSelect", [data.T, index], {"dim": 1})
    assert_close_to_peak(out, data.T[:, index], dtype)
    indices = np.array([[1, 5], [0, 1], [3, 3]], index_dtype)
    (rows,) = run_op(device, "Embedding", [data, indices])
    assert rows.shape == (3, 2, 3)
    assert_close_to_peak(rows, data[indices], dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_where_broadcasts(device, dtype):
    condition = random((3, 1), "bool", 4)
    first, second = random((3, 4), dtype, 5).T.copy().T, random((4,), dtype, 6)
    (out,) = run_op(device, "Where", [condition, first, second])
    assert_close_to_peak(out, np.where(condition, first, second), dtype)


def test_where_promotes_dtypes(device):
    condition = np.array([True, False, True])
    (out,) = run_op(device, "Where", [condition, np.array([1, 2, 3], np.int32), np.array([0.5], np.float16)])
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, np.array([1, 0.5, 3], np.float16))


@pytest.mark.parametrize("op, data, index, attrs, bad", [
    ("Gather", np.zeros((5, 2), np.float32), np.array([[1, 0], [7, 1]], np.int64), {"dim": 0}, 7),
    ("IndexSelect", np.zeros((2, 5), np.float16), np.array([0, -1], np.int32), {"dim": 1}, -1),
    ("Embedding", np.zeros((5, 3), np.float32), np.array([4, 5], np.int64), {}, 5),
])
def test_out_of_range_index_fails_the_stream_and_the_device_stays_usable(device, op, data, index, attrs, bad):
    call = OpCall(device, op, [data, index], attrs)
    stream = device.create_stream()
    call.launch_with_workspace(stream)
    with pytest.raises(DeviceFault) as caught:
        stream.sync()
    assert isinstance(caught.value, BackendError) and caught.value.code == 361001
    assert f"aclnn{op}" in str(caught.value) and f"= {bad} is out of range" in str(caught.value)
    assert "size 5" in str(caught.value)
    fixed = np.clip(index, 0, 4).astype(index.dtype)
    again = OpCall(device, op, [data, fixed], attrs)
    again.launch_with_workspace(stream)  # same stream, after the error was consumed
    stream.sync()
    assert again.results()[0] is not None


@pytest.mark.parametrize("op, inputs, out, attrs, code, needle", [
    ("Gather", [None, desc((2,), "int64")], desc((2,)), {"dim": 0}, 161001, "self"),
    ("Gather", [desc((4, 5)), desc((2, 6), "int64")], desc((2, 6)), {"dim": 0}, 161002, "index"),
    ("Gather", [desc((4, 5)), desc((2,), "int64")], desc((2,)), {"dim": 0}, 161002, "rank"),
    ("Gather", [desc((4, 5)), desc((2, 5), "float32")], desc((2, 5)), {"dim": 0}, 161002, "index"),
    ("Gather", [desc((4, 5)), desc((2, 5), "int64")], desc((2, 5)), {"dim": 2}, 161002, "dim"),
    ("Gather", [desc((4, 5)), desc((2, 5), "int64")], desc((2, 5), "float16"), {"dim": 0}, 161002, "out"),
    ("IndexSelect", [desc((4, 5)), desc((2, 2), "int64")], desc((2, 2, 5)), {"dim": 0}, 161002, "1-D"),
    ("IndexSelect", [desc((4, 5)), None], desc((2, 5)), {"dim": 0}, 161001, "index"),
    ("Embedding", [desc((4, 5, 1)), desc((2,), "int64")], desc((2, 5)), {}, 161002, "weight"),
    ("Embedding", [desc((4, 5)), desc((2,), "int8")], desc((2, 5)), {}, 161002, "indices"),
    ("Where", [desc((3,), "float32"), desc((3,)), desc((3,))], desc((3,)), {}, 161002, "condition"),
    ("Where", [desc((3,), "bool"), desc((3,)), desc((4,))], desc((4,)), {}, 161002, "broadcast"),
    ("Where", [desc((3,), "bool"), desc((3,)), desc((3,), "int32")], desc((3,), "int32"), {}, 161002, "out"),
])
def test_phase_one_refuses_bad_arguments(device, op, inputs, out, attrs, code, needle):
    with pytest.raises(InvalidArgumentError) as caught:
        device.backend.op_prepare(op, inputs, [out], attrs)
    assert caught.value.code == code
    assert f"aclnn{op}" in str(caught.value) and needle in str(caught.value)
