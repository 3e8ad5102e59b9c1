"""Amin and Prod on the simulator, with their workspace accumulators."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import FLOAT_DTYPES, INT_DTYPES, OpCall, assert_close, prepare, random_array, run_op

from aclpipe.dtypes import as_dtype
from aclpipe.errors import InvalidArgumentError
from aclpipe.tensor import TensorDesc

SHAPE = (3, 4, 5)


def x_dtype(dtype):
    return as_dtype(dtype).numpy


def _axes(dims):
    return None if not dims else tuple(dims)


@pytest.mark.parametrize("dtype", [*FLOAT_DTYPES, *INT_DTYPES, "bool"])
@pytest.mark.parametrize("dims", [None, [1], [0, -1]])
@pytest.mark.parametrize("keep", [False, True])
def test_amin_matches_numpy_and_keeps_the_dtype(device, dtype, dims, keep):
    x = random_array(np.random.default_rng(8), SHAPE, dtype, low=-50, high=50)
    for layout in ("contiguous", "transposed"):
        (out,) = run_op(device, "Amin", [x], {"dim": dims, "keepdim": keep}, layout=layout)
        assert out.dtype == x.dtype
        np.testing.assert_array_equal(out, x.min(axis=_axes(dims), keepdims=keep))


@pytest.mark.parametrize("dtype", [*FLOAT_DTYPES, "int8", "int32", "int64"])
@pytest.mark.parametrize("dims", [None, [2], [0, 1]])
def test_prod_matches_numpy_and_widens_integers(device, dtype, dims):
    rng = np.random.default_rng(9)
    x = rng.uniform(0.9, 1.1, SHAPE).astype(x_dtype(dtype)) if dtype in FLOAT_DTYPES else \
        random_array(rng, SHAPE, dtype, low=-2, high=2)  # float products stay near 1
    result = dtype if dtype in FLOAT_DTYPES else "int64"
    wide = np.float64 if dtype in FLOAT_DTYPES else np.int64
    (out,) = run_op(device, "Prod", [x], {"dim": dims, "keepDim": True}, layout="strided")
    assert_close(out, x.astype(wide).prod(axis=_axes(dims), keepdims=True), result, scale=8.0)


def test_prod_of_nothing_is_one_and_amin_of_nothing_is_refused(device):
    empty = np.zeros((2, 0), dtype=np.float32)
    (out,) = run_op(device, "Prod", [empty], {"dim": [1]})
    np.testing.assert_array_equal(out, [1.0, 1.0])
    with pytest.raises(InvalidArgumentError, match="non-zero size"):
        prepare("Amin", [TensorDesc.contiguous((2, 0), "float32")], {"dim": [1]})


def test_the_accumulator_lives_in_the_workspace(device):
    call = OpCall(device, "Prod", [np.ones(SHAPE, np.float32)], {"dim": [1], "keepDim": False})
    assert call.workspace_size == 3 * 5 * 4 + (32 - (3 * 5 * 4) % 32) % 32
    stream = device.create_stream()
    short = device.alloc(16)
    with pytest.raises(InvalidArgumentError):
        call.launch(stream, short, 16)
    stream.sync()
