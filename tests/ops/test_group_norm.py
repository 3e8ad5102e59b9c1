"""GroupNorm on the simulator against a float64 reference, with its workspace statistics."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import FLOAT_DTYPES, OpCall, assert_close, desc, prepare, random, run_op

from aclpipe.dtypes import DType
from aclpipe.errors import InvalidArgumentError
from aclpipe.tensor import TensorDesc


def _reference(x, groups, gamma, beta, eps):
    n, c = x.shape[:2]
    grouped = x.astype(np.float64).reshape(n, groups, -1)
    mean = grouped.mean(axis=2, keepdims=True)
    rstd = 1 / np.sqrt(grouped.var(axis=2, keepdims=True) + eps)
    normalized = ((grouped - mean) * rstd).reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    return normalized * gamma.reshape(shape) + beta.reshape(shape), mean.reshape(n, groups), rstd.reshape(n, groups)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape,groups", [((2, 6, 4, 5), 3), ((3, 4, 7), 4), ((2, 8), 2)])
def test_matches_reference_with_statistics(device, dtype, shape, groups):
    x = random(shape, dtype, 1)
    gamma, beta = random((shape[1],), "float32", 2), random((shape[1],), "float32", 3)
    out, mean, rstd = run_op(device, "GroupNorm", [x, gamma, beta], {"group": groups, "eps": 1e-5})
    expected, want_mean, want_rstd = _reference(x.astype(np.float64), groups, gamma, beta, 1e-5)
    assert_close(out, expected, dtype, scale=4.0)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(rstd, want_rstd, rtol=1e-4)


def test_optional_affine_and_statistics(device):
    x = random((2, 4, 3), "float32", 4)
    out, mean, rstd = run_op(device, "GroupNorm", [x, None, None], {"group": 4},
                    outputs=[TensorDesc.contiguous(x.shape, "float32"), None, None])
    expected, _, _ = _reference(x, 4, np.ones(4), np.zeros(4), 1e-5)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
    assert mean is None and rstd is None


def test_workspace_is_needed_and_checked(device):
    call = OpCall(device, "GroupNorm", [np.ones((2, 4, 3), np.float32)], {"group": 2})
    assert call.workspace_size == 2 * 32  # mean and rstd of 4 (sample, group) pairs, each region aligned
    with pytest.raises(InvalidArgumentError, match="smaller"):
        call.launch(device.create_stream(), device.alloc(64), 60)
    call.close()


@pytest.mark.parametrize("inputs,attrs,code,argument", [
    ([desc((2, 6, 4))], {}, 161001, "group"),
    ([desc((2, 6, 4))], {"group": 4}, 161002, "group"),
    ([desc((6,))], {"group": 1}, 161002, "self"),
    ([desc((2, 6, 4)), desc((5,))], {"group": 3}, 161002, "gammaOptional"),
    ([desc((2, 6, 4)), None, desc((6,), "int32")], {"group": 3}, 161002, "betaOptional"),
    ([desc((2, 6, 4))], {"group": 3, "C": 5}, 161002, "C"),
    ([desc((2, 6, 4))], {"group": 3, "eps": -1.0}, 161002, "eps"),
    ([desc((2, 6, 4), "int32")], {"group": 3}, 161002, "self"),
])
def test_phase_one_errors(inputs, attrs, code, argument):
    with pytest.raises(InvalidArgumentError) as caught:
        prepare("GroupNorm", inputs, attrs)
    assert caught.value.code == code and f"aclnnGroupNorm: {argument}:" in str(caught.value)


def test_statistics_are_float32():
    from aclpipe.ops import get_op

    _, mean, rstd = get_op("GroupNorm").infer([desc((2, 6, 4), "float16")], {"group": 3})
    assert mean.shape == rstd.shape == (2, 3) and mean.dtype == DType.float32
