"""Convolution (1-D NCL, 2-D NCHW) on the simulator against a direct-loop float64 reference."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers import (
    FLOAT_DTYPES,
    OpCall,
    assert_close_to_peak,
    check_shared_workspace,
    desc,
    random,
    run_op,
)

from aclpipe.dtypes import Format
from aclpipe.errors import InvalidArgumentError
from aclpipe.ops import get_op


def reference_conv(x, weight, bias, stride, padding, dilation, groups):
    """Direct definition: every output element is a sum over its receptive field."""
    x, weight = x.astype(np.float64), weight.astype(np.float64)
    dims = x.ndim - 2
    padded = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding])
    kernel = weight.shape[2:]
    out_spatial = [(size + 2 * p - d * (k - 1) - 1) // s + 1
                   for size, k, s, p, d in zip(x.shape[2:], kernel, stride, padding, dilation)]
    out = np.zeros((x.shape[0], weight.shape[0], *out_spatial))
    per_group_out, per_group_in = weight.shape[0] // groups, weight.shape[1]
    for n, o in itertools.product(range(x.shape[0]), range(weight.shape[0])):
        group = o // per_group_out
        channels = padded[n, group * per_group_in:(group + 1) * per_group_in]
        for position in itertools.product(*(range(size) for size in out_spatial)):
            field = channels[(slice(None),) + tuple(
                slice(i * s, i * s + d * (k - 1) + 1, d) for i, s, d, k in zip(position, stride, dilation, kernel))]
            out[(n, o) + position] = (field * weight[o]).sum() + (0.0 if bias is None else float(bias[o]))
    assert len(out_spatial) == dims
    return out


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("case", [
    dict(x=(2, 4, 7, 6), w=(6, 2, 3, 2), stride=[2, 1], padding=[1, 2], dilation=[1, 2], groups=2, bias=True),
    dict(x=(1, 3, 5, 5), w=(4, 3, 3, 3), stride=[1], padding=[1], dilation=[1], groups=1, bias=False),
    dict(x=(2, 4, 9), w=(4, 1, 3), stride=[2], padding=[1], dilation=[2], groups=4, bias=True),
    dict(x=(1, 2, 6), w=(3, 2, 1), stride=[1], padding=[0], dilation=[1], groups=1, bias=False),
    # depthwise 5x5 with stride 2 on an odd size (the last row/column of the padding is unused)
    dict(x=(2, 3, 7, 7), w=(3, 1, 5, 5), stride=[2], padding=[2], dilation=[1], groups=3, bias=True),
    # 1x1 pointwise, no padding: the unfold reads the input itself; two groups, channel multiplier 2
    dict(x=(2, 4, 3, 5), w=(4, 2, 1, 1), stride=[1], padding=[0], dilation=[1], groups=2, bias=True),
    # no padding with stride and dilation: windows of the unpadded input
    dict(x=(1, 2, 9, 8), w=(2, 2, 2, 3), stride=[3, 2], padding=[0], dilation=[2, 1], groups=1, bias=False),
])
def test_convolution_matches_the_direct_definition(device, dtype, case):
    x, weight = random(case["x"], dtype, 1), random(case["w"], dtype, 2)
    bias = random((case["w"][0],), dtype, 3) if case["bias"] else None
    dims = len(case["x"]) - 2
    attrs = {key: case[key] for key in ("stride", "padding", "dilation", "groups")}
    (out,) = run_op(device, "Convolution", [x, weight, bias], attrs)
    full = [v * dims if len(v) == 1 else v for v in (case["stride"], case["padding"], case["dilation"])]
    expected = reference_conv(x, weight, bias, *full, case["groups"])
    assert_close_to_peak(out, expected, dtype, scale=4)


def test_non_contiguous_input_and_weight(device):
    x = random((2, 3, 6, 5), "float32", 1).transpose(0, 1, 3, 2)  # [2, 3, 5, 6], strided
    weight = random((3, 4, 3, 3), "float32", 2).transpose(1, 0, 2, 3)  # [4, 3, 3, 3], strided
    (out,) = run_op(device, "Convolution", [x, weight, None], {"stride": [1, 1], "padding": [1, 1],
                                                             "dilation": [1, 1], "groups": 1})
    assert_close_to_peak(out, reference_conv(x, weight, None, [1, 1], [1, 1], [1, 1], 1), "float32", scale=4)


def test_non_contiguous_input_without_padding(device):
    # An unpadded strided input is unfolded through its own strides, not the packed ones.
    x = random((2, 3, 6, 5), "float32", 1).transpose(0, 1, 3, 2)
    weight = random((6, 1, 2, 2), "float32", 2)
    attrs = {"stride": [2, 1], "padding": [0, 0], "dilation": [1, 2], "groups": 3}
    (out,) = run_op(device, "Convolution", [x, weight, None], attrs)
    assert_close_to_peak(out, reference_conv(x, weight, None, [2, 1], [0, 0], [1, 2], 3), "float32", scale=4)


def test_empty_batch_gives_an_empty_output(device):
    x, weight = np.zeros((0, 2, 5, 5), np.float32), random((3, 2, 3, 3), "float32", 2)
    (out,) = run_op(device, "Convolution", [x, weight, None], {"padding": [1]})
    assert out.shape == (0, 3, 5, 5)


def test_workspace_is_the_unfolded_buffer_and_formats_are_kept(device):
    inputs = [desc((2, 4, 7, 6), format=Format.NCHW), desc((6, 2, 3, 2))]
    attrs = {"stride": [2, 1], "padding": [1, 2], "dilation": [1, 2], "groups": 2}
    (inferred,) = get_op("Convolution").infer(inputs, attrs)
    assert inferred.shape == (2, 6, 4, 8) and inferred.format == Format.NCHW
    plan = get_op("Convolution").prepare(inputs, [inferred], attrs)
    assert plan.variant == "im2col-2d"  # 4 * 3 * 2 taps for 6 output channels: im2col's copy
    assert plan.workspace_size == 2 * 4 * 3 * 2 * 4 * 8 * 4  # N*C*kh*kw*oh*ow float32
    assert plan.cube and plan.flops == 2 * inferred.numel * 2 * 3 * 2
    # Fewer output channels: unfolded by rows, each tap's columns spanning the phase plane's
    # width (10 = 6 + 2 * 2, stride 1) for the 4 output rows, then the wide product
    # [N, C_out, oh, 10], float32.
    narrow = [desc((2, 4, 7, 6)), desc((2, 2, 3, 2))]
    (out,) = get_op("Convolution").infer(narrow, attrs)
    plan = get_op("Convolution").prepare(narrow, [out], attrs)
    assert plan.variant == "rows-2d"
    assert plan.workspace_size == 2 * 4 * 3 * 2 * 4 * 10 * 4 + 2 * 2 * 4 * 10 * 4
    (ncl,) = get_op("Convolution").infer([desc((1, 2, 6), format=Format.NCL), desc((3, 2, 3))], {})
    assert ncl.format == Format.NCL and ncl.shape == (1, 3, 4)


def test_cube_math_type_fp16_rounds_float32_operands(device):
    x, weight = random((1, 2, 5, 5), "float32", 1), random((3, 2, 3, 3), "float32", 2)
    (out,) = run_op(device, "Convolution", [x, weight, None], {"cubeMathType": 2})
    rounded = reference_conv(x.astype(np.float16), weight.astype(np.float16), None, [1, 1], [0, 0], [1, 1], 1)
    assert_close_to_peak(out, rounded, "float32", scale=4)


@pytest.mark.parametrize("inputs, out, attrs, code, needle", [
    ([None, desc((3, 2, 3, 3))], desc((1, 3, 3, 3)), {}, 161001, "input"),
    ([desc((1, 2, 5, 5)), None], desc((1, 3, 3, 3)), {}, 161001, "weight"),
    ([desc((1, 2, 5, 5)), desc((3, 2, 3, 3))], desc((1, 3, 3, 3)), {"transposed": True}, 161002, "transposed"),
    ([desc((1, 2, 5, 5)), desc((3, 2, 3, 3))], desc((1, 3, 3, 3)), {"groups": 3}, 161002, "groups"),
    ([desc((1, 2, 5, 5)), desc((3, 1, 3, 3))], desc((1, 3, 3, 3)), {}, 161002, "weight"),
    ([desc((1, 2, 5, 5)), desc((3, 2, 3, 3)), desc((2,))], desc((1, 3, 3, 3)), {}, 161002, "bias"),
    ([desc((1, 2, 5, 5)), desc((3, 2, 3, 3))], desc((1, 3, 3, 3)), {"stride": [0, 1]}, 161002, "stride"),
    ([desc((1, 2, 5, 5)), desc((3, 2, 3, 3))], desc((1, 3, 3, 3)), {"padding": [1, 1, 1]}, 161002, "padding"),
    ([desc((1, 2, 2, 2)), desc((3, 2, 3, 3))], desc((1, 3, 1, 1)), {}, 161002, "input"),
    ([desc((1, 2, 5, 5, 5, 5)), desc((3, 2, 3, 3, 3, 3))], desc((1, 3, 3, 3, 3, 3)), {}, 161002, "5-D"),
    ([desc((1, 2, 5, 5), format=Format.NHWC), desc((3, 2, 3, 3))], desc((1, 3, 3, 3)), {}, 161002, "NHWC"),
    ([desc((1, 2, 5, 5), "int32"), desc((3, 2, 3, 3), "int32")], desc((1, 3, 3, 3), "int32"), {}, 161002, "int32"),
    ([desc((1, 2, 5, 5)), desc((3, 2, 3, 3))], desc((1, 3, 5, 5)), {}, 161002, "output"),
    ([desc((1, 2, 5, 5)), desc((3, 2, 3, 3))], desc((1, 3, 3, 3)), {"cubeMathType": -1}, 161002, "cubeMathType"),
])
def test_phase_one_refuses_bad_arguments(device, inputs, out, attrs, code, needle):
    with pytest.raises(InvalidArgumentError) as caught:
        device.backend.op_prepare("Convolution", inputs, [out], attrs)
    assert caught.value.code == code
    assert "aclnnConvolution" in str(caught.value) and needle in str(caught.value)


def test_3d_convolution_matches_a_sliding_window_sum(device):
    x, weight = random((2, 4, 5, 6, 4), "float32", 3), random((6, 2, 2, 3, 2), "float32", 4)
    (out,) = run_op(device, "Convolution", [x, weight, None], {"stride": [1, 2, 1], "padding": [1, 0, 1],
                                                              "dilation": [2, 1, 1], "groups": 2})
    padded = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (1, 1), (0, 0), (1, 1)])
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3, 2), axis=(2, 3, 4))[:, :, :, ::2, :, ::2]
    groups = windows.reshape(2, 2, 2, *windows.shape[2:])  # [N, g, C/g, d, h, w, kd, kh, kw]
    filters = weight.astype(np.float64).reshape(2, 3, 2, 2, 3, 2)
    expected = np.einsum("ngcdhwijk,goci j k->ngodhw".replace(" ", ""), groups, filters).reshape(out.shape)
    assert_close_to_peak(out, expected, "float32")


def _conv_calls(device, count):
    x, weight = random((1, 2, 5, 5), "float32", 1), random((3, 2, 3, 3), "float32", 2)
    return x, weight, [OpCall(device, "Convolution", [x, weight, None]) for _ in range(count)]


def test_short_workspace_is_refused_at_launch(device):
    _, _, (call,) = _conv_calls(device, 1)
    short = device.alloc(call.workspace_size // 2)
    with pytest.raises(InvalidArgumentError) as caught:
        call.launch(device.create_stream(), short, call.workspace_size // 2)
    assert caught.value.code == 161002


def test_workspace_shared_by_unordered_streams_is_a_hazard(device):
    x, weight, calls = _conv_calls(device, 2)
    check_shared_workspace(device, calls)
    expected = reference_conv(x, weight, None, [1, 1], [0, 0], [1, 1], 1)
    for call in calls:
        assert_close_to_peak(call.results()[0], expected, "float32", scale=4)


@pytest.mark.parametrize("shape,weight_shape,groups,bias,layout", [
    ((2, 6, 5, 4), (8, 6, 1, 1), 1, True, "contiguous"),
    ((2, 6, 5, 4), (4, 3, 1, 1), 2, False, "transposed"),
    ((3, 4, 7), (6, 2, 1), 2, True, "contiguous"),
    ((2, 16, 1, 1), (8, 16, 1, 1), 1, True, "view"),
])
def test_a_1x1_convolution_reads_its_input_in_place_with_the_bits_of_the_unfolded_form(
        device, shape, weight_shape, groups, bias, layout):
    from aclpipe.ops.conv import _im2col_kernel

    x, weight = random(shape, "float32", 1), random(weight_shape, "float32", 2)
    bias_values = random((weight_shape[0],), "float32", 3) if bias else None
    attrs = {"groups": groups}
    spec = get_op("Convolution")
    descs = [desc(shape), desc(weight_shape), desc((weight_shape[0],)) if bias else None]
    (out_desc,) = spec.infer(descs, attrs)
    plan = spec.prepare(descs, [out_desc], attrs)
    assert plan.workspace_size == 0 and plan.variant == f"pointwise-{len(shape) - 2}d"
    (out,) = run_op(device, "Convolution", [x, weight, bias_values], attrs, layout=layout)
    unfolded = np.empty(out_desc.shape, np.float32)
    columns = np.empty(x.size * 4, np.uint8)  # the im2col workspace: N*C*prod(out) floats
    kernel, _ = _im2col_kernel(spec._call(descs, attrs), 0)
    kernel([x, weight, bias_values] if bias else [x, weight, None], [unfolded], columns)
    np.testing.assert_array_equal(out.view(np.uint32), unfolded.view(np.uint32))
    assert_close_to_peak(out, reference_conv(x, weight, bias_values, [1] * (len(shape) - 2),
                                             [0] * (len(shape) - 2), [1] * (len(shape) - 2), groups), "float32")
