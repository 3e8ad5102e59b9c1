"""Mean, ReduceSum and Amax on the simulator, including their workspace accumulators."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import FLOAT_DTYPES, INT_DTYPES, OpCall, assert_close, prepare, random_array, run_op
from hypothesis import given, settings
from hypothesis import strategies as st

from aclpipe.dtypes import DType
from aclpipe.errors import HazardError, InvalidArgumentError
from aclpipe.ops import get_op
from aclpipe.tensor import TensorDesc

SHAPE = (3, 4, 5)
DIMS = [None, [], [1], [-1], [0, 2], (2, 0, 1)]


def _axes(dims):
    return None if not dims else tuple(dims)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("dims", DIMS)
@pytest.mark.parametrize("keep", [False, True])
def test_mean_matches_numpy(device, dtype, dims, keep):
    x = random_array(np.random.default_rng(1), SHAPE, dtype)
    expected = x.astype(np.float64).mean(axis=_axes(dims), keepdims=keep)
    (out,) = run_op(device, "Mean", [x], {"dim": dims, "keepDim": keep}, layout="transposed")
    assert_close(out, expected, dtype, scale=2.0)


@pytest.mark.parametrize("dtype", [*FLOAT_DTYPES, *INT_DTYPES, "bool"])
@pytest.mark.parametrize("dims", [None, [1], [0, 2]])
def test_reduce_sum_matches_numpy_and_widens_integers_to_int64(device, dtype, dims):
    x = random_array(np.random.default_rng(2), SHAPE, dtype)
    result = dtype if dtype in FLOAT_DTYPES else "int64"
    wide = np.float64 if dtype in FLOAT_DTYPES else np.int64
    expected = x.astype(wide).sum(axis=_axes(dims), keepdims=True)
    (out,) = run_op(device, "ReduceSum", [x], {"dims": dims, "keepDims": True}, layout="strided")
    assert_close(out, expected, result, scale=4.0)


@pytest.mark.parametrize("dtype", [*FLOAT_DTYPES, *INT_DTYPES, "bool"])
@pytest.mark.parametrize("dims", [None, [0], [-1, 1]])
def test_amax_matches_numpy_and_keeps_the_dtype(device, dtype, dims):
    x = random_array(np.random.default_rng(3), SHAPE, dtype, low=-50, high=50)
    expected = x.max(axis=_axes(dims))
    for layout in ("contiguous", "transposed"):
        (out,) = run_op(device, "Amax", [x], {"dim": dims}, layout=layout)
        assert out.dtype == x.dtype
        np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("op,attrs,source,result", [
    ("Mean", {"dtype": "float32"}, "int32", "float32"),
    ("Mean", {"dtype": DType.float16}, "uint8", "float16"),
    ("Mean", {"dtype": "float32"}, "bfloat16", "float32"),
    ("ReduceSum", {"dtype": "float32"}, "int64", "float32"),
    ("ReduceSum", {"dtype": "int32"}, "float32", "int32"),
    ("ReduceSum", {"dtype": 1}, "float32", "float16"),  # ACL numbers work too
])
def test_the_dtype_attribute_sets_the_output_dtype(device, op, attrs, source, result):
    x = random_array(np.random.default_rng(4), (4, 6), source, low=0, high=9)
    # torch semantics: cast the input to the result dtype first, then reduce
    cast = x.astype(np.dtype(DType[result].numpy)).astype(np.float64)
    expected = cast.mean(axis=1) if op == "Mean" else cast.sum(axis=1)
    (out,) = run_op(device, op, [x], {("dim" if op == "Mean" else "dims"): [1], **attrs})
    assert_close(out, expected, result, scale=2.0)


def test_empty_reductions_follow_pytorch(device):
    empty = np.zeros((0, 3), dtype=np.float32)
    (mean,) = run_op(device, "Mean", [empty], {"dim": [0]})
    assert np.isnan(mean).all() and mean.shape == (3,)
    (total,) = run_op(device, "ReduceSum", [empty], {"dims": [0]})
    np.testing.assert_array_equal(total, np.zeros(3, np.float32))
    (amax,) = run_op(device, "Amax", [empty], {"dim": [1]})
    assert amax.shape == (0,)


def test_zero_dim_tensors_reduce_to_themselves(device):
    (out,) = run_op(device, "ReduceSum", [np.array(2.5, dtype=np.float32)], {"dims": None})
    assert out.shape == () and out == 2.5


@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3), data=st.data())
@settings(max_examples=10, deadline=None)
def test_mean_over_random_dims(shape, data):
    import aclpipe

    dims = data.draw(st.lists(st.integers(0, len(shape) - 1), unique=True, max_size=len(shape)))
    keep = data.draw(st.booleans())
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    with aclpipe.open_device("sim", sanitizer=True) as device:
        (out,) = run_op(device, "Mean", [x], {"dim": dims, "keepDim": keep})
    assert_close(out, x.astype(np.float64).mean(axis=_axes(dims), keepdims=keep), "float32", scale=2.0)


def test_the_accumulator_lives_in_the_workspace(device):
    x = np.arange(24, dtype=np.float16).reshape(4, 6)
    call = OpCall(device, "Mean", [x], {"dim": [1]})
    assert call.workspace_size == 32  # four fp32 partial sums
    workspace = device.alloc(call.workspace_size)
    stream = device.create_stream()
    call.launch(stream, workspace)
    stream.sync()
    np.testing.assert_allclose(device.download(workspace, "float32", (4,)), x.astype(np.float32).mean(axis=1))


@pytest.mark.parametrize("op,attrs", [("Mean", {"dim": [0]}), ("ReduceSum", {"dims": None}), ("Amax", {"dim": [1]})])
def test_reduce_workspace_is_required_checked_and_not_shareable(device, op, attrs):
    x = np.ones((16, 3), dtype=np.float32)
    call, other = OpCall(device, op, [x], attrs), OpCall(device, op, [x], attrs)
    assert call.workspace_size > 0
    workspace = device.alloc(call.workspace_size)
    stream_a, stream_b = device.create_stream(), device.create_stream()
    with pytest.raises(InvalidArgumentError, match="smaller"):
        call.launch(stream_a, workspace, call.workspace_size - 1)
    with pytest.raises(InvalidArgumentError) as caught:
        call.launch(stream_a, None)
    assert caught.value.code == 161001
    call.launch(stream_a, workspace)
    with pytest.raises(HazardError):
        other.launch(stream_b, workspace)
    device.sync()


F32 = TensorDesc.contiguous(SHAPE, "float32")
I32 = TensorDesc.contiguous(SHAPE, "int32")


@pytest.mark.parametrize("op,inputs,attrs,code,argument", [
    ("Mean", [None], {}, 161001, "self"),
    ("Mean", [F32], {"dim": [3]}, 161002, "dim"),
    ("Mean", [F32], {"dim": [1, -2]}, 161002, "dim"),
    ("Mean", [F32], {"dim": ["a"]}, 161002, "dim"),
    ("Mean", [I32], {}, 161002, "self"),
    ("Mean", [F32], {"dtype": "int32"}, 161002, "dtype"),
    ("Mean", [F32], {"dtype": "complex64"}, 161002, "dtype"),
    ("Mean", [F32], {"keepDim": 1}, 161002, "keepDim"),
    ("ReduceSum", [F32], {"dims": [-4]}, 161002, "dims"),
    ("ReduceSum", [F32], {"dtype": "bool"}, 161002, "dtype"),
    ("ReduceSum", [F32], {"keepDims": "yes"}, 161002, "keepDims"),
    ("Amax", [TensorDesc.contiguous((2, 0), "float32")], {"dim": [1]}, 161002, "dim"),
    ("Amax", [F32], {"keepdim": None}, 161002, "keepdim"),
])
def test_phase_one_errors_name_op_and_argument(op, inputs, attrs, code, argument):
    with pytest.raises(InvalidArgumentError) as caught:
        prepare(op, inputs, attrs)
    assert caught.value.code == code
    assert f"aclnn{op}: {argument}:" in str(caught.value)


@pytest.mark.parametrize("out", [TensorDesc.contiguous((3, 5), "float32"), TensorDesc.contiguous((3, 1, 5), "float16")])
def test_the_output_must_match(out):
    with pytest.raises(InvalidArgumentError, match="aclnnMean: out:"):
        prepare("Mean", [F32], {"dim": [1], "keepDim": True}, [out])


def test_infer_shapes():
    spec = get_op("ReduceSum")
    (out,) = spec.infer([TensorDesc.contiguous(SHAPE, "bool")], {"dims": [0, 2]})
    assert out.shape == (4,) and out.dtype == DType.int64 and out.is_contiguous
