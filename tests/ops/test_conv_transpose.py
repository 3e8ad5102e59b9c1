"""ConvTranspose on the simulator against a direct scatter definition."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers import OpCall, assert_close, prepare, random_array, run_op

from aclpipe.errors import InvalidArgumentError
from aclpipe.tensor import TensorDesc


def reference(x, weight, bias, stride, padding, dilation, extra, groups):
    """Every input element scattered through the kernel: the definition of a transposed convolution."""
    x, weight = x.astype(np.float64), weight.astype(np.float64)
    batch, c_in, *spatial = x.shape
    per_group_out, kernel = weight.shape[1], weight.shape[2:]
    full = [(n - 1) * s + d * (k - 1) + 1 + e for n, s, d, k, e in zip(spatial, stride, dilation, kernel, extra)]
    canvas = np.zeros((batch, per_group_out * groups, *full))
    per_group_in = c_in // groups
    for channel in range(c_in):
        group = channel // per_group_in
        for position in itertools.product(*(range(n) for n in spatial)):
            for tap in itertools.product(*(range(k) for k in kernel)):
                target = tuple(p * s + t * d for p, s, t, d in zip(position, stride, tap, dilation))
                out_slice = slice(group * per_group_out, (group + 1) * per_group_out)
                canvas[(slice(None), out_slice) + target] += (
                    x[(slice(None), channel) + position][:, None] * weight[(channel, slice(None)) + tap])
    out = canvas[(slice(None), slice(None)) + tuple(slice(p, f - p) for p, f in zip(padding, full))]
    if bias is not None:
        out = out + bias.reshape((-1,) + (1,) * len(spatial))
    return out


CASES = [
    ((1, 2, 3, 4), (2, 3, 2, 2), [2, 2], [0, 0], [1, 1], [0, 0], 1),
    ((2, 4, 3, 3), (4, 2, 3, 3), [1, 2], [1, 0], [1, 1], [0, 1], 2),
    ((1, 2, 4, 2), (2, 1, 3, 2), [3, 1], [1, 0], [2, 1], [2, 0], 1),
    ((2, 3, 5), (3, 2, 4), [2], [1], [1], [1], 1),
]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("shape,wshape,stride,padding,dilation,extra,groups", CASES)
def test_matches_the_scatter_definition(device, dtype, shape, wshape, stride, padding, dilation, extra, groups):
    rng = np.random.default_rng(19)
    x, weight = random_array(rng, shape, dtype), random_array(rng, wshape, dtype)
    bias = random_array(rng, (wshape[1] * groups,), dtype)
    attrs = {"stride": stride, "padding": padding, "dilation": dilation, "outputPadding": extra, "groups": groups}
    expected = reference(x, weight, bias, stride, padding, dilation, extra, groups)
    (out,) = run_op(device, "ConvTranspose", [x, weight, bias], attrs, layout=["transposed", "strided", "strided"])
    assert_close(out, expected, dtype, scale=8.0)


def test_columns_and_canvas_live_in_the_workspace(device):
    x, weight = np.zeros((1, 2, 3, 4), np.float32), np.zeros((2, 3, 2, 2), np.float32)
    call = OpCall(device, "ConvTranspose", [x, weight, None], {"stride": [2, 2]})
    columns, canvas = 1 * 3 * 4 * 12 * 4, 1 * 3 * 6 * 8 * 4
    assert call.workspace_size == columns + canvas
    stream = device.create_stream()
    short = device.alloc(columns)
    with pytest.raises(InvalidArgumentError):
        call.launch(stream, short, columns)
    stream.sync()


@pytest.mark.parametrize("inputs,attrs,needle", [
    ([TensorDesc.contiguous((1, 2, 3, 3), "float32"), TensorDesc.contiguous((3, 2, 2, 2), "float32")], {}, "weight"),
    ([TensorDesc.contiguous((1, 2, 3, 3), "float32"), TensorDesc.contiguous((2, 2, 2, 2), "float32")],
     {"outputPadding": [1, 1]}, "outputPadding"),
    ([TensorDesc.contiguous((1, 2, 3, 3), "float32"), TensorDesc.contiguous((2, 2, 2, 2), "float32")],
     {"groups": 3}, "groups"),
    ([TensorDesc.contiguous((1, 2, 3, 3), "float32"), TensorDesc.contiguous((2, 2, 2, 2), "float32")],
     {"padding": [3, 3]}, "output of at least 1"),
    ([TensorDesc.contiguous((1, 2, 3, 3), "int32"), TensorDesc.contiguous((2, 2, 2, 2), "int32")], {}, "dtype"),
])
def test_phase_one_refuses_bad_arguments(inputs, attrs, needle):
    with pytest.raises(InvalidArgumentError) as caught:
        prepare("ConvTranspose", inputs, attrs)
    assert "aclnnConvTranspose" in str(caught.value) and needle in str(caught.value)
