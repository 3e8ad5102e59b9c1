"""Constant folding runs catalog ops on the host with the same kernels and checks as the device."""

from __future__ import annotations

import numpy as np
import pytest

from aclpipe.eager import OpRunner
from aclpipe.errors import InvalidArgumentError
from aclpipe.onnx.fold import Folded, content_digest, evaluate_on_host


def _on_device(device, op, arrays, attrs, outputs=1):
    stream = device.create_stream()
    runner = OpRunner(op, stream)
    for array in arrays:
        runner.input(array)
    for _ in range(outputs):
        runner.output()
    try:
        return runner.attr(**attrs).run()
    finally:
        stream.close()


@pytest.mark.parametrize("op,arrays,attrs,outputs", [
    ("Softmax", [np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)], {"dim": 0}, 1),
    ("Add", [np.arange(6, dtype=np.int64).reshape(2, 3), np.array([10], np.int64)], {}, 1),
    ("Cat", [np.ones((2, 2), np.float16), np.zeros((1, 2), np.float16)], {"dim": 0}, 1),
    ("Split", [np.arange(10, dtype=np.int32)], {"splitSections": [3, 7]}, 2),
    ("Cast", [np.array([1.7, -2.5], np.float32)], {"dtype": "int64"}, 1),
])
def test_host_results_equal_the_device_kernels(device, op, arrays, attrs, outputs):
    host = evaluate_on_host(op, arrays, attrs, outputs)
    for got, want in zip(host, _on_device(device, op, arrays, attrs, outputs)):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_views_are_applied_through_their_descriptor():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    (moved,) = evaluate_on_host("Transpose", [x], {"dim0": 0, "dim1": 2})
    np.testing.assert_array_equal(moved, x.transpose(2, 1, 0))
    (flat,) = evaluate_on_host("Reshape", [x], {"shape": [6, -1]})
    np.testing.assert_array_equal(flat, x.reshape(6, 4))
    (scalar,) = evaluate_on_host("Squeeze", [np.array([5], np.int64)], {"dim": 0})
    assert scalar.shape == () and scalar == 5


def test_phase_one_errors_surface():
    with pytest.raises(InvalidArgumentError):
        evaluate_on_host("Add", [np.ones(3, np.float32), np.ones(4, np.float32)], {})


def test_folded_values_are_read_only_and_digests_cover_dtype_and_shape():
    array = np.arange(4, dtype=np.int32)
    folded = Folded.of(array)
    assert not folded.array.flags.writeable and array.flags.writeable
    assert folded.shape == (4,) and folded.dtype.name == "int32"
    digests = {content_digest(array), content_digest(array.astype(np.int64)), content_digest(array.reshape(2, 2))}
    assert len(digests) == 3


@pytest.mark.parametrize("op", ["Add", "Mul", "Relu"])
def test_zero_dimensional_values_keep_their_shape(op):
    """Kernels may rely on each input having its descriptor's shape (one that writes with a
    single ufunc into its output does): a 0-d value must reach them 0-d, not as shape (1,)."""
    arrays = [np.array(1.5, np.float32)] + ([np.array(2.0, np.float32)] if op != "Relu" else [])
    (result,) = evaluate_on_host(op, arrays, {})
    expected = {"Add": np.float32(3.5), "Mul": np.float32(3.0), "Relu": np.float32(1.5)}[op]
    assert result.shape == () and result == expected
