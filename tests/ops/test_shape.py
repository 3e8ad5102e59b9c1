"""Cast, Permute, InplaceCopy, Cat, Split, Slice, Expand on the simulator, every dtype."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_close_to_peak, desc, random, run_op

from aclpipe.dtypes import DType
from aclpipe.errors import InvalidArgumentError
from aclpipe.ops import get_op
from aclpipe.tensor import TensorDesc

ALL_DTYPES = [d.name for d in DType]


def _source(dtype):
    """Values every dtype can hold and every conversion defines (non-negative, < 128)."""
    values = np.array([[0, 1, 2.5, 3.75], [100, 7, 0.5, 64]])
    if dtype == "bool":
        return values > 1
    return values.astype(DType[dtype].numpy)


@pytest.mark.parametrize("source", ALL_DTYPES)
@pytest.mark.parametrize("target", ALL_DTYPES)
def test_cast_between_every_pair_of_dtypes(device, source, target):
    x = _source(source)
    (out,) = run_op(device, "Cast", [x], {"dtype": target})
    assert out.dtype == DType[target].numpy
    expected = x.astype(np.float64).astype(DType[target].numpy)
    np.testing.assert_array_equal(out.astype(np.float64), expected.astype(np.float64))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_permute_and_slice_materialize_strided_inputs(device, dtype):
    base = random((4, 3, 5), dtype, 1)
    strided = base.transpose(1, 0, 2)  # [3, 4, 5], not contiguous
    (permuted,) = run_op(device, "Permute", [strided], {"dims": [2, 0, -2]})
    assert_close_to_peak(permuted, np.transpose(strided, (2, 0, 1)), dtype)
    for start, end, step in [(1, None, 2), (-3, -1, 1), (-100, 100, 3), (4, 2, 1)]:
        (sliced,) = run_op(device, "Slice", [strided], {"dim": -1, "start": start, "end": end, "step": step})
        assert_close_to_peak(sliced, strided[..., start:end:step], dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_cat_and_split_round_trip(device, dtype):
    parts = [random((2, 1, 3), dtype, 1), random((2, 3, 4), dtype, 2).transpose(0, 2, 1), random((2, 2, 3), dtype, 3)]
    assert not parts[1].flags.c_contiguous
    (joined,) = run_op(device, "Cat", parts, {"dim": -2})
    assert_close_to_peak(joined, np.concatenate(parts, axis=1), dtype)
    sections = run_op(device, "Split", [joined], {"splitSections": [1, 4, 2], "dim": 1})
    for section, part in zip(sections, parts):
        assert_close_to_peak(section, part, dtype)
    chunks = run_op(device, "Split", [joined.T], {"splitSize": 3, "dim": 1})
    assert [c.shape[1] for c in chunks] == [3, 3, 1]
    for chunk, expected in zip(chunks, np.split(joined.T, [3, 6], axis=1)):
        assert_close_to_peak(chunk, expected, dtype)


def test_cat_promotes_dtypes(device):
    (out,) = run_op(device, "Cat", [np.array([1, 2], np.int32), np.array([0.5], np.float16)], {"dim": 0})
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, np.array([1, 2, 0.5], np.float16))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_expand_follows_torch_expand(device, dtype):
    x = random((3, 1), dtype, 2)
    (out,) = run_op(device, "Expand", [x], {"size": [2, -1, 4]})
    assert_close_to_peak(out, np.broadcast_to(x, (2, 3, 4)), dtype)
    (same,) = run_op(device, "Expand", [x.T], {"size": [5, 3]})
    assert_close_to_peak(same, np.broadcast_to(x.T, (5, 3)), dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_inplace_copy_broadcasts_and_casts_into_a_strided_self(device, dtype):
    src = random((3, 1), "float32", 3, low=0, high=50)
    storage = device.alloc(4 * 3 * DType[dtype].itemsize)
    self_ref = TensorDesc((3, 4), DType[dtype], strides=(1, 3), address=storage.address)  # transposed
    src_buffer = device.upload(src)
    src_desc = TensorDesc.contiguous(src.shape, "float32", src_buffer.address)
    executor = device.backend.op_prepare("InplaceCopy", [src_desc], [self_ref], {})
    assert executor.workspace_size == 0
    stream = device.create_stream()
    device.backend.op_launch(executor, 0, 0, stream.handle)
    stream.sync()
    written = device.download(storage, dtype, (4, 3)).T
    expected = np.broadcast_to(src, (3, 4)).astype(DType[dtype].numpy)
    np.testing.assert_array_equal(written, expected)


def test_inplace_copy_infers_a_plain_contiguous_copy():
    (out,) = get_op("InplaceCopy").infer([desc((4, 3), "int64", strides=(1, 4))], {})
    assert out.shape == (4, 3) and out.dtype == DType.int64 and out.is_contiguous


def test_split_infers_one_output_per_section():
    outs = get_op("Split").infer([desc((7, 2))], {"splitSize": 3})
    assert [o.shape for o in outs] == [(3, 2), (3, 2), (1, 2)]


@pytest.mark.parametrize("op, inputs, outputs, attrs, code, needle", [
    ("Cast", [None], [desc((2,))], {"dtype": "int32"}, 161001, "self"),
    ("Cast", [desc((2,))], [desc((2,))], {"dtype": "float64"}, 161002, "dtype"),
    ("Cast", [desc((2,))], [desc((2,))], {"dtype": "int32"}, 161002, "out"),
    ("Permute", [desc((2, 3))], [desc((3, 2))], {"dims": [0]}, 161002, "dims"),
    ("Permute", [desc((2, 3))], [desc((3, 2))], {"dims": [1, 1]}, 161002, "distinct"),
    ("Permute", [desc((2, 3))], [desc((2, 3))], {"dims": [1, 0]}, 161002, "out"),
    ("Slice", [desc((4,))], [desc((2,))], {"dim": 0, "start": 0, "end": 2, "step": 0}, 161002, "step"),
    ("Slice", [desc((4,))], [desc((2,))], {"dim": 1, "start": 0, "end": 2}, 161002, "dim"),
    ("Expand", [desc((3, 2))], [desc((3, 4))], {"size": [3, 4]}, 161002, "size"),
    ("Expand", [desc((3, 1))], [desc((3, 4))], {"size": [4]}, 161002, "size"),
    ("Expand", [desc((3, 1))], [desc((2, 3, 4))], {"size": [-1, 3, 4]}, 161002, "size"),
    ("InplaceCopy", [desc((3, 2))], [desc((3, 4))], {}, 161002, "src"),
    ("InplaceCopy", [desc((3, 1))], [None], {}, 161001, "selfRef"),
    ("Cat", [], [desc((2,))], {"dim": 0}, 161001, "tensors"),
    ("Cat", [desc((2, 3)), desc((2, 4))], [desc((2, 7))], {"dim": 0}, 161002, "tensors[1]"),
    ("Cat", [desc((2, 3)), None], [desc((2, 7))], {"dim": 1}, 161001, "tensors[1]"),
    ("Cat", [desc((2,)), desc((2,), "float16")], [desc((4,), "float16")], {"dim": 0}, 161002, "float32"),
    ("Split", [desc((4,))], [desc((2,)), desc((2,))], {"dim": 0}, 161002, "splitSections"),
    ("Split", [desc((4,))], [desc((2,)), desc((2,))], {"splitSections": [1, 2]}, 161002, "sum"),
    ("Split", [desc((4,))], [desc((2,))], {"splitSize": 2}, 161002, "outs"),
    ("Split", [desc((4,))], [desc((2,)), desc((2,))], {"splitSize": 0}, 161002, "splitSize"),
    ("Split", [desc((4,))], [desc((2,)), desc((3,))], {"splitSize": 2}, 161002, "outs[1]"),
])
def test_phase_one_refuses_bad_arguments(device, op, inputs, outputs, attrs, code, needle):
    with pytest.raises(InvalidArgumentError) as caught:
        device.backend.op_prepare(op, inputs, outputs, attrs)
    assert caught.value.code == code
    assert f"aclnn{op}" in str(caught.value) and needle in str(caught.value)
