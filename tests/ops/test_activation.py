"""Activations and softmax on the simulator, including how softmax uses its workspace."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import FLOAT_DTYPES, INT_DTYPES, OpCall, assert_close, prepare, random_array, run_op

from aclpipe.errors import HazardError, InvalidArgumentError
from aclpipe.tensor import TensorDesc

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


POINTWISE = [
    ("Relu", {}, lambda x: np.maximum(x, 0), (*FLOAT_DTYPES, "int8", "int32", "int64", "uint8")),
    ("Gelu", {}, _gelu, FLOAT_DTYPES),
    ("GeluV2", {"approximate": 0}, _gelu, FLOAT_DTYPES),
    ("GeluV2", {"approximate": "none"}, _gelu, ("float32",)),
    ("GeluV2", {"approximate": 1}, _gelu_tanh, FLOAT_DTYPES),
    ("GeluV2", {"approximate": "tanh"}, _gelu_tanh, ("float32",)),
    ("Silu", {}, lambda x: x * _sigmoid(x), FLOAT_DTYPES),
    ("Sigmoid", {}, _sigmoid, (*FLOAT_DTYPES, *INT_DTYPES, "bool")),
    ("Tanh", {}, np.tanh, (*FLOAT_DTYPES, *INT_DTYPES, "bool")),
]


@pytest.mark.parametrize("op,attrs,function,dtype", [(op, attrs, f, d) for op, attrs, f, dtypes in POINTWISE
                                                     for d in dtypes])
def test_pointwise_activations_match_numpy(device, op, attrs, function, dtype):
    rng = np.random.default_rng(11)
    x = random_array(rng, (4, 6), dtype, low=-4, high=4)
    result = dtype if dtype in FLOAT_DTYPES or op == "Relu" else "float32"
    expected = function(x.astype(np.float64))
    for layout in ("contiguous", "transposed"):
        (out,) = run_op(device, op, [x], attrs, layout=layout)
        assert_close(out, expected, result, scale=2.0)


def _softmax(x: np.ndarray, dim: int) -> np.ndarray:
    shifted = x - x.max(axis=dim, keepdims=True)
    return np.exp(shifted) / np.exp(shifted).sum(axis=dim, keepdims=True)


def _log_softmax(x: np.ndarray, dim: int) -> np.ndarray:
    shifted = x - x.max(axis=dim, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=dim, keepdims=True))


@pytest.mark.parametrize("op,reference", [("Softmax", _softmax), ("LogSoftmax", _log_softmax)])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_softmax_matches_numpy_along_any_dim(device, op, reference, dtype, dim):
    rng = np.random.default_rng(2)
    x = random_array(rng, (3, 4, 5), dtype, low=-6, high=6)
    expected = reference(x.astype(np.float64), dim)
    for layout in ("contiguous", "strided", "transposed"):
        (out,) = run_op(device, op, [x], {"dim": dim}, layout=layout)
        assert_close(out, expected, dtype, scale=2.0)


@pytest.mark.parametrize("layout", ["view", "strided"])
def test_float32_sigmoid_is_the_plain_formula_bit_for_bit(device, layout):
    # computed in place in the output view: the same float32 steps as 1 / (1 + exp(-x))
    x = (np.random.default_rng(5).standard_normal((3, 40)) * 30).astype(np.float32)
    x[0, :5] = [np.inf, -np.inf, np.nan, -100.0, 0.0]
    (got,) = run_op(device, "Sigmoid", [x], layout=layout)
    with np.errstate(over="ignore"):
        expected = np.float32(1) / (np.float32(1) + np.exp(-x))
    np.testing.assert_array_equal(got, expected)


def test_softmax_is_stable_for_large_logits_and_handles_scalars(device):
    x = np.array([[1000.0, 1000.0], [-1000.0, 0.0]], dtype=np.float32)
    (out,) = run_op(device, "Softmax", [x], {"dim": 1})
    np.testing.assert_allclose(out, [[0.5, 0.5], [0.0, 1.0]])
    (scalar,) = run_op(device, "LogSoftmax", [np.array(3.0, dtype=np.float32)], {"dim": 0})
    assert scalar.shape == () and scalar == 0.0


def test_softmax_statistics_live_in_the_workspace(device):
    rng = np.random.default_rng(4)
    x = random_array(rng, (6, 7), "float32")
    call = OpCall(device, "Softmax", [x], {"dim": 1})
    assert call.workspace_size == 64  # row max and row sum: 6 fp32 each, 32-byte aligned regions
    workspace = device.alloc(call.workspace_size)
    stream = device.create_stream()
    call.launch(stream, workspace)
    stream.sync()
    statistics = device.download(workspace, "float32", (16,))
    np.testing.assert_allclose(statistics[:6], x.max(axis=1))
    np.testing.assert_allclose(statistics[8:14], np.exp(x - x.max(axis=1, keepdims=True)).sum(axis=1), rtol=1e-6)
    assert_close(call.results()[0], _softmax(x.astype(np.float64), 1), "float32")


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_a_short_or_null_workspace_is_refused_at_launch(device, op):
    x = np.ones((4, 8), dtype=np.float16)
    call = OpCall(device, op, [x], {"dim": -1})
    workspace = device.alloc(call.workspace_size)
    stream = device.create_stream()
    with pytest.raises(InvalidArgumentError, match="smaller"):
        call.launch(stream, workspace, call.workspace_size - 1)
    with pytest.raises(InvalidArgumentError) as caught:
        call.launch(stream, None)
    assert caught.value.code == 161001


def test_a_workspace_shared_by_unordered_streams_is_a_hazard(device):
    x = np.ones((4, 8), dtype=np.float32)
    first, second = (OpCall(device, "Softmax", [x], {"dim": 1}) for _ in range(2))
    workspace = device.alloc(first.workspace_size)
    stream_a, stream_b = device.create_stream(), device.create_stream()
    first.launch(stream_a, workspace)
    with pytest.raises(HazardError, match="aclnnSoftmax"):
        second.launch(stream_b, workspace)
    device.sync()  # the refused launch's reads were recorded: order them before the frees


def test_a_workspace_shared_in_stream_order_is_fine(device):
    rng = np.random.default_rng(9)
    arrays = [random_array(rng, (5, 3), "float32") for _ in range(2)]
    calls = [OpCall(device, "LogSoftmax", [a], {"dim": 0}) for a in arrays]
    workspace = device.alloc(calls[0].workspace_size)
    stream_a, stream_b = device.create_stream(), device.create_stream()
    calls[0].launch(stream_a, workspace)
    stream_b.wait(stream_a.record())
    calls[1].launch(stream_b, workspace)
    stream_b.sync()
    for call, array in zip(calls, arrays):
        assert_close(call.results()[0], _log_softmax(array.astype(np.float64), 0), "float32")


F32 = TensorDesc.contiguous((2, 3), "float32")


@pytest.mark.parametrize("op,inputs,attrs,code,argument", [
    ("Relu", [None], {}, 161001, "self"),
    ("Softmax", [None], {}, 161001, "self"),
    ("Relu", [TensorDesc.contiguous((2,), "bool")], {}, 161002, "self"),
    ("Gelu", [TensorDesc.contiguous((2,), "int32")], {}, 161002, "self"),
    ("Silu", [TensorDesc.contiguous((2,), "int8")], {}, 161002, "self"),
    ("GeluV2", [F32], {"approximate": 2}, 161002, "approximate"),
    ("GeluV2", [F32], {"approximate": "erf"}, 161002, "approximate"),
    ("Softmax", [F32], {"dim": 2}, 161002, "dim"),
    ("LogSoftmax", [F32], {"dim": -3}, 161002, "dim"),
    ("Softmax", [F32], {"dim": 1.0}, 161002, "dim"),
    ("Softmax", [TensorDesc.contiguous((2, 3), "int32")], {}, 161002, "self"),
])
def test_phase_one_errors_name_op_and_argument(op, inputs, attrs, code, argument):
    with pytest.raises(InvalidArgumentError) as caught:
        prepare(op, inputs, attrs)
    assert caught.value.code == code
    assert f"aclnn{op}: {argument}:" in str(caught.value)


@pytest.mark.parametrize("out", [TensorDesc.contiguous((3, 2), "float32"), TensorDesc.contiguous((2, 3), "float16")])
def test_softmax_output_must_match(out):
    with pytest.raises(InvalidArgumentError, match="aclnnSoftmax: out:"):
        prepare("Softmax", [F32], {"dim": 0}, [out])
