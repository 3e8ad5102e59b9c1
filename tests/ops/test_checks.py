"""Kernels that compute straight into their output view (``checks.target_view``, ufuncs with
``out=``): a transposed output, fp16/bf16 outputs and empty tensors take the general path and
give the same values as a contiguous fp32 output."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import FLOAT_DTYPES, OpCall, assert_close, random_array, run_op

from aclpipe.dtypes import as_dtype
from aclpipe.ops import get_op
from aclpipe.ops.checks import target_view
from aclpipe.tensor import TensorDesc


def _run_transposed_output(device, op, arrays, attrs):
    """``op`` with its output laid out transposed (the last two dims swapped in memory)."""
    inputs = [TensorDesc.contiguous(a.shape, as_dtype(a.dtype)) if a is not None else None for a in arrays]
    (inferred,) = get_op(op).infer(inputs, attrs)[:1]
    shape = inferred.shape
    strides = list(TensorDesc.contiguous(shape[:-2] + (shape[-1], shape[-2]), inferred.dtype).strides)
    strides[-1], strides[-2] = strides[-2], strides[-1]
    transposed = TensorDesc(shape, inferred.dtype, tuple(strides), 0)
    call = OpCall(device, op, arrays, attrs, outputs=[transposed])
    stream = device.create_stream()
    try:
        call.launch_with_workspace(stream)
        stream.sync()
        (raw,) = call.results()
        # The bytes hold the transposed layout: read them back as such.
        stored = raw.reshape(shape[:-2] + (shape[-1], shape[-2]))
        return np.swapaxes(stored, -1, -2)
    finally:
        call.close()
        stream.close()


_CASES = [
    ("Add", lambda rng: [random_array(rng, (2, 3, 4), "float32"), random_array(rng, (4,), "float32")], {}),
    ("Mul", lambda rng: [random_array(rng, (3, 4), "float32"), random_array(rng, (3, 1), "float32")], {}),
    ("Muls", lambda rng: [random_array(rng, (3, 4), "float32")], {"other": 2.5}),
    ("Exp", lambda rng: [random_array(rng, (3, 4), "float32")], {}),
    ("Matmul", lambda rng: [random_array(rng, (2, 3, 5), "float32"), random_array(rng, (5, 4), "float32")], {}),
    ("Softmax", lambda rng: [random_array(rng, (2, 3, 4), "float32")], {"dim": -1}),
    ("LayerNorm", lambda rng: [random_array(rng, (2, 3, 4), "float32"), random_array(rng, (4,), "float32"),
                               random_array(rng, (4,), "float32")], {"normalizedShape": [4]}),
    ("RmsNorm", lambda rng: [random_array(rng, (3, 4), "float32"), random_array(rng, (4,), "float32")], {}),
    ("BatchNorm", lambda rng: [random_array(rng, (2, 3, 4, 5), "float32"), None, None,
                               random_array(rng, (3,), "float32"),
                               random_array(rng, (3,), "float32", low=0.5, high=2.0)], {}),
    ("Convolution", lambda rng: [random_array(rng, (1, 2, 5, 6), "float32"),
                                 random_array(rng, (3, 2, 3, 3), "float32"),
                                 random_array(rng, (3,), "float32")], {"padding": [1]}),
]


@pytest.mark.parametrize("op,make,attrs", _CASES, ids=[case[0] for case in _CASES])
def test_a_transposed_output_gets_the_values_of_a_contiguous_one(device, op, make, attrs):
    arrays = make(np.random.default_rng(7))
    (contiguous,) = run_op(device, op, arrays, attrs)[:1]
    transposed = _run_transposed_output(device, op, arrays, attrs)
    np.testing.assert_array_equal(transposed, contiguous)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_direct_ufunc_ops_and_the_cast_path_agree_for_every_float_dtype(device, dtype):
    rng = np.random.default_rng(3)
    a, b = random_array(rng, (4, 1, 3), dtype), random_array(rng, (5, 3), dtype)
    (added,) = run_op(device, "Add", [a, b])
    (scaled,) = run_op(device, "Adds", [a], {"other": 1.5})
    expected = a.astype(np.float64) + b.astype(np.float64)
    assert added.dtype == a.dtype and added.shape == (4, 5, 3)
    assert_close(added, expected, dtype, scale=2.0)
    assert_close(scaled, a.astype(np.float64) + 1.5, dtype, scale=2.0)


def test_empty_tensors_pass_through_the_direct_paths(device):
    empty = np.zeros((0, 3), np.float32)
    assert run_op(device, "Add", [empty, np.ones(3, np.float32)])[0].shape == (0, 3)
    assert run_op(device, "Neg", [empty])[0].shape == (0, 3)
    assert run_op(device, "Matmul", [empty, np.ones((3, 2), np.float32)])[0].shape == (0, 2)


def test_target_view_only_for_contiguous_outputs_of_the_compute_dtype():
    out = np.zeros((2, 3, 4), np.float32)
    view = target_view(out, (6, 4), np.float32)
    assert view is not None and np.shares_memory(view, out) and view.shape == (6, 4)
    assert target_view(out.transpose(0, 2, 1), (6, 4), np.float32) is None
    assert target_view(out.astype(np.float16), (6, 4), np.float32) is None
