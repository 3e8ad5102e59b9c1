"""LSTM, GRU and RNN on the simulator against onnxruntime on random inputs (sanitizer on)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import OpCall, desc, prepare, run_op
from ort_single import ort_node

from aclpipe.errors import DeviceFault, InvalidArgumentError

RNG = np.random.default_rng(5)
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _case(op, steps=5, batch=3, size=4, hidden=6, directions=1, bias=True, lens=None, initial=True, peephole=False):
    gates = GATES[op]
    rand = lambda *shape: (RNG.standard_normal(shape) * 0.5).astype(np.float32)
    arrays = [rand(steps, batch, size), rand(directions, gates * hidden, size),
              rand(directions, gates * hidden, hidden),
              rand(directions, 2 * gates * hidden) if bias else None, lens,
              rand(directions, batch, hidden) if initial else None]
    if op == "LSTM":
        arrays += [rand(directions, batch, hidden) if initial else None, rand(directions, 3 * hidden) if peephole
                   else None]
    while arrays and arrays[-1] is None:
        arrays.pop()
    return arrays


def _compare(device, op, arrays, onnx_attrs, catalog_attrs, outputs):
    expected = ort_node(op, arrays, outputs=outputs, **onnx_attrs)
    got = run_op(device, op, arrays, catalog_attrs)
    for index, want in enumerate(expected):
        np.testing.assert_allclose(got[index], want, rtol=2e-5, atol=2e-6, err_msg=f"{op} output {index}")


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_matches_onnxruntime_in_every_direction(device, op, direction):
    directions = 2 if direction == "bidirectional" else 1
    arrays = _case(op, directions=directions)
    _compare(device, op, arrays, {"hidden_size": 6, "direction": direction},
             {"hiddenSize": 6, "direction": direction}, 3 if op == "LSTM" else 2)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_sequence_lengths_stop_each_batch_entry(device, op):
    lens = np.array([5, 2, 0], np.int32)
    arrays = _case(op, directions=2, lens=lens)
    _compare(device, op, arrays, {"hidden_size": 6, "direction": "bidirectional"},
             {"hiddenSize": 6, "direction": "bidirectional"}, 3 if op == "LSTM" else 2)


def test_lstm_peepholes_clip_input_forget_and_activations(device):
    arrays = _case("LSTM", peephole=True)
    activations = ["HardSigmoid", "LeakyRelu", "ScaledTanh"]
    _compare(device, "LSTM", arrays,
             {"hidden_size": 6, "clip": 0.7, "input_forget": 1, "activations": activations,
              "activation_alpha": [0.3, 0.05, 1.5], "activation_beta": [0.4, 0.8]},
             {"hiddenSize": 6, "clip": 0.7, "inputForget": 1, "activations": activations,
              "activationAlpha": [0.3, 0.05, 1.5], "activationBeta": [0.4, 0.8]}, 3)


@pytest.mark.parametrize("linear", [0, 1])
def test_gru_linear_before_reset_and_no_bias_or_state(device, linear):
    arrays = _case("GRU", bias=False, initial=False)
    _compare(device, "GRU", arrays, {"hidden_size": 6, "linear_before_reset": linear},
             {"hiddenSize": 6, "linearBeforeReset": linear}, 2)


def test_batch_first_layout_transposes_inputs_and_outputs(device):
    # onnxruntime refuses layout=1; it must equal layout 0 on the transposed tensors.
    arrays = _case("LSTM", directions=2)
    attrs = {"hiddenSize": 6, "direction": "bidirectional"}
    y, yh, yc = run_op(device, "LSTM", arrays, attrs)
    batch_first = list(arrays)
    for index in (0, 5, 6):
        batch_first[index] = np.ascontiguousarray(arrays[index].transpose(1, 0, 2))
    y1, yh1, yc1 = run_op(device, "LSTM", batch_first, {**attrs, "layout": 1})
    np.testing.assert_allclose(y1, y.transpose(2, 0, 1, 3), rtol=1e-6)
    np.testing.assert_allclose(yh1, yh.transpose(1, 0, 2), rtol=1e-6)
    np.testing.assert_allclose(yc1, yc.transpose(1, 0, 2), rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_inputs_compute_in_float32(device, dtype):
    arrays = _case("GRU")
    reference = run_op(device, "GRU", arrays, {"hiddenSize": 6})
    half = [None if a is None else a.astype(dtype) for a in arrays]
    got = run_op(device, "GRU", half, {"hiddenSize": 6})
    assert got[0].dtype == np.dtype(half[0].dtype)
    np.testing.assert_allclose(got[0].astype(np.float32), reference[0], atol=0.05)


def test_strided_input_is_read_as_its_values(device):
    arrays = _case("LSTM")
    wide = np.zeros(arrays[0].shape[:2] + (2 * arrays[0].shape[2],), np.float32)
    wide[..., ::2] = arrays[0]
    strided = [wide[..., ::2], *arrays[1:]]
    np.testing.assert_allclose(run_op(device, "LSTM", strided, {"hiddenSize": 6})[0],
                               run_op(device, "LSTM", arrays, {"hiddenSize": 6})[0], rtol=1e-6)


def test_workspace_holds_projections_and_states(device):
    arrays = _case("LSTM", steps=5, batch=3, hidden=6)
    call = OpCall(device, "LSTM", arrays, {"hiddenSize": 6})
    # float32 projections (5*3*4*6), state (3*6), gates (3*4*6), cell (3*6), each 32-byte aligned
    assert call.workspace_size == 1440 + 96 + 288 + 96
    workspace = device.alloc(call.workspace_size)
    stream = device.create_stream()
    with pytest.raises(InvalidArgumentError, match="smaller"):
        call.launch(stream, workspace, call.workspace_size - 4)
    call.close()


def test_sequence_length_out_of_range_fails_the_launch(device):
    arrays = _case("RNN", lens=np.array([5, 9, 1], np.int32))
    with pytest.raises(DeviceFault, match=r"sequenceLens\[1\] = 9"):
        run_op(device, "RNN", arrays, {"hiddenSize": 6})


X = desc((5, 3, 4))
W, R = desc((1, 24, 4)), desc((1, 24, 6))


@pytest.mark.parametrize("inputs,attrs,code,argument", [
    ([X, W, R], {}, 161001, "hiddenSize"),
    ([X, None, R], {"hiddenSize": 6}, 161001, "W"),
    ([desc((5, 4)), W, R], {"hiddenSize": 6}, 161002, "X"),
    ([X, desc((1, 20, 4)), R], {"hiddenSize": 6}, 161002, "W"),
    ([X, W, R, desc((1, 47))], {"hiddenSize": 6}, 161002, "B"),
    ([X, W, R, None, desc((2,), "int32")], {"hiddenSize": 6}, 161002, "sequenceLens"),
    ([X, W, R, None, desc((3,), "float32")], {"hiddenSize": 6}, 161002, "sequenceLens"),
    ([X, W, R], {"hiddenSize": 6, "direction": "sideways"}, 161002, "direction"),
    ([X, W, R], {"hiddenSize": 6, "activations": ["Sigmoid", "Tanh"]}, 161002, "activations"),
    ([X, W, R], {"hiddenSize": 6, "activations": ["Sigmoid", "Gelu", "Tanh"]}, 161002, "activations"),
    ([X, W, R], {"hiddenSize": 6, "clip": -1.0}, 161002, "clip"),
    ([desc((5, 3, 4), "int32"), W, R], {"hiddenSize": 6}, 161002, "X"),
])
def test_phase_one_errors_name_the_argument(inputs, attrs, code, argument):
    with pytest.raises(InvalidArgumentError) as caught:
        prepare("LSTM", inputs, attrs)
    assert caught.value.code == code
    assert f"aclnnLSTM: {argument}:" in str(caught.value)


def test_output_shapes_follow_layout_and_direction():
    from aclpipe.ops import get_op

    y, yh, yc = get_op("LSTM").infer([desc((3, 5, 4)), desc((2, 24, 4)), desc((2, 24, 6))],
                                     {"hiddenSize": 6, "direction": "bidirectional", "layout": 1})
    assert y.shape == (3, 5, 2, 6) and yh.shape == yc.shape == (3, 2, 6)
