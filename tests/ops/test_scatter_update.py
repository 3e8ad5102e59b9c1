"""InplaceScatterUpdate (CANN's aclnnInplaceScatterUpdate) on the simulator against numpy loops."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers import desc, prepare

from aclpipe.dtypes import DType
from aclpipe.errors import DeviceFault, InvalidArgumentError
from aclpipe.ops import get_op
from aclpipe.runtime import Device
from aclpipe.tensor import TensorDesc

RNG = np.random.default_rng(26)


def scatter_update(device: Device, data: np.ndarray, indices: np.ndarray, updates: np.ndarray,
                   axis: int) -> np.ndarray:
    """``data`` after the op wrote ``updates`` into it in place on the simulator."""
    buffers = [device.upload(np.ascontiguousarray(array)) for array in (data, indices, updates)]
    described = [TensorDesc.contiguous(array.shape, DType[array.dtype.name], buffer.address)
                 for array, buffer in zip((data, indices, updates), buffers)]
    stream = device.create_stream()
    try:
        executor = device.backend.op_prepare("InplaceScatterUpdate", described[1:], described[:1], {"axis": axis})
        assert executor.workspace_size == 0
        device.backend.op_launch(executor, 0, 0, stream.handle)
        stream.sync()
        return device.download(buffers[0], data.dtype.name, data.shape)
    finally:
        stream.close()
        for buffer in buffers:
            buffer.close()


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int8", "uint8", "int32"])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_one_d_indices_write_each_batchs_run_at_its_offset(device, dtype, index_dtype):
    data = (RNG.standard_normal((3, 2, 6, 4)) * 10).astype(DType[dtype].numpy)
    updates = (RNG.standard_normal((2, 2, 3, 4)) * 10).astype(DType[dtype].numpy)
    indices = np.array([3, 0], index_dtype)
    written = scatter_update(device, data, indices, updates, -2)
    expected = data.copy()
    for i, offset in enumerate(indices):
        expected[i, :, offset:offset + 3, :] = updates[i]
    np.testing.assert_array_equal(written, expected)


@pytest.mark.parametrize("axis", [1, 2, -1])
def test_two_d_indices_pick_the_batch_and_the_offset_along_any_axis(device, axis):
    data = RNG.standard_normal((4, 5, 6, 7)).astype(np.float32)
    shape = [3, 5, 6, 7]
    shape[axis] = 2
    updates = RNG.standard_normal(shape).astype(np.float32)
    indices = np.array([[3, 1], [0, 0], [2, 3]], np.int64)
    written = scatter_update(device, data, indices, updates, axis)
    expected = data.copy()
    for row, (batch, offset) in enumerate(indices):
        target: list[Any] = [slice(None)] * 3
        target[axis % 4 - 1] = slice(offset, offset + 2)
        expected[batch][tuple(target)] = updates[row]
    np.testing.assert_array_equal(written, expected)


def test_one_position_per_row_is_a_decode_steps_write(device):
    data = RNG.standard_normal((5, 2, 8, 3)).astype(np.float32)
    updates = RNG.standard_normal((3, 2, 1, 3)).astype(np.float32)
    indices = np.array([[4, 7], [0, 2], [1, 0]], np.int64)
    written = scatter_update(device, data, indices, updates, 2)
    expected = data.copy()
    for row, (batch, offset) in enumerate(indices):
        expected[batch, :, offset, :] = updates[row, :, 0, :]
    np.testing.assert_array_equal(written, expected)


def test_zero_d_indices_update_batch_zero(device):
    data = np.zeros((2, 4), np.float32)
    written = scatter_update(device, data, np.array(2, np.int64), np.ones((1, 2), np.float32), 1)
    np.testing.assert_array_equal(written, [[0, 0, 1, 1], [0, 0, 0, 0]])


@pytest.mark.parametrize("indices", [np.array([[0, -1]]), np.array([[2, 0]]), np.array([[0, 3]]), np.array([-1])])
def test_negative_or_out_of_bounds_indices_fail_the_launch(device, indices):
    with pytest.raises(DeviceFault, match=r"indices\[0\].*negative nor out-of-bounds"):
        scatter_update(device, np.zeros((2, 1, 4, 1), np.float32), indices.astype(np.int64),
                       np.zeros((1, 1, 2, 1), np.float32), 2)


@pytest.mark.parametrize("indices, updates, data, attrs, code, needle", [
    (None, desc((1, 2)), desc((2, 2)), {"axis": 1}, 161001, "indices: expected"),
    (desc((1,), "int64"), None, desc((2, 2)), {"axis": 1}, 161001, "updates: expected"),
    (desc((1,), "int64"), desc((1, 2)), None, {"axis": 1}, 161001, "dataRef: expected"),
    (desc((1,), "int64"), desc((1, 2), "int64"), desc((2, 2), "int64"), {"axis": 1}, 161002, "dataRef"),
    (desc((1,), "float32"), desc((1, 2)), desc((2, 2)), {"axis": 1}, 161002, "indices"),
    (desc((1,), "int64"), desc((1, 2), "float16"), desc((2, 2)), {"axis": 1}, 161002, "dtype float32"),
    (desc((1,), "int64"), desc((1,)), desc((2,)), {"axis": 1}, 161002, "2 to 8 dims"),
    (desc((1,), "int64"), desc((1, 2, 1)), desc((2, 2)), {"axis": 1}, 161002, "2 dims"),
    (desc((1, 1, 1), "int64"), desc((1, 2)), desc((2, 2)), {"axis": 1}, 161002, "0, 1 or 2 dims"),
    (desc((1, 3), "int64"), desc((1, 2)), desc((2, 2)), {"axis": 1}, 161002, "0, 1 or 2 dims"),
    (desc((), "int64"), desc((2, 2)), desc((2, 2)), {"axis": 1}, 161002, "1 (indices is 0-d)"),
    (desc((0,), "int64"), desc((0, 2)), desc((2, 2)), {"axis": 1}, 161002, "non-empty"),
    (desc((1,), "int64"), desc((1, 2)), desc((2, 2)), {"axis": 0}, 161002, "other than 0"),
    (desc((1,), "int64"), desc((1, 2)), desc((2, 2)), {"axis": 2}, 161002, "(-2, 2)"),
    (desc((1,), "int64"), desc((1, 2)), desc((2, 2)), {}, 161002, "axis"),
    (desc((2,), "int64"), desc((1, 2)), desc((2, 2)), {"axis": 1}, 161002, "indices' dim 0, 2"),
    (desc((3,), "int64"), desc((3, 2)), desc((2, 2)), {"axis": 1}, 161002, "at most dataRef's 2"),
    (desc((1,), "int64"), desc((1, 3, 1)), desc((2, 2, 4)), {"axis": 2}, 161002, "except 0 and axis"),
    (desc((1,), "int64"), desc((1, 5)), desc((2, 4)), {"axis": 1}, 161002, "along axis 1"),
    (desc((24_560,), "int64"), desc((24_560, 1)), desc((24_560, 1)), {"axis": 1}, 161002, "unified buffer"),
])
def test_phase_one_refuses_what_the_doc_lists(indices, updates, data, attrs, code, needle):
    with pytest.raises(InvalidArgumentError) as caught:
        prepare("InplaceScatterUpdate", [indices, updates], attrs, [data])
    assert caught.value.code == code and needle in str(caught.value)
    assert "expected" in str(caught.value) and "got" in str(caught.value)


def test_a_graph_infers_the_written_tensor_from_data_shape():
    spec = get_op("InplaceScatterUpdate")
    (data,) = spec.infer([desc((2, 2), "int64"), desc((2, 3, 1, 4), "float16")],
                         {"axis": -2, "dataShape": (5, 3, 9, 4)})
    assert data.shape == (5, 3, 9, 4) and data.dtype == DType.float16 and data.is_contiguous
    with pytest.raises(InvalidArgumentError, match="dataShape"):
        spec.infer([desc((2, 2), "int64"), desc((2, 3, 1, 4))], {"axis": -2})
    with pytest.raises(InvalidArgumentError, match="dataShape names"):
        prepare("InplaceScatterUpdate", [desc((2, 2), "int64"), desc((2, 3, 1, 4))],
                {"axis": -2, "dataShape": (5, 3, 9, 4)}, [desc((4, 3, 9, 4))])
