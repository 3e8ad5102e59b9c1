"""Quantization ops on the simulator against onnxruntime, bit for bit (ties, saturation, axes)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import OpCall, desc, prepare, run_op
from ort_single import ort_node

from aclpipe.errors import InvalidArgumentError

RNG = np.random.default_rng(17)


def _ties(shape, scale):
    """Values that land exactly on .5 after dividing by ``scale``, plus large ones that saturate."""
    base = RNG.integers(-300, 300, shape).astype(np.float32) + 0.5
    return (base * scale).astype(np.float32)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_quantize_per_tensor_rounds_ties_to_even_and_saturates(device, dtype):
    scale = np.array(0.25, np.float32)
    zero_point = np.array(3 if dtype == "int8" else 128, dtype)
    x = _ties((4, 33), 0.25)
    (got,) = run_op(device, "Quantize", [x, scale, zero_point], {"axis": 1})
    (want,) = ort_node("QuantizeLinear", [x, scale, zero_point])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype,zero", [("int8", -3), ("uint8", 250), ("int8", None)])
def test_quantize_saturates_past_float32_integers_and_sends_nan_to_zero(device, dtype, zero):
    # rounding and the zero point are computed in float32: exact below 2**24, saturated above
    x = np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, 2.0 ** 24 + 2, -(2.0 ** 24) - 2, 16777215, -16777215,
                  127.5, -128.5, 4.5, -0.5], np.float32)
    zero_point = None if zero is None else np.array(zero, dtype)
    (got,) = run_op(device, "Quantize", [x, np.array(1.0, np.float32), zero_point], {"axis": 0, "dtype": dtype})
    info = np.iinfo(dtype)
    exact = np.clip(np.rint(x.astype(np.float64)) + (zero or 0), info.min, info.max)
    np.testing.assert_array_equal(got, np.where(np.isnan(exact), 0, exact).astype(dtype))


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_quantize_and_dequantize_per_axis(device, axis):
    x = (RNG.standard_normal((3, 4, 5)) * 40).astype(np.float32)
    scale = (RNG.random(x.shape[axis]) + 0.1).astype(np.float32)
    zero_point = RNG.integers(-20, 20, x.shape[axis]).astype(np.int8)
    (quantized,) = run_op(device, "Quantize", [x, scale, zero_point], {"axis": axis})
    (want,) = ort_node("QuantizeLinear", [x, scale, zero_point], axis=axis)
    np.testing.assert_array_equal(quantized, want)
    (restored,) = run_op(device, "Dequantize", [quantized, scale, zero_point], {"axis": axis})
    (want_restored,) = ort_node("DequantizeLinear", [quantized, scale, zero_point], axis=axis)
    np.testing.assert_array_equal(restored, want_restored)


def test_dequantize_int32_without_zero_point(device):
    x = RNG.integers(-(1 << 20), 1 << 20, (6,)).astype(np.int32)
    scale = np.array(0.003, np.float32)
    (got,) = run_op(device, "Dequantize", [x, scale], {"axis": 0})
    np.testing.assert_array_equal(got, ort_node("DequantizeLinear", [x, scale])[0])


@pytest.mark.parametrize("values", [
    lambda: (RNG.standard_normal((5, 7)) * 3).astype(np.float32),
    lambda: RNG.random((4, 4)).astype(np.float32) + 1.0,  # all positive: the range widens to 0
    lambda: -RNG.random((4, 4)).astype(np.float32),
    lambda: np.zeros((3,), np.float32),  # an empty range: scale 1
])
def test_dynamic_quantize_matches_onnxruntime(device, values):
    x = values()
    got = run_op(device, "DynamicQuantize", [x])
    want = ort_node("DynamicQuantizeLinear", [x], outputs=3)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w.reshape(g.shape))


def _exact_matmul(a, b, a_zero, b_zero):
    return ((a.astype(np.int64) - a_zero.astype(np.int64)) @ (b.astype(np.int64) - b_zero.astype(np.int64))
            ).astype(np.int32)


@pytest.mark.parametrize("a_type,b_type", [("uint8", "uint8"), ("int8", "int8"), ("int8", "uint8")])
def test_matmul_integer_with_zero_points(device, a_type, b_type):
    low = {"uint8": 0, "int8": -128}
    a = RNG.integers(low[a_type], low[a_type] + 256, (2, 5, 64)).astype(a_type)
    b = RNG.integers(low[b_type], low[b_type] + 256, (64, 7)).astype(b_type)
    a_zero = np.array(RNG.integers(0, 100), a_type)
    b_zero = RNG.integers(0, 100, (7,)).astype(b_type)
    (got,) = run_op(device, "MatmulInteger", [a, b, a_zero, b_zero])
    (want,) = ort_node("MatMulInteger", [a, b, a_zero, b_zero])
    np.testing.assert_array_equal(got, want)


def test_uint8_by_int8_is_exact_where_onnxruntime_saturates(device):
    # onnxruntime's AVX2 u8s8 kernel sums byte pairs in saturating int16 (pmaddubsw): it is exact
    # only for 7-bit weights (reduce_range). aclpipe accumulates exactly in every case.
    a = RNG.integers(0, 256, (4, 64)).astype(np.uint8)
    b = RNG.integers(-128, 128, (64, 6)).astype(np.int8)
    zeros = (np.array(0, np.uint8), np.array(0, np.int8))
    (got,) = run_op(device, "MatmulInteger", [a, b, *zeros])
    np.testing.assert_array_equal(got, _exact_matmul(a, b, *zeros))
    small = (b // 2).astype(np.int8)
    (got_small,) = run_op(device, "MatmulInteger", [a, small, *zeros])
    np.testing.assert_array_equal(got_small, ort_node("MatMulInteger", [a, small, *zeros])[0])


def test_convolution_integer_with_padding_and_groups(device):
    x = RNG.integers(0, 256, (2, 4, 7, 6)).astype(np.uint8)
    w = RNG.integers(0, 256, (6, 2, 3, 3)).astype(np.uint8)
    x_zero, w_zero = np.array(121, np.uint8), np.array(130, np.uint8)
    attrs = {"stride": [2, 1], "padding": [1, 1], "dilation": [1, 2], "groups": 2}
    (got,) = run_op(device, "ConvolutionInteger", [x, w, x_zero, w_zero], attrs)
    (want,) = ort_node("ConvInteger", [x, w, x_zero, w_zero], strides=[2, 1], pads=[1, 1, 1, 1],
                       dilations=[1, 2], group=2)
    np.testing.assert_array_equal(got, want)


def test_convolution_integer_per_channel_weight_zero_points(device):
    # onnxruntime's ConvInteger takes per-tensor zero points only: checked against exact math.
    x = RNG.integers(0, 256, (1, 3, 5, 5)).astype(np.uint8)
    w = RNG.integers(-128, 128, (4, 3, 2, 2)).astype(np.int8)
    w_zero = RNG.integers(-5, 5, (4,)).astype(np.int8)
    (got,) = run_op(device, "ConvolutionInteger", [x, w, None, w_zero])
    shifted = (w.astype(np.int64) - w_zero.reshape(4, 1, 1, 1)).reshape(4, -1)
    windows = np.lib.stride_tricks.sliding_window_view(x[0].astype(np.int64), (2, 2), axis=(1, 2))
    expected = np.einsum("ok,khw->ohw", shifted, windows.transpose(0, 3, 4, 1, 2).reshape(12, 4, 4))
    np.testing.assert_array_equal(got[0], expected)


def test_requantize_multiplies_in_float32_then_rounds(device):
    accumulated = RNG.integers(-40000, 40000, (3, 8)).astype(np.int32)
    scale = (RNG.random(8) * 0.01).astype(np.float32)
    zero_point = np.array(-3, np.int8)
    (got,) = run_op(device, "Requantize", [accumulated, scale, zero_point], {"axis": 1})
    expected = np.clip(np.rint(accumulated.astype(np.float32) * scale) + -3, -128, 127).astype(np.int8)
    np.testing.assert_array_equal(got, expected)


def test_integer_products_keep_shifted_operands_in_the_workspace(device):
    call = OpCall(device, "MatmulInteger", [np.ones((3, 4), np.uint8), np.ones((4, 5), np.uint8)])
    # a shifted (int32), a and b in float32, the float32 product and its int64 total: 32-byte aligned
    assert call.workspace_size == 64 + 64 + 96 + 64 + 128
    with pytest.raises(InvalidArgumentError, match="smaller"):
        call.launch(device.create_stream(), device.alloc(416), 412)
    call.close()


@pytest.mark.parametrize("op,inputs,attrs,code,argument", [
    ("Quantize", [desc((3, 4)), None], {}, 161001, "scale"),
    ("Quantize", [desc((3, 4), "int32"), desc(())], {}, 161002, "x"),
    ("Quantize", [desc((3, 4)), desc((5,))], {"axis": 1}, 161002, "scale"),
    ("Quantize", [desc((3, 4)), desc(()), desc((), "int32")], {}, 161002, "zeroPoint"),
    ("Quantize", [desc((3, 4)), desc(())], {"dtype": "int32"}, 161002, "dtype"),
    ("Quantize", [desc((3, 4)), desc(())], {"axis": 2}, 161002, "axis"),
    ("Dequantize", [desc((3,), "float32"), desc(())], {"axis": 0}, 161002, "x"),
    ("Dequantize", [desc((3,), "int8"), desc(()), desc((), "uint8")], {"axis": 0}, 161002, "zeroPoint"),
    ("DynamicQuantize", [desc((3,), "float16")], {}, 161002, "x"),
    ("MatmulInteger", [desc((3, 4), "uint8"), desc((5, 2), "uint8")], {}, 161002, "b"),
    ("MatmulInteger", [desc((3, 4), "float32"), desc((4, 2), "uint8")], {}, 161002, "a"),
    ("MatmulInteger", [desc((3, 4), "uint8"), desc((4, 2), "int8"), desc((2,), "uint8")], {}, 161002,
     "aZeroPoint"),
    ("ConvolutionInteger", [desc((1, 4, 5, 5), "uint8"), desc((2, 3, 3, 3), "int8")], {}, 161002, "weight"),
    ("ConvolutionInteger", [desc((1, 4, 5, 5), "uint8"), None], {}, 161001, "weight"),
])
def test_phase_one_errors(op, inputs, attrs, code, argument):
    with pytest.raises(InvalidArgumentError) as caught:
        prepare(op, inputs, attrs)
    assert caught.value.code == code and f"aclnn{op}: {argument}:" in str(caught.value)
