"""PadV3 on the simulator: constant, reflect, edge and wrap padding, and cropping."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import prepare, random_array, run_op

from aclpipe.errors import InvalidArgumentError
from aclpipe.tensor import TensorDesc


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int64", "bool"])
def test_padding_matches_numpy(device, mode, dtype):
    x = random_array(np.random.default_rng(12), (2, 3, 4), dtype)
    pads = [0, 1, 2, 1, 3, 2]  # (before, after) per dim
    widths = [(0, 1), (2, 1), (3, 2)]
    attrs = {"paddings": pads, "mode": mode}
    if mode == "constant":
        attrs["value"] = True if dtype == "bool" else 7 if dtype == "int64" else 1.5
        expected = np.pad(x, widths, constant_values=attrs["value"])
    else:
        expected = np.pad(x, widths, mode=mode)
    for layout in ("contiguous", "transposed"):
        (out,) = run_op(device, "PadV3", [x], attrs, layout=layout)
        np.testing.assert_array_equal(out, expected)


def test_negative_amounts_crop_before_padding(device):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    (out,) = run_op(device, "PadV3", [x], {"paddings": [-1, 1, 2, -3], "mode": "edge"})
    np.testing.assert_array_equal(out, np.pad(x[1:, :1], [(0, 1), (2, 0)], mode="edge"))


@pytest.mark.parametrize("shape,attrs,needle", [
    ((3,), {"paddings": [1]}, "2 ints"),
    ((3,), {"paddings": [-2, -2]}, "crops"),
    ((3,), {"paddings": [1, 1], "mode": "mirror"}, "mode"),
    ((0,), {"paddings": [1, 0], "mode": "reflect"}, "non-empty"),
    ((3,), {"paddings": [1, 1], "value": 0.5}, "value"),
])
def test_phase_one_refuses_bad_arguments(shape, attrs, needle):
    dtype = "int32" if "value" in attrs else "float32"
    with pytest.raises(InvalidArgumentError) as caught:
        prepare("PadV3", [TensorDesc.contiguous(shape, dtype)], attrs)
    assert needle in str(caught.value)
