"""The ops of issue 14 items 4-6 through ``load_onnx`` + ``Pipeline`` (two streams, sanitizer on)
against onnxruntime: recurrent layers, 3-D convolution and pooling, MaxPool indices, dilated
AveragePool, GroupNormalization, Einsum, gathers and scatters, and the quantized ops (bit for
bit).  ``NonZero`` folds when its input is a constant and is refused, naming the node, when
it is computed on the device."""

from __future__ import annotations

from typing import Any

import anyio
import numpy as np
import pytest
from model_kit import run_pipeline
from onnx import TensorProto, helper, numpy_helper
from onnx_peer import peer_outputs, relative_error

from aclpipe.onnx.convert_dynamic import DataDependentShapeError
from aclpipe.onnx.importer import load_onnx

RNG = np.random.default_rng(23)


def _model(op: str, inputs: list[tuple[str, Any]], outputs: int = 1, opset: int = 21, **attrs: Any) -> Any:
    """One node; ``(name, array)`` are graph inputs, ``(name, ("const", array))`` initializers."""
    graph_inputs, initializers, feeds, names = [], [], {}, []
    for name, value in inputs:
        names.append(name)
        if not name:
            continue
        if isinstance(value, tuple):
            initializers.append(numpy_helper.from_array(value[1], name))
        else:
            graph_inputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype),
                                                              list(value.shape)))
            feeds[name] = value
    out_names = [f"out{i}" for i in range(outputs)]
    graph = helper.make_graph([helper.make_node(op, names, out_names, name=f"the_{op.lower()}", **attrs)], op,
                              graph_inputs, [helper.make_empty_tensor_value_info(n) for n in out_names],
                              initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model, feeds


def _pipeline(graph: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return anyio.run(run_pipeline, graph, [feeds])[0]


def _x(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _q(dtype: str, *shape: int) -> np.ndarray:
    return RNG.integers(0 if dtype == "uint8" else -128, 256 if dtype == "uint8" else 128, shape).astype(dtype)


def _c(array: np.ndarray) -> tuple[str, np.ndarray]:
    return ("const", array)


CASES: dict[str, tuple[Any, ...]] = {
    "lstm_bidirectional": ("LSTM", [("x", _x(6, 2, 5)), ("w", _c(_x(2, 16, 5))), ("r", _c(_x(2, 16, 4))),
                                    ("b", _c(_x(2, 32))), ("lens", _c(np.array([6, 3], np.int32))),
                                    ("h", _x(2, 2, 4)), ("c", _x(2, 2, 4))], 3,
                           {"hidden_size": 4, "direction": "bidirectional"}),
    "gru_reverse": ("GRU", [("x", _x(4, 3, 5)), ("w", _c(_x(1, 12, 5))), ("r", _c(_x(1, 12, 4))),
                            ("b", _c(_x(1, 24)))], 2, {"hidden_size": 4, "direction": "reverse",
                                                       "linear_before_reset": 1}),
    "rnn_relu": ("RNN", [("x", _x(4, 3, 5)), ("w", _c(_x(1, 4, 5))), ("r", _c(_x(1, 4, 4)))], 2,
                 {"hidden_size": 4, "activations": ["Relu"]}),
    "conv_3d_asymmetric": ("Conv", [("x", _x(1, 2, 5, 6, 4)), ("w", _c(_x(3, 2, 2, 3, 2))), ("b", _c(_x(3)))], 1,
                           {"pads": [1, 0, 1, 0, 2, 0], "strides": [1, 2, 1]}),
    "conv_transpose_3d": ("ConvTranspose", [("x", _x(1, 2, 3, 4, 3)), ("w", _c(_x(2, 3, 2, 2, 2)))], 1,
                          {"strides": [2, 1, 2]}),
    "max_pool_3d": ("MaxPool", [("x", _x(2, 3, 5, 6, 7))], 1, {"kernel_shape": [2, 3, 2], "pads": [1, 1, 0, 0, 1, 1]}),
    "average_pool_3d": ("AveragePool", [("x", _x(2, 3, 5, 6, 7))], 1,
                        {"kernel_shape": [3, 3, 3], "pads": [1, 1, 1, 1, 1, 1], "count_include_pad": 0}),
    "average_pool_dilated": ("AveragePool", [("x", _x(2, 3, 9, 8))], 1,
                             {"kernel_shape": [3, 2], "dilations": [2, 3], "pads": [1, 1, 2, 1], "ceil_mode": 1}),
    "max_pool_indices": ("MaxPool", [("x", _x(2, 3, 7, 6))], 2, {"kernel_shape": [3, 3], "strides": [2, 2],
                                                               "pads": [1, 1, 1, 1]}),
    "max_pool_indices_column_major": ("MaxPool", [("x", _x(1, 2, 6, 5))], 2,
                                      {"kernel_shape": [2, 2], "storage_order": 1}),
    "global_max_pool": ("GlobalMaxPool", [("x", _x(2, 3, 4, 5))], 1, {}),
    "group_norm": ("GroupNormalization", [("x", _x(2, 6, 4, 3)), ("s", _c(_x(6))), ("b", _c(_x(6)))], 1,
                   {"num_groups": 3}),
    "instance_norm": ("InstanceNormalization", [("x", _x(2, 3, 5)), ("s", _c(_x(3))), ("b", _c(_x(3)))], 1, {}),
    "einsum_attention": ("Einsum", [("q", _x(2, 4, 8)), ("k", _x(2, 6, 8))], 1, {"equation": "bqd,bkd->bqk"}),
    "gather_nd": ("GatherND", [("x", _x(2, 4, 3)), ("i", _c(np.array([[[1], [-1]], [[0], [2]]], np.int64)))], 1,
                  {"batch_dims": 1}),
    "scatter_elements_add": ("ScatterElements", [("x", _x(4, 3)), ("i", _c(np.array([[1, -1, 0]], np.int64))),
                                                 ("u", _x(1, 3))], 1, {"axis": 0, "reduction": "add"}),
    "one_hot": ("OneHot", [("i", np.array([0, 2, -1, 5], np.int64)), ("d", _c(np.array(4, np.int64))),
                           ("v", _c(np.array([0.5, 2.0], np.float32)))], 1, {"axis": 0}),
    "cumsum_reverse_exclusive": ("CumSum", [("x", _x(3, 5)), ("a", _c(np.array(1, np.int64)))], 1,
                                 {"reverse": 1, "exclusive": 1}),
    "depth_to_space_crd": ("DepthToSpace", [("x", _x(1, 8, 2, 3))], 1, {"blocksize": 2, "mode": "CRD"}),
    "mish": ("Mish", [("x", _x(3, 4, scale=3.0))], 1, {}),
    "selu": ("Selu", [("x", _x(3, 4, scale=3.0))], 1, {"alpha": 1.5, "gamma": 0.8}),
}

QUANTIZED: dict[str, tuple[Any, ...]] = {
    "quantize_per_axis": ("QuantizeLinear", [("x", _x(2, 3, 4, scale=50.0)),
                                             ("s", _c(np.array([0.5, 0.25, 1.0], np.float32))),
                                             ("z", _c(np.array([1, -2, 0], np.int8)))], 1, {"axis": 1}),
    "dequantize": ("DequantizeLinear", [("x", _q("uint8", 3, 4)), ("s", _c(np.array(0.02, np.float32))),
                                        ("z", _c(np.array(128, np.uint8)))], 1, {}),
    "dynamic_quantize": ("DynamicQuantizeLinear", [("x", _x(4, 7, scale=3.0))], 3, {}),
    "qlinear_matmul_uint8": ("QLinearMatMul", [("a", _q("uint8", 2, 3, 16)), ("as", _c(np.array(0.05, np.float32))),
                                               ("az", _c(np.array(120, np.uint8))), ("b", _c(_q("uint8", 16, 5))),
                                               ("bs", _c(np.array(0.02, np.float32))),
                                               ("bz", _c(np.array(130, np.uint8))),
                                               ("ys", _c(np.array(0.3, np.float32))),
                                               ("yz", _c(np.array(100, np.uint8)))], 1, {}),
    "qlinear_matmul_int8_per_column": ("QLinearMatMul", [("a", _q("int8", 3, 16)),
                                                         ("as", _c(np.array(0.05, np.float32))),
                                                         ("az", _c(np.array(3, np.int8))),
                                                         ("b", _c(_q("int8", 16, 4))),
                                                         ("bs", _c(np.array([0.02, 0.01, 0.03, 0.015], np.float32))),
                                                         ("bz", _c(np.array([0, 0, 0, 0], np.int8))),
                                                         ("ys", _c(np.array(0.2, np.float32))),
                                                         ("yz", _c(np.array(-5, np.int8)))], 1, {}),
    "qlinear_conv_per_channel_bias": ("QLinearConv", [("x", _q("uint8", 1, 4, 6, 6)),
                                                      ("xs", _c(np.array(0.02, np.float32))),
                                                      ("xz", _c(np.array(128, np.uint8))),
                                                      ("w", _c((_q("int8", 3, 4, 3, 3) // 2).astype(np.int8))),
                                                      ("ws", _c(np.array([0.01, 0.02, 0.015], np.float32))),
                                                      ("wz", _c(np.zeros(3, np.int8))),
                                                      ("ys", _c(np.array(0.1, np.float32))),
                                                      ("yz", _c(np.array(100, np.uint8))),
                                                      ("b", _c(RNG.integers(-500, 500, 3).astype(np.int32)))], 1,
                                      {"pads": [1, 1, 1, 1], "strides": [2, 1]}),
    "conv_integer": ("ConvInteger", [("x", _q("uint8", 1, 2, 5, 5)), ("w", _c(_q("uint8", 3, 2, 3, 3))),
                                     ("xz", _c(np.array(7, np.uint8))), ("wz", _c(np.array(200, np.uint8)))], 1,
                     {"pads": [0, 1, 1, 0]}),
    "matmul_integer": ("MatMulInteger", [("a", _q("int8", 4, 9)), ("b", _c(_q("int8", 9, 3))),
                                         ("az", _c(np.array(-3, np.int8)))], 1, {}),
}


def _check(case: tuple[Any, ...], exact: bool) -> None:
    op, inputs, outputs, attrs = case
    model, feeds = _model(op, inputs, outputs, **attrs)
    expected = peer_outputs(model, feeds)
    got = _pipeline(load_onnx(model), feeds)
    for index, want in enumerate(expected):
        value = got[f"out{index}"]
        assert value.dtype == want.dtype and value.shape == want.shape, (value.dtype, value.shape, want.shape)
        if exact or want.dtype.kind in "iub":
            np.testing.assert_array_equal(value, want)
        else:
            assert relative_error(value, want) < 1e-5


@pytest.mark.parametrize("name", sorted(CASES))
def test_node_matches_onnxruntime(name: str) -> None:
    _check(CASES[name], exact=False)


@pytest.mark.parametrize("name", sorted(QUANTIZED))
def test_quantized_node_matches_onnxruntime_bit_for_bit(name: str) -> None:
    _check(QUANTIZED[name], exact=True)


def test_non_zero_of_a_constant_folds() -> None:
    x = np.array([[1, 0, 2], [0, 3, 0]], np.float32)
    nonzero = helper.make_node("NonZero", ["c"], ["idx"], name="find")
    cast = helper.make_node("Cast", ["idx"], ["out"], to=TensorProto.FLOAT)
    add = helper.make_node("Add", ["out", "y"], ["sum"])
    inputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])]
    graph = helper.make_graph([nonzero, cast, add], "g", inputs,
                              [helper.make_tensor_value_info("sum", TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(x, "c")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    y = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(_pipeline(load_onnx(model), {"y": y})["sum"], np.nonzero(x) + y)


def test_non_zero_of_device_data_is_refused_naming_the_node() -> None:
    # Larger than a host value may be (a small input would become one, and NonZero would fold).
    model, _ = _model("NonZero", [("x", _x(40, 40))], 1, opset=17)
    with pytest.raises(DataDependentShapeError) as caught:
        load_onnx(model)
    assert "NonZero 'the_nonzero'" in str(caught.value) and "depends on the values" in str(caught.value)
