"""Cumsum and CumsumV2 on the simulator: numpy references and the workspace accumulator."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import OpCall, desc, prepare, random, run_op

from aclpipe.errors import InvalidArgumentError


def _reference(x, dim, exclusive, reverse):
    values = np.flip(x, dim) if reverse else x
    sums = np.cumsum(values, axis=dim, dtype=np.float64 if x.dtype.kind == "f" else np.int64)
    if exclusive:
        sums = sums - values
    return np.flip(sums, dim) if reverse else sums


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "int64", "int8"])
@pytest.mark.parametrize("exclusive,reverse", [(False, False), (True, False), (False, True), (True, True)])
def test_cumsum_v2(device, dtype, exclusive, reverse):
    x = random((3, 5), dtype, 7)
    (out,) = run_op(device, "CumsumV2", [x.T], {"dim": 0, "exclusive": exclusive, "reverse": reverse})
    expected = _reference(x.T, 0, exclusive, reverse)
    if dtype.startswith("float"):
        np.testing.assert_allclose(out.astype(np.float64), expected, rtol=2e-3 if dtype == "float16" else 1e-6,
                                   atol=1e-2 if dtype == "float16" else 1e-6)
    else:
        np.testing.assert_array_equal(out, expected.astype(dtype))  # int8 wraps like the device


def test_cumsum_casts_to_dtype(device):
    x = np.full(10, 100, dtype=np.int8)  # the sums leave int8's range: accumulated in int64
    (out,) = run_op(device, "Cumsum", [x], {"dim": 0, "dtype": "int64"})
    assert out.dtype == np.int64 and out[-1] == 1000


def test_workspace_holds_the_running_sums(device):
    x = np.ones((4, 8), np.float16)
    call = OpCall(device, "CumsumV2", [x], {"dim": 1})
    assert call.workspace_size == 4 * 8 * 4  # float32 accumulators
    workspace, stream = device.alloc(call.workspace_size), device.create_stream()
    with pytest.raises(InvalidArgumentError, match="smaller"):
        call.launch(stream, workspace, call.workspace_size - 4)
    call.launch(stream, workspace)
    stream.sync()
    np.testing.assert_array_equal(device.download(workspace, "float32", (4, 8))[0], np.arange(1, 9))
    call.close()


@pytest.mark.parametrize("op,inputs,attrs,code,argument", [
    ("CumsumV2", [None], {"dim": 0}, 161001, "self"),
    ("CumsumV2", [desc((3,), "bool")], {"dim": 0}, 161002, "self"),
    ("CumsumV2", [desc((3,))], {"dim": 1}, 161002, "dim"),
    ("CumsumV2", [desc((3,))], {"dim": 0, "exclusive": 2}, 161002, "exclusive"),
    ("Cumsum", [desc((3,))], {"dim": 0, "dtype": "bool"}, 161002, "dtype"),
])
def test_phase_one_errors(op, inputs, attrs, code, argument):
    with pytest.raises(InvalidArgumentError) as caught:
        prepare(op, inputs, attrs)
    assert caught.value.code == code and f"aclnn{op}: {argument}:" in str(caught.value)
