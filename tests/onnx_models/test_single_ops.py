"""One ONNX node at a time through load_onnx + Pipeline, against onnxruntime: the ops the issue
lists, with their attribute forms across opsets (Gemm with every attribute, Softmax before and
after opset 13, Clip, comparisons, Where broadcasting, Resize modes, ConvTranspose pads, Pad
modes, Tile, Range, reductions, ArgMax, TopK, Identity, Dropout)."""

from __future__ import annotations

from typing import Any

import anyio
import numpy as np
import pytest
from model_kit import run_pipeline
from onnx import TensorProto, helper, numpy_helper
from onnx_peer import peer_outputs, relative_error

from aclpipe.onnx.importer import load_onnx

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
RNG = np.random.default_rng(21)


def _case(op: str, inputs: list[tuple[str, Any]], outputs: int = 1, opset: int = 17, **attrs: Any) -> Any:
    """A one-node model: arrays become graph inputs, (name, array, "const") initializers."""
    graph_inputs, initializers, feeds, names = [], [], {}, []
    for name, value in inputs:
        if name == "":
            names.append("")
            continue
        names.append(name)
        if isinstance(value, tuple):  # ("const", array): an initializer
            initializers.append(numpy_helper.from_array(value[1], name))
        else:
            elem = {np.dtype(np.float32): F, np.dtype(np.int64): I64, np.dtype(np.bool_): B}[value.dtype]
            graph_inputs.append(helper.make_tensor_value_info(name, elem, list(value.shape)))
            feeds[name] = value
    out_names = [f"out{i}" for i in range(outputs)]
    node = helper.make_node(op, names, out_names, **attrs)
    graph = helper.make_graph([node], op, graph_inputs, [helper.make_empty_tensor_value_info(n) for n in out_names],
                              initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8 if opset <= 17 else 9 if opset <= 20 else 10
    return model, feeds


def _x(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _const(array: np.ndarray) -> tuple[str, np.ndarray]:
    return ("const", array)


def _ints(*values: int) -> tuple[str, np.ndarray]:
    return _const(np.array(values, np.int64))


CASES: dict[str, tuple[Any, ...]] = {
    # Gemm: every attribute, C of every broadcastable shape, and C absent.
    "gemm_plain": ("Gemm", [("a", _x(3, 4)), ("b", _x(4, 5))], 1, 11, {}),
    "gemm_transA_transB_alpha_beta": ("Gemm", [("a", _x(4, 3)), ("b", _x(5, 4)), ("c", _x(3, 5))], 1, 13,
                                      {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}),
    "gemm_c_vector": ("Gemm", [("a", _x(3, 4)), ("b", _x(4, 5)), ("c", _x(5))], 1, 13, {"beta": 0.5}),
    "gemm_c_column": ("Gemm", [("a", _x(3, 4)), ("b", _x(4, 5)), ("c", _x(3, 1))], 1, 13, {}),
    "gemm_c_scalar": ("Gemm", [("a", _x(3, 4)), ("b", _x(4, 5)), ("c", _x())], 1, 13, {"alpha": 3.0}),
    "gemm_beta_zero": ("Gemm", [("a", _x(3, 4)), ("b", _x(4, 5)), ("c", _x(3, 5))], 1, 13, {"beta": 0.0}),
    "gemm_const_weight": ("Gemm", [("a", _x(2, 6)), ("b", _const(_x(3, 6))), ("c", _const(_x(3)))], 1, 11,
                          {"transB": 1}),
    # Softmax / LogSoftmax: opset 11 coerces to 2-D at axis, 13 normalizes one axis.
    "softmax_11_axis1": ("Softmax", [("x", _x(2, 3, 4))], 1, 11, {"axis": 1}),
    "logsoftmax_11_default": ("LogSoftmax", [("x", _x(2, 3, 4))], 1, 11, {}),
    "softmax_13_axis1": ("Softmax", [("x", _x(2, 3, 4))], 1, 13, {"axis": 1}),
    "logsoftmax_13_default": ("LogSoftmax", [("x", _x(2, 3, 4))], 1, 13, {}),
    # Clip input forms; comparisons and logic; Where broadcasting.
    "clip_both": ("Clip", [("x", _x(3, 4)), ("lo", _const(np.float32(-0.5))), ("hi", _const(np.float32(0.7)))],
                  1, 13, {}),
    "clip_max_only": ("Clip", [("x", _x(3, 4)), ("", None), ("hi", _const(np.float32(0.1)))], 1, 12, {}),
    "clip_device_bounds": ("Clip", [("x", _x(3, 4)), ("lo", _x()), ("hi", _x())], 1, 11, {}),
    "equal": ("Equal", [("a", RNG.integers(0, 3, (3, 4))), ("b", RNG.integers(0, 3, (4,)))], 1, 13, {}),
    "less": ("Less", [("a", _x(3, 4)), ("b", _x(3, 1))], 1, 13, {}),
    "greater_or_equal": ("GreaterOrEqual", [("a", _x(3, 4)), ("b", _x(1, 4))], 1, 16, {}),
    "and": ("And", [("a", RNG.random((3, 4)) < 0.5), ("b", RNG.random((4,)) < 0.5)], 1, 13, {}),
    "not": ("Not", [("a", RNG.random((3, 4)) < 0.5)], 1, 13, {}),
    "where_broadcast": ("Where", [("c", RNG.random((3, 1, 4)) < 0.5), ("a", _x(2, 1)), ("b", _x(1, 4))], 1, 16, {}),
    # Activations.
    "hard_sigmoid": ("HardSigmoid", [("x", _x(3, 4) * 4)], 1, 13, {"alpha": 0.3, "beta": 0.4}),
    "hard_swish": ("HardSwish", [("x", _x(3, 4) * 4)], 1, 14, {}),
    "leaky_relu": ("LeakyRelu", [("x", _x(3, 4))], 1, 16, {"alpha": 0.2}),
    "prelu_channel": ("PRelu", [("x", _x(2, 3, 4, 4)), ("s", _const(_x(3, 1, 1)))], 1, 16, {}),
    "prelu_general": ("PRelu", [("x", _x(2, 3, 4)), ("s", _const(_x(3, 4)))], 1, 16, {}),
    # Resize: modes and coordinate transforms, sizes and scales.
    "resize_nearest_asymmetric": ("Resize", [("x", _x(1, 2, 3, 5)), ("", None),
                                             ("s", _const(np.float32([1, 1, 2, 3])))], 1, 13,
                                  {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                                   "nearest_mode": "floor"}),
    "resize_linear_align_corners": ("Resize", [("x", _x(1, 2, 3, 5)), ("", None), ("", None),
                                               ("n", _ints(1, 2, 7, 4))], 1, 13,
                                    {"mode": "linear", "coordinate_transformation_mode": "align_corners"}),
    "resize_linear_pytorch": ("Resize", [("x", _x(1, 2, 4, 6)), ("r", _const(np.zeros(0, np.float32))),
                                         ("s", _const(np.float32([1, 1, 0.5, 1.5])))], 1, 11,
                              {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}),
    "resize_cubic_axes": ("Resize", [("x", _x(1, 2, 4, 6)), ("", None), ("", None), ("n", _ints(8, 5))], 1, 18,
                          {"mode": "cubic", "axes": [2, 3]}),
    # ConvTranspose with pads, output_padding, output_shape, auto_pad, groups.
    "convtranspose_pads": ("ConvTranspose", [("x", _x(1, 2, 4, 5)), ("w", _const(_x(2, 3, 3, 3)))], 1, 11,
                           {"strides": [2, 2], "pads": [1, 0, 0, 2], "output_padding": [1, 1]}),
    "convtranspose_output_shape": ("ConvTranspose", [("x", _x(1, 2, 3, 3)), ("w", _const(_x(2, 1, 3, 3))),
                                                     ("bias", _const(_x(1)))], 1, 11,
                                   {"strides": [3, 2], "output_shape": [10, 8]}),
    "convtranspose_same_upper_groups": ("ConvTranspose", [("x", _x(2, 4, 3, 3)), ("w", _const(_x(4, 2, 2, 2)))],
                                        1, 22, {"strides": [2, 2], "auto_pad": "SAME_UPPER", "group": 2}),
    # Pad modes, Tile, Range.
    "pad_constant": ("Pad", [("x", _x(2, 3)), ("p", _ints(0, 1, 1, 2)), ("v", _const(np.float32(0.5)))], 1, 13,
                     {"mode": "constant"}),
    "pad_reflect": ("Pad", [("x", _x(1, 2, 4, 5)), ("p", _ints(0, 0, 2, 1, 0, 0, 1, 3))], 1, 13, {"mode": "reflect"}),
    "pad_edge_axes": ("Pad", [("x", _x(2, 3, 4)), ("p", _ints(1, 2, 2, 0)), ("", None), ("ax", _ints(1, -1))], 1, 18,
                      {"mode": "edge"}),
    "tile": ("Tile", [("x", _x(2, 3)), ("r", _ints(2, 3))], 1, 13, {}),
    # Reductions, arg extremes, TopK.
    "reduce_min_axes_input": ("ReduceMin", [("x", _x(3, 4, 5)), ("ax", _ints(0, 2))], 1, 18, {"keepdims": 0}),
    "reduce_prod": ("ReduceProd", [("x", _x(3, 4))], 1, 13, {"axes": [1]}),
    "reduce_l2": ("ReduceL2", [("x", _x(3, 4, 5))], 1, 13, {"axes": [-1], "keepdims": 1}),
    "reduce_log_sum_exp": ("ReduceLogSumExp", [("x", _x(3, 4) * 20)], 1, 18, {}),
    "argmax_last_index": ("ArgMax", [("x", RNG.integers(0, 3, (3, 6)).astype(np.float32))], 1, 13,
                          {"axis": 1, "select_last_index": 1}),
    "argmin": ("ArgMin", [("x", _x(3, 6))], 1, 13, {"axis": 0, "keepdims": 0}),
    "topk_smallest": ("TopK", [("x", _x(3, 6)), ("k", _ints(2))], 2, 11, {"axis": 1, "largest": 0}),
    # Pass-through.
    "identity": ("Identity", [("x", _x(2, 3))], 1, 16, {}),
    "dropout_inference": ("Dropout", [("x", _x(2, 3))], 2, 13, {}),
}


def _run(graph: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return anyio.run(run_pipeline, graph, [feeds])[0]


@pytest.mark.parametrize("case", list(CASES))
def test_node_matches_onnxruntime(case: str) -> None:
    op, inputs, outputs, opset, attrs = CASES[case]
    model, feeds = _case(op, inputs, outputs, opset, **attrs)
    expected = peer_outputs(model, feeds)
    got = _run(load_onnx(model), feeds)
    for index, want in enumerate(expected):
        value = got[f"out{index}"]
        assert value.dtype == want.dtype and value.shape == want.shape, (value.dtype, value.shape, want.shape)
        if want.dtype.kind in "iub":
            np.testing.assert_array_equal(value, want)
        else:
            assert relative_error(value, want) < 1e-5


def test_range_folds_to_a_constant_from_shapes() -> None:
    model, feeds = _case("Range", [("a", _const(np.int64(2))), ("b", _const(np.int64(11))),
                                   ("d", _const(np.int64(3)))], 1, 11)
    graph = load_onnx(model)
    assert [node.op for node in graph.nodes] == ["InplaceCopy"]  # the constant, copied out
    np.testing.assert_array_equal(_run(graph, feeds)["out0"], [2, 5, 8])
