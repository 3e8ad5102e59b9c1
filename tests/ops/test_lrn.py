"""LocalResponseNorm on the simulator against ONNX LRN's definition."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import OpCall, assert_close, prepare, random_array, run_op

from aclpipe.errors import InvalidArgumentError
from aclpipe.tensor import TensorDesc


def reference(x, size, alpha, beta, bias):
    x = x.astype(np.float64)
    channels = x.shape[1]
    sums = np.zeros_like(x)
    for c in range(channels):
        low, high = max(0, c - (size - 1) // 2), min(channels - 1, c + size // 2)
        sums[:, c] = (x[:, low:high + 1] ** 2).sum(axis=1)
    return x / (bias + alpha / size * sums) ** beta


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("size,alpha,beta,bias", [(5, 1e-4, 0.75, 1.0), (4, 0.5, 0.5, 2.0), (1, 0.1, 1.0, 1.0)])
def test_matches_the_onnx_definition(device, dtype, size, alpha, beta, bias):
    x = random_array(np.random.default_rng(20), (2, 7, 3, 4), dtype)
    attrs = {"size": size, "alpha": alpha, "beta": beta, "bias": bias}
    (out,) = run_op(device, "LocalResponseNorm", [x], attrs, layout="transposed")
    assert_close(out, reference(x, size, alpha, beta, bias), dtype, scale=4.0)


def test_square_sums_live_in_the_workspace(device):
    call = OpCall(device, "LocalResponseNorm", [np.zeros((1, 3, 2, 2), np.float32)], {"size": 3})
    assert call.workspace_size == 64
    stream = device.create_stream()
    with pytest.raises(InvalidArgumentError):
        call.launch(stream, None, 0)
    stream.sync()


@pytest.mark.parametrize("shape,attrs,needle", [((2, 3), {}, "size"), ((2, 3), {"size": 0}, "size"),
                                                ((3,), {"size": 3}, "rank")])
def test_phase_one_refuses_bad_arguments(shape, attrs, needle):
    with pytest.raises(InvalidArgumentError, match=needle):
        prepare("LocalResponseNorm", [TensorDesc.contiguous(shape, "float32")], attrs)
