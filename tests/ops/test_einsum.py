"""Einsum on the simulator against numpy.einsum, and its equation checks."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import OpCall, desc, prepare, random, run_op

from aclpipe.errors import InvalidArgumentError
from aclpipe.ops import get_op

CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(4, 4)]),
    ("ij->", [(3, 4)]),
    ("ij", [(3, 4)]),
    ("ji", [(3, 4)]),
    ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]),
    ("i,i", [(6,), (6,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 2)]),
]


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
@pytest.mark.parametrize("equation,shapes", CASES)
def test_matches_numpy_einsum(device, equation, shapes, dtype):
    arrays = [random(shape, dtype, seed) for seed, shape in enumerate(shapes)]
    (out,) = run_op(device, "Einsum", arrays, {"equation": equation})
    expected = np.einsum(equation, *[a.astype(np.float64) for a in arrays])
    assert out.shape == expected.shape and out.dtype == arrays[0].dtype
    if dtype == "int32":
        np.testing.assert_array_equal(out, expected.astype(np.int64).astype(np.int32))
    else:
        scale = max(float(np.abs(expected).max()), 1.0)
        tolerance = 2e-3 if dtype == "float16" else 1e-5
        np.testing.assert_allclose(out.astype(np.float64), expected, atol=scale * tolerance)


def test_workspace_accumulates_the_output(device):
    call = OpCall(device, "Einsum", [np.ones((3, 4), np.float16), np.ones((4, 5), np.float16)],
                  {"equation": "ij,jk->ik"})
    assert call.workspace_size == 3 * 5 * 4
    with pytest.raises(InvalidArgumentError, match="smaller"):
        call.launch(device.create_stream(), device.alloc(60), 56)
    call.close()


def test_infer_gives_the_output_shape():
    (out,) = get_op("Einsum").infer([desc((2, 3, 4)), desc((4, 7))], {"equation": "...j,jk->k..."})
    assert out.shape == (7, 2, 3)


@pytest.mark.parametrize("inputs,attrs,code", [
    ([desc((3, 4))], {}, 161001),
    ([desc((3, 4))], {"equation": "ij,jk->ik"}, 161002),
    ([desc((3, 4))], {"equation": "i2->i"}, 161002),
    ([desc((3, 4))], {"equation": "ijk->i"}, 161002),
    ([desc((3, 4)), desc((5, 6))], {"equation": "ij,jk->ik"}, 161002),
    ([desc((3, 4))], {"equation": "ij->iz"}, 161002),
    ([desc((3, 4))], {"equation": "ij->ii"}, 161002),
    ([desc((3, 4)), desc((4, 5), "float16")], {"equation": "ij,jk->ik"}, 161002),
    ([desc((3, 4), "int8")], {"equation": "ij->i"}, 161002),
])
def test_phase_one_errors(inputs, attrs, code):
    with pytest.raises(InvalidArgumentError) as caught:
        prepare("Einsum", inputs, attrs)
    assert caught.value.code == code and "aclnnEinsum: " in str(caught.value)
