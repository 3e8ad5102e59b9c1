"""LayerNorm, RmsNorm and BatchNorm on the simulator, including their workspace statistics."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import FLOAT_DTYPES, OpCall, assert_close, prepare, random_array, run_op

from aclpipe.dtypes import DType, Format
from aclpipe.errors import HazardError, InvalidArgumentError
from aclpipe.ops import get_op
from aclpipe.tensor import TensorDesc


def _layer_norm(x, normalized, weight, bias, eps):
    axes = tuple(range(x.ndim - len(normalized), x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    rstd = 1 / np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + eps)
    out = (x - mean) * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out, mean, rstd


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("normalized", [[6], [4, 6]])
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_matches_numpy(device, dtype, normalized, affine):
    rng = np.random.default_rng(1)
    x = random_array(rng, (3, 4, 6), dtype, low=-2, high=5)
    weight = random_array(rng, tuple(normalized), dtype) if affine else None
    bias = random_array(rng, tuple(normalized), "float32") if affine else None  # fp32 params are allowed
    attrs = {"normalizedShape": normalized, "eps": 1e-3}
    weight64 = None if weight is None else weight.astype(np.float64)
    out64, mean, rstd = _layer_norm(x.astype(np.float64), normalized, weight64, bias, 1e-3)
    for layout in ("contiguous", "transposed"):
        out, mean_out, rstd_out = run_op(device, "LayerNorm", [x, weight, bias], attrs, layout=layout)
        assert_close(out, out64, dtype, scale=2.0)
        assert_close(mean_out, mean, "float32", scale=10.0)
        assert_close(rstd_out, rstd, "float32", scale=10.0)


def test_layer_norm_statistics_outputs_are_optional_and_may_use_the_input_dtype(device):
    rng = np.random.default_rng(2)
    x = random_array(rng, (5, 8), "float16")
    outputs = [TensorDesc.contiguous((5, 8), "float16"), None, TensorDesc.contiguous((5, 1), "float16")]
    out, mean, rstd = run_op(device, "LayerNorm", [x], {"normalizedShape": [8]}, outputs=outputs)
    expected, _, expected_rstd = _layer_norm(x.astype(np.float64), [8], None, None, 1e-5)
    assert mean is None
    assert_close(out, expected, "float16", scale=2.0)
    assert_close(rstd, expected_rstd, "float16", scale=2.0)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("with_rstd", [True, False])
def test_rms_norm_matches_numpy(device, dtype, with_rstd):
    rng = np.random.default_rng(3)
    x = random_array(rng, (2, 3, 8), dtype)
    gamma = random_array(rng, (8,), dtype)
    x64 = x.astype(np.float64)
    rstd = 1 / np.sqrt((x64 ** 2).mean(axis=-1, keepdims=True) + 1e-6)
    outputs = [TensorDesc.contiguous(x.shape, dtype), TensorDesc.contiguous((2, 3, 1), "float32") if with_rstd
               else None]
    for layout in ("contiguous", "strided"):
        y, rstd_out = run_op(device, "RmsNorm", [x, gamma], {}, layout=layout, outputs=outputs)
        assert_close(y, x64 * rstd * gamma.astype(np.float64), dtype, scale=2.0)
        if with_rstd:
            assert_close(rstd_out, rstd, "float32", scale=10.0)
        else:
            assert rstd_out is None


def test_rms_norm_over_two_trailing_dims(device):
    rng = np.random.default_rng(4)
    x = random_array(rng, (3, 2, 4), "float32")
    gamma = random_array(rng, (2, 4), "float32")
    y, rstd = run_op(device, "RmsNorm", [x, gamma], {"epsilon": 0.1})
    x64 = x.astype(np.float64)
    expected_rstd = 1 / np.sqrt((x64 ** 2).mean(axis=(1, 2), keepdims=True) + 0.1)
    assert rstd.shape == (3, 1, 1)
    assert_close(y, x64 * expected_rstd * gamma, "float32")
    assert_close(rstd, expected_rstd, "float32")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape,fmt", [((4, 3), Format.NC), ((2, 3, 5), Format.NCL), ((2, 3, 4, 4), Format.NCHW),
                                       ((2, 3, 4, 4), Format.ND)])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_inference_matches_numpy(device, dtype, shape, fmt, affine):
    rng = np.random.default_rng(5)
    x = random_array(rng, shape, dtype)
    weight, bias = (random_array(rng, (3,), dtype) for _ in range(2)) if affine else (None, None)
    mean = random_array(rng, (3,), "float32")
    var = random_array(rng, (3,), "float32", low=0.5, high=2)
    broadcast = (3,) + (1,) * (len(shape) - 2)
    expected = (x.astype(np.float64) - mean.reshape(broadcast)) / np.sqrt(var.reshape(broadcast) + 1e-5)
    if affine:
        expected = expected * weight.astype(np.float64).reshape(broadcast) + bias.astype(np.float64).reshape(broadcast)
    attrs = {"training": False, "momentum": 0.3, "eps": 1e-5}
    (out,) = run_op(device, "BatchNorm", [x, weight, bias, mean, var], attrs, layout="transposed", fmt=fmt)
    assert_close(out, expected, dtype, scale=2.0)


@pytest.mark.parametrize("op,arrays,attrs,expected_size", [
    ("LayerNorm", [np.ones((10, 4), np.float32)], {"normalizedShape": [4]}, 128),
    ("RmsNorm", [np.ones((10, 4), np.float16), np.ones((4,), np.float16)], {}, 64),
    ("BatchNorm", [np.ones((2, 9, 2), np.float32), None, None, np.zeros(9, np.float32), np.ones(9, np.float32)],
     {}, 128),
])
def test_norm_workspace_is_needed_and_checked(device, op, arrays, attrs, expected_size):
    call = OpCall(device, op, arrays, attrs)
    assert call.workspace_size == expected_size  # fp32 statistics, each region 32-byte aligned
    workspace = device.alloc(call.workspace_size)
    stream_a, stream_b = device.create_stream(), device.create_stream()
    with pytest.raises(InvalidArgumentError, match="smaller"):
        call.launch(stream_a, workspace, call.workspace_size - 4)
    other = OpCall(device, op, arrays, attrs)
    call.launch(stream_a, workspace)
    with pytest.raises(HazardError):
        other.launch(stream_b, workspace)
    device.sync()


def test_layer_norm_keeps_mean_and_rstd_in_the_workspace(device):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    call = OpCall(device, "LayerNorm", [x], {"normalizedShape": [4]}, outputs=[
        TensorDesc.contiguous((3, 4), "float32"), None, None])
    workspace = device.alloc(call.workspace_size)
    stream = device.create_stream()
    call.launch(stream, workspace)
    stream.sync()
    statistics = device.download(workspace, "float32", (16,))
    np.testing.assert_allclose(statistics[:3], x.mean(axis=1))
    np.testing.assert_allclose(statistics[8:11], 1 / np.sqrt(x.var(axis=1) + 1e-5), rtol=1e-6)


X = TensorDesc.contiguous((2, 3, 4), "float32")
V4 = TensorDesc.contiguous((4,), "float32")
V3 = TensorDesc.contiguous((3,), "float32")
IMAGE = TensorDesc.contiguous((2, 3, 4, 4), "float32")


@pytest.mark.parametrize("op,inputs,attrs,code,argument", [
    ("LayerNorm", [None], {"normalizedShape": [4]}, 161001, "input"),
    ("LayerNorm", [X], {}, 161001, "normalizedShape"),
    ("LayerNorm", [X], {"normalizedShape": []}, 161002, "normalizedShape"),
    ("LayerNorm", [X], {"normalizedShape": [3]}, 161002, "normalizedShape"),
    ("LayerNorm", [X], {"normalizedShape": [1, 2, 3, 4]}, 161002, "normalizedShape"),
    ("LayerNorm", [X], {"normalizedShape": "4"}, 161002, "normalizedShape"),
    ("LayerNorm", [X, V3], {"normalizedShape": [4]}, 161002, "weightOptional"),
    ("LayerNorm", [X, V4, TensorDesc.contiguous((4,), "int32")], {"normalizedShape": [4]}, 161002,
     "biasOptional"),
    ("LayerNorm", [X], {"normalizedShape": [4], "eps": -1.0}, 161002, "eps"),
    ("LayerNorm", [TensorDesc.contiguous((2, 4), "int32")], {"normalizedShape": [4]}, 161002, "input"),
    ("RmsNorm", [X, None], {}, 161001, "gamma"),
    ("RmsNorm", [X, V3], {}, 161002, "gamma"),
    ("RmsNorm", [X, TensorDesc.contiguous((4,), "float16")], {}, 161002, "gamma"),
    ("RmsNorm", [X, V4], {"epsilon": float("nan")}, 161002, "epsilon"),
    ("BatchNorm", [IMAGE, V3, V3, None, V3], {}, 161001, "runningMean"),
    ("BatchNorm", [IMAGE, V3, V3, V3, None], {}, 161001, "runningVar"),
    ("BatchNorm", [IMAGE, V3, V3, V3, V3], {"training": True}, 161002, "training"),
    ("BatchNorm", [IMAGE, V4, V3, V3, V3], {}, 161002, "weight"),
    ("BatchNorm", [TensorDesc.contiguous((2, 3, 4, 4, 4), "float32"), V3, V3, V3, V3], {}, 161002, "input"),
    ("BatchNorm", [TensorDesc.contiguous((2, 4, 4, 3), "float32", format=Format.NHWC), V3, V3, V3, V3], {},
     161002, "input"),
])
def test_phase_one_errors_name_op_and_argument(op, inputs, attrs, code, argument):
    with pytest.raises(InvalidArgumentError) as caught:
        prepare(op, inputs, attrs)
    assert caught.value.code == code
    assert f"aclnn{op}: {argument}:" in str(caught.value)


@pytest.mark.parametrize("outputs,argument", [
    ([TensorDesc.contiguous((2, 3, 4), "float16"), None, None], "out"),
    ([TensorDesc.contiguous((2, 3, 4), "float32"), TensorDesc.contiguous((2, 3), "float32"), None],
     "meanOutOptional"),
    ([TensorDesc.contiguous((2, 3, 4), "float32"), None, TensorDesc.contiguous((2, 3, 1), "int32")],
     "rstdOutOptional"),
])
def test_layer_norm_outputs_are_checked(outputs, argument):
    with pytest.raises(InvalidArgumentError, match=f"aclnnLayerNorm: {argument}:"):
        prepare("LayerNorm", [X], {"normalizedShape": [4]}, outputs)


def test_infer_describes_statistics_as_float32():
    out, mean, rstd = get_op("LayerNorm").infer(
        [TensorDesc.contiguous((2, 3, 4), "float16")], {"normalizedShape": [3, 4]})
    assert out.dtype == DType.float16 and mean.shape == rstd.shape == (2, 1, 1) and mean.dtype == DType.float32


def test_batch_norm_in_fp32_gives_the_bits_of_its_documented_steps(device):
    rng = np.random.default_rng(12)
    x = rng.standard_normal((2, 5, 4, 3)).astype(np.float32)
    weight, bias, mean = (rng.standard_normal(5).astype(np.float32) for _ in range(3))
    var = rng.uniform(0.1, 2.0, 5).astype(np.float32)
    eps = np.float32(1e-3)
    scale = weight / np.sqrt(var + eps)  # every step in fp32, as the kernel keeps them
    shift = bias - mean * scale
    expected = x * scale.reshape(5, 1, 1) + shift.reshape(5, 1, 1)
    (out,) = run_op(device, "BatchNorm", [x, weight, bias, mean, var], {"eps": 1e-3})
    np.testing.assert_array_equal(out.view(np.uint32), expected.astype(np.float32).view(np.uint32))
