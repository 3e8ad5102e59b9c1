"""MaxPool3d, AvgPool3d and MaxPool2dWithIndices against per-window float64 loops."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from helpers import FLOAT_DTYPES, assert_close_to_peak, desc, prepare, random, run_op

from aclpipe.errors import InvalidArgumentError


def _windows(spatial, kernel, stride, padding, dilation, ceil):
    sizes = []
    for n, k, s, p, d in zip(spatial, kernel, stride, padding, dilation):
        span = (n + 2 * p - d * (k - 1) - 1) / s
        out = (math.ceil(span) if ceil else math.floor(span)) + 1
        sizes.append(out - 1 if ceil and (out - 1) * s >= n + p else out)
    for position in itertools.product(*(range(o) for o in sizes)):
        cells = [[o * s - p + i * d for i in range(k)] for o, s, p, k, d in zip(position, stride, padding, kernel,
                                                                                dilation)]
        yield position, sizes, cells


def reference_3d(x, kind, kernel, stride, padding, dilation=(1, 1, 1), ceil=False, include_pad=True):
    x64 = x.astype(np.float64)
    spatial = x.shape[-3:]
    out = None
    for position, sizes, cells in _windows(spatial, kernel, stride, padding, dilation, ceil):
        if out is None:
            out = np.zeros(x.shape[:-3] + tuple(sizes))
        inside = [[c for c in axis if 0 <= c < n] for axis, n in zip(cells, spatial)]
        block = x64[..., inside[0], :, :][..., inside[1], :][..., inside[2]]
        if kind == "max":
            out[(...,) + position] = block.max(axis=(-3, -2, -1))
        else:
            count = math.prod(min(axis[0] + k, n + p) - axis[0] for axis, k, n, p in
                              zip(cells, kernel, spatial, padding)) if include_pad else block[0, 0].size
            out[(...,) + position] = block.sum(axis=(-3, -2, -1)) / count
    return out


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("case", [
    {"kernelSize": [2, 3, 2], "stride": [1, 2, 2], "padding": [1, 1, 0], "ceilMode": False},
    {"kernelSize": [3], "stride": [], "padding": [1], "ceilMode": True},
])
def test_3d_pooling(device, dtype, case):
    x = random((2, 3, 5, 6, 4), dtype, 1)
    kernel = case["kernelSize"] * (3 // len(case["kernelSize"]))
    stride = (case["stride"] or kernel) * (3 // len(case["stride"] or kernel))
    padding = case["padding"] * (3 // len(case["padding"]))
    (got_max,) = run_op(device, "MaxPool3d", [x], case)
    assert_close_to_peak(got_max, reference_3d(x, "max", kernel, stride, padding, ceil=case["ceilMode"]), dtype)
    (got_avg,) = run_op(device, "AvgPool3d", [x], {**case, "countIncludePad": False})
    assert_close_to_peak(got_avg, reference_3d(x, "avg", kernel, stride, padding, ceil=case["ceilMode"],
                                               include_pad=False), dtype)


def test_max_pool_with_indices_points_at_the_first_maximum(device):
    x = np.array([[[[1, 5, 5, 2], [0, 3, 5, 1], [7, 7, 0, 0]]]], np.float32)
    values, indices = run_op(device, "MaxPool2dWithIndices", [x], {"kernelSize": [2, 2], "stride": [1, 1],
                                                                   "padding": [0], "dilation": [1]})
    np.testing.assert_array_equal(values[0, 0], [[5, 5, 5], [7, 7, 5]])
    np.testing.assert_array_equal(indices[0, 0], [[1, 1, 2], [8, 9, 6]])  # h * W + w of the first maximum


def test_indices_with_padding_and_dilation_address_the_input(device):
    x = random((2, 3, 7, 6), "float32", 9)
    values, indices = run_op(device, "MaxPool2dWithIndices", [x], {"kernelSize": [3, 2], "stride": [2, 1],
                                                                   "padding": [1, 1], "dilation": [2, 1]})
    planes = x.reshape(2, 3, -1)
    np.testing.assert_array_equal(np.take_along_axis(planes, indices.reshape(2, 3, -1), axis=2).reshape(values.shape),
                                  values)


@pytest.mark.parametrize("op,inputs,attrs,argument", [
    ("MaxPool3d", [desc((3, 4, 4))], {"kernelSize": [2]}, "self"),
    ("MaxPool3d", [desc((2, 3, 4, 4, 4))], {"kernelSize": [2, 2]}, "kernelSize"),
    ("AvgPool3d", [desc((2, 3, 4, 4, 4))], {"kernelSize": [2], "padding": [2]}, "padding"),
    ("AvgPool3d", [desc((2, 3, 4, 4, 4), "int32")], {"kernelSize": [2]}, "self"),
    ("MaxPool2dWithIndices", [desc((2, 3, 4, 4))], {"kernelSize": [5]}, "self"),
])
def test_phase_one_errors(op, inputs, attrs, argument):
    with pytest.raises(InvalidArgumentError) as caught:
        prepare(op, inputs, attrs)
    assert caught.value.code == 161002 and f"aclnn{op}: {argument}:" in str(caught.value)


def test_indices_output_must_be_int64():
    with pytest.raises(InvalidArgumentError, match="aclnnMaxPool2dWithIndices: indices:"):
        prepare("MaxPool2dWithIndices", [desc((1, 1, 4, 4))], {"kernelSize": [2]},
                outputs=[desc((1, 1, 2, 2)), desc((1, 1, 2, 2), "int32")])
