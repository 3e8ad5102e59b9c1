"""MaxPool2d, AvgPool2d, AdaptiveAvgPool2d on the simulator against per-window float64 loops."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from helpers import FLOAT_DTYPES, assert_close_to_peak, desc, random, run_op

from aclpipe.dtypes import Format
from aclpipe.errors import InvalidArgumentError
from aclpipe.ops import get_op


def _out_size(size, k, s, p, d, ceil):
    span = (size + 2 * p - d * (k - 1) - 1) / s
    out = (math.ceil(span) if ceil else math.floor(span)) + 1
    return out - 1 if ceil and (out - 1) * s >= size + p else out


def reference_pool(x, kind, kernel, stride, padding, dilation=(1, 1), ceil=False, include_pad=True, divisor=0):
    """Each output element from its window's cells, by PyTorch's definition."""
    x = x.astype(np.float64)
    height, width = x.shape[-2:]
    sizes = [_out_size(n, k, s, p, d, ceil) for n, k, s, p, d in zip((height, width), kernel, stride, padding,
                                                                     dilation)]
    out = np.zeros(x.shape[:-2] + tuple(sizes))
    for oh, ow in itertools.product(*(range(n) for n in sizes)):
        h0, w0 = oh * stride[0] - padding[0], ow * stride[1] - padding[1]
        rows = [h0 + i * dilation[0] for i in range(kernel[0]) if 0 <= h0 + i * dilation[0] < height]
        cols = [w0 + j * dilation[1] for j in range(kernel[1]) if 0 <= w0 + j * dilation[1] < width]
        cells = x[..., rows, :][..., cols]
        if kind == "max":
            out[..., oh, ow] = cells.max(axis=(-2, -1))
            continue
        if divisor:
            count = divisor
        elif include_pad:
            count = ((min(h0 + kernel[0], height + padding[0]) - h0) *
                     (min(w0 + kernel[1], width + padding[1]) - w0))
        else:
            count = len(rows) * len(cols)
        out[..., oh, ow] = cells.sum(axis=(-2, -1)) / count
    return out


MAX_CASES = [
    dict(shape=(2, 3, 7, 6), kernelSize=[3, 2], stride=[2, 2], padding=[1, 1], dilation=[1, 1], ceilMode=False),
    dict(shape=(2, 3, 7, 6), kernelSize=[3, 3], stride=[2, 2], padding=[1, 1], dilation=[1, 1], ceilMode=True),
    dict(shape=(3, 8, 8), kernelSize=[2], stride=[], padding=[0], dilation=[2], ceilMode=False),
    dict(shape=(1, 2, 5, 5), kernelSize=[2, 2], stride=[2, 2], padding=[0, 0], dilation=[1, 1], ceilMode=True),
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("case", MAX_CASES)
def test_max_pool(device, dtype, case):
    x = random(case["shape"], dtype, 1)
    attrs = {k: v for k, v in case.items() if k != "shape"}
    (out,) = run_op(device, "MaxPool2d", [x], attrs)
    full = {k: (v * 2 if isinstance(v, list) and len(v) == 1 else v) for k, v in attrs.items()}
    stride = full["stride"] or full["kernelSize"]
    expected = reference_pool(x, "max", full["kernelSize"], stride, full["padding"], full["dilation"],
                              full["ceilMode"])
    assert_close_to_peak(out, expected, dtype)


AVG_CASES = [
    dict(shape=(2, 3, 7, 6), kernelSize=[3, 2], strides=[2, 1], paddings=[1, 1], ceilMode=False,
         countIncludePad=True, divisorOverride=0),
    dict(shape=(2, 3, 7, 6), kernelSize=[3, 3], strides=[2, 2], paddings=[1, 1], ceilMode=True,
         countIncludePad=False, divisorOverride=0),
    dict(shape=(2, 3, 7, 6), kernelSize=[3, 3], strides=[2, 2], paddings=[1, 1], ceilMode=True,
         countIncludePad=True, divisorOverride=0),
    dict(shape=(3, 6, 6), kernelSize=[2, 2], strides=[2, 2], paddings=[0, 0], ceilMode=False,
         countIncludePad=True, divisorOverride=3),
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("case", AVG_CASES)
def test_avg_pool(device, dtype, case):
    x = random(case["shape"], dtype, 2)
    attrs = {k: v for k, v in case.items() if k != "shape"}
    (out,) = run_op(device, "AvgPool2d", [x], {**attrs, "cubeMathType": 1})
    expected = reference_pool(x, "avg", attrs["kernelSize"], attrs["strides"], attrs["paddings"],
                              ceil=attrs["ceilMode"], include_pad=attrs["countIncludePad"],
                              divisor=attrs["divisorOverride"])
    assert_close_to_peak(out, expected, dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape, size", [((2, 3, 7, 5), [3, 2]), ((3, 4, 4), [1]), ((1, 2, 5, 6), [5, 6])])
def test_adaptive_avg_pool(device, dtype, shape, size):
    x = random(shape, dtype, 3)
    (out,) = run_op(device, "AdaptiveAvgPool2d", [x], {"outputSize": size})
    out_h, out_w = size * 2 if len(size) == 1 else size
    height, width = shape[-2:]
    expected = np.zeros(shape[:-2] + (out_h, out_w))
    for i, j in itertools.product(range(out_h), range(out_w)):
        rows = slice(i * height // out_h, -(-(i + 1) * height // out_h))
        cols = slice(j * width // out_w, -(-(j + 1) * width // out_w))
        expected[..., i, j] = x[..., rows, cols].astype(np.float64).mean(axis=(-2, -1))
    assert_close_to_peak(out, expected, dtype)


def test_pooling_reads_strided_input_and_keeps_nchw(device):
    x = random((2, 3, 6, 8), "float32", 4).transpose(0, 1, 3, 2)
    (out,) = run_op(device, "MaxPool2d", [x], {"kernelSize": [2, 2]}, fmt=Format.NCHW)
    assert_close_to_peak(out, reference_pool(x, "max", (2, 2), (2, 2), (0, 0)), "float32")
    (inferred,) = get_op("AvgPool2d").infer([desc((1, 2, 4, 4), format=Format.NCHW)], {"kernelSize": [2, 2]})
    assert inferred.format == Format.NCHW and inferred.shape == (1, 2, 2, 2)


def test_max_pool_propagates_nan(device):
    x = np.zeros((1, 1, 4, 4), np.float32)
    x[0, 0, 1, 1] = np.nan
    (out,) = run_op(device, "MaxPool2d", [x], {"kernelSize": [2, 2]})
    assert np.isnan(out[0, 0, 0, 0]) and not np.isnan(out[0, 0, 1, 1])


@pytest.mark.parametrize("op, x, out, attrs, code, needle", [
    ("MaxPool2d", None, desc((1, 1, 2, 2)), {"kernelSize": [2, 2]}, 161001, "self"),
    ("MaxPool2d", desc((1, 1, 4, 4)), None, {"kernelSize": [2, 2]}, 161001, "out"),
    ("MaxPool2d", desc((1, 1, 4, 4)), desc((1, 1, 2, 2)), {}, 161002, "kernelSize"),
    ("MaxPool2d", desc((1, 1, 4, 4)), desc((1, 1, 2, 2)), {"kernelSize": [2, 2], "padding": [2, 2]}, 161002,
     "padding"),
    ("MaxPool2d", desc((1, 1, 4, 4)), desc((1, 1, 2, 2)), {"kernelSize": [2, 2], "stride": [0]}, 161002, "stride"),
    ("MaxPool2d", desc((4, 4)), desc((2, 2)), {"kernelSize": [2, 2]}, 161002, "3-D"),
    ("MaxPool2d", desc((1, 1, 4, 4), "int32"), desc((1, 1, 2, 2), "int32"), {"kernelSize": [2]}, 161002, "int32"),
    ("MaxPool2d", desc((1, 1, 4, 4)), desc((1, 1, 3, 3)), {"kernelSize": [2, 2]}, 161002, "out"),
    ("MaxPool2d", desc((1, 1, 1, 4)), desc((1, 1, 1, 2)), {"kernelSize": [2, 2]}, 161002, "self"),
    ("AvgPool2d", desc((1, 1, 4, 4)), desc((1, 1, 2, 2)), {"kernelSize": [2, 2], "divisorOverride": -1}, 161002,
     "divisorOverride"),
    ("AvgPool2d", desc((1, 1, 4, 4)), desc((1, 1, 2, 2)), {"kernelSize": [2, 2], "cubeMathType": 9}, 161002,
     "cubeMathType"),
    ("AvgPool2d", desc((1, 1, 4, 4)), desc((1, 1, 2, 2)), {"kernelSize": [2, 2], "ceilMode": "yes"}, 161002,
     "ceilMode"),
    ("AvgPool2d", desc((1, 1, 4, 4), format=Format.NHWC), desc((1, 1, 2, 2)), {"kernelSize": [2, 2]}, 161002,
     "NHWC"),
    ("AdaptiveAvgPool2d", desc((1, 1, 4, 4)), desc((1, 1, 2, 2)), {"outputSize": [0, 2]}, 161002, "outputSize"),
])
def test_phase_one_refuses_bad_arguments(device, op, x, out, attrs, code, needle):
    with pytest.raises(InvalidArgumentError) as caught:
        device.backend.op_prepare(op, [x], [out], attrs)
    assert caught.value.code == code
    assert f"aclnn{op}" in str(caught.value) and needle in str(caught.value)
