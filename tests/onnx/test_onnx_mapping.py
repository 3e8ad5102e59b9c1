"""The ONNX mapping: per-opset semantics against onnx's reference evaluator, the unsupported-op
error, and the context interface a graph-building context implements."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import aclpipe
from aclpipe.dtypes import as_dtype
from aclpipe.eager.onnx_eval import EagerContext
from aclpipe.errors import UnsupportedOpError
from aclpipe.onnx import UnsupportedFeature, check_model, emit_graph, lookup, model_opsets, supported_ops
from aclpipe.onnx.context import DTYPE_TO_ONNX
from aclpipe.ops import get_op
from aclpipe.tensor import TensorDesc

RNG = np.random.default_rng(7)


@pytest.fixture(scope="module")
def eager():
    device = aclpipe.open_device("sim", sanitizer=True)
    with EagerContext(device) as context:
        yield context
    device.close()


def _info(name: str, array: np.ndarray) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, DTYPE_TO_ONNX[as_dtype(array.dtype)], array.shape)


def node_model(op_type: str, opset: int, inputs: dict[str, np.ndarray | None], outputs: int = 1,
               constants: dict[str, np.ndarray] | None = None, **attrs: Any) -> tuple[onnx.ModelProto, dict]:
    """A one-node model: ``inputs`` are graph inputs (None: an absent optional input),
    ``constants`` initializers (structure inputs such as shapes and axes)."""
    constants = constants or {}
    names = list(inputs) + list(constants)
    order = list(names)
    node = helper.make_node(op_type, [n if (inputs.get(n) is not None or n in constants) else "" for n in order],
                            [f"y{i}" for i in range(outputs)], **attrs)
    graph = helper.make_graph(
        [node], "case", [_info(n, a) for n, a in inputs.items() if a is not None], [
            helper.make_tensor_value_info(f"y{i}", onnx.TensorProto.UNDEFINED, None) for i in range(outputs)],
        [onnx.numpy_helper.from_array(a, n) for n, a in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model, {n: a for n, a in inputs.items() if a is not None}


def agree(eager: EagerContext, model: onnx.ModelProto, feeds: dict, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    expected = ReferenceEvaluator(model).run(None, feeds)
    got = eager.run_model(model, feeds)
    assert len(got) == len(expected)
    for ours, theirs in zip(got, expected):
        theirs = np.asarray(theirs)
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, (ours.shape, ours.dtype, theirs.shape,
                                                                          theirs.dtype)
        if theirs.dtype.kind == "f":
            np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(ours, theirs)


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


# -- every opset 11..21 -------------------------------------------------------------------------
UNARY = ["Neg", "Abs", "Exp", "Sqrt", "Reciprocal", "Erf", "Relu", "Sigmoid", "Tanh", "Identity", "Log"]


@pytest.mark.parametrize("opset", range(11, 22))
@pytest.mark.parametrize("op_type", UNARY)
def test_unary_ops_at_every_opset(eager, op_type, opset):
    x = np.abs(f32(2, 3)) + 0.1 if op_type in ("Sqrt", "Log", "Reciprocal") else f32(2, 3)
    agree(eager, *node_model(op_type, opset, {"x": x}))


@pytest.mark.parametrize("opset", range(11, 22))
@pytest.mark.parametrize("op_type", ["Add", "Sub", "Mul", "Div", "Pow"])
def test_binary_ops_at_every_opset(eager, op_type, opset):
    a = np.abs(f32(2, 3, 4)) + 0.5
    agree(eager, *node_model(op_type, opset, {"a": a, "b": f32(3, 1) if op_type != "Pow" else f32(4)}), rtol=1e-5)


@pytest.mark.parametrize("opset", [11, 14])
def test_integer_division_truncates_toward_zero(eager, opset):
    a, b = np.array([7, -7, 7, -7, 9], np.int32), np.array([2, 2, -2, -2, 3], np.int32)
    agree(eager, *node_model("Div", opset, {"a": a, "b": b}))


@pytest.mark.parametrize("opset", [12, 15])
def test_pow_keeps_the_base_type(eager, opset):
    agree(eager, *node_model("Pow", opset, {"a": np.array([1, 2, 3], np.int64), "b": np.array([2.0], np.float32)}))


def _softmax(x: np.ndarray, axes: tuple[int, ...], log: bool) -> np.ndarray:
    shifted = x - x.max(axis=axes, keepdims=True)
    total = np.exp(shifted).sum(axis=axes, keepdims=True)
    return (shifted - np.log(total) if log else np.exp(shifted) / total).astype(np.float32)


@pytest.mark.parametrize("opset", [11, 12, 13, 21])
@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
def test_softmax_coerces_to_2d_before_13_and_uses_the_axis_after(eager, op_type, opset):
    # onnx's reference evaluator implements only the opset-13 form, so the expected values
    # come from the spec: before 13 the input is [prod(shape[:axis]), prod(shape[axis:])].
    x = f32(2, 3, 4)
    for axis, default_axes in ((1, (1, 2)), (None, (1, 2) if opset < 13 else (2,))):
        attrs = {} if axis is None else {"axis": axis}
        axes = default_axes if axis is None else ((1, 2) if opset < 13 else (1,))
        model, feeds = node_model(op_type, opset, {"x": x}, **attrs)
        (got,) = eager.run_model(model, feeds)
        np.testing.assert_allclose(got, _softmax(x, axes, op_type == "LogSoftmax"), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opset", [11, 13, 21])
def test_variadic_max_min_sum(eager, opset):
    inputs = {"a": f32(2, 3), "b": f32(3), "c": f32(1, 3)}
    for op_type in ("Max", "Min", "Sum"):
        agree(eager, *node_model(op_type, opset, inputs))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_opset_20(eager, approximate):
    agree(eager, *node_model("Gelu", 20, {"x": f32(3, 5)}, approximate=approximate))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_layer_normalization_with_statistics(eager, axis):
    x = f32(2, 3, 4)
    normalized = x.shape[axis % 3:]
    inputs = {"x": x, "scale": f32(*normalized), "bias": f32(*normalized)}
    agree(eager, *node_model("LayerNormalization", 17, inputs, outputs=3, axis=axis, epsilon=1e-3), atol=1e-5)


@pytest.mark.parametrize("opset", [11, 15, 21])
@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 4, 5), (2, 3, 2, 2, 2)])
def test_batch_normalization_inference(eager, opset, shape):
    # onnx's reference treats opset 9-13 as training when momentum has its default; the spec
    # makes a single-output node inference, so the expected values are computed here.
    c = shape[1]
    inputs = {"x": f32(*shape), "scale": f32(c), "bias": f32(c), "mean": f32(c), "var": np.abs(f32(c)) + 0.5}
    model, feeds = node_model("BatchNormalization", opset, inputs, epsilon=1e-3)
    (got,) = eager.run_model(model, feeds)
    per_channel = (1, c) + (1,) * (len(shape) - 2)
    scale, bias, mean, var = (inputs[k].reshape(per_channel) for k in ("scale", "bias", "mean", "var"))
    expected = (inputs["x"] - mean) / np.sqrt(var + 1e-3) * scale + bias
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opset", [11, 13, 21])
@pytest.mark.parametrize("attrs", [{}, {"transA": 1}, {"transB": 1},
                                   {"alpha": 0.25, "beta": 0.35, "transA": 1, "transB": 1}])
@pytest.mark.parametrize("bias", ["none", "vector", "matrix", "scalar"])
def test_gemm(eager, opset, attrs, bias):
    a = f32(4, 3) if attrs.get("transA") else f32(3, 4)
    b = f32(5, 4) if attrs.get("transB") else f32(4, 5)
    c = {"none": None, "vector": f32(5), "matrix": f32(3, 5), "scalar": f32(1)}[bias]
    agree(eager, *node_model("Gemm", opset, {"a": a, "b": b, "c": c}, **attrs), atol=1e-5)


@pytest.mark.parametrize("shapes", [((3, 4), (4, 5)), ((2, 3, 4), (4,)), ((4,), (2, 4, 3)), ((2, 1, 3, 4), (5, 4, 2))])
def test_matmul_numpy_semantics(eager, shapes):
    agree(eager, *node_model("MatMul", 13, {"a": f32(*shapes[0]), "b": f32(*shapes[1])}), atol=1e-5)


@pytest.mark.parametrize("opset", [11, 21])
@pytest.mark.parametrize("attrs", [
    {"pads": [1, 1, 1, 1]}, {"pads": [1, 0, 2, 1], "strides": [2, 2]}, {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"auto_pad": "SAME_LOWER", "strides": [2, 1]}, {"auto_pad": "VALID", "dilations": [2, 2]},
    {"group": 2, "pads": [1, 1, 1, 1]}])
def test_conv_2d(eager, opset, attrs):
    groups = attrs.get("group", 1)
    inputs = {"x": f32(1, 4, 7, 6), "w": f32(6, 4 // groups, 3, 3), "b": f32(6)}
    agree(eager, *node_model("Conv", opset, inputs, kernel_shape=[3, 3], **attrs), atol=1e-4)


def test_conv_1d_without_bias(eager):
    agree(eager, *node_model("Conv", 13, {"x": f32(2, 3, 9), "w": f32(4, 3, 2)}, pads=[0, 1], strides=[2]),
          atol=1e-5)


@pytest.mark.parametrize("opset", [11, 12, 21])
@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, {"kernel_shape": [3, 3], "pads": [2, 2, 2, 2]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, {"kernel_shape": [2, 3], "pads": [0, 1, 1, 0]},
    {"kernel_shape": [2, 2], "auto_pad": "SAME_LOWER"}, {"kernel_shape": [3, 3], "dilations": [2, 1]}])
def test_max_pool(eager, opset, attrs):
    if "dilations" in attrs and opset < 11:
        pytest.skip("dilations need opset 10+")
    agree(eager, *node_model("MaxPool", opset, {"x": f32(1, 2, 7, 8)}, **attrs))


@pytest.mark.filterwarnings("ignore:invalid value encountered in cast")  # onnx's reference pads uint8 with nan
def test_max_pool_1d_and_uint8(eager):
    agree(eager, *node_model("MaxPool", 13, {"x": f32(2, 3, 9)}, kernel_shape=[3], strides=[2], pads=[1, 1]))
    x = RNG.integers(0, 255, (1, 1, 5, 5)).astype(np.uint8)
    agree(eager, *node_model("MaxPool", 13, {"x": x}, kernel_shape=[3, 3], pads=[1, 1, 1, 1]))


@pytest.mark.parametrize("opset", [11, 19, 21])
@pytest.mark.parametrize("include", [0, 1])
@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, {"kernel_shape": [3, 3], "pads": [0, 2, 1, 0]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1, "pads": [1, 1, 1, 1]},
    {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER"}])
def test_average_pool(eager, opset, include, attrs):
    agree(eager, *node_model("AveragePool", opset, {"x": f32(1, 2, 7, 8)}, count_include_pad=include, **attrs))


def test_global_average_pool(eager):
    agree(eager, *node_model("GlobalAveragePool", 13, {"x": f32(2, 3, 4, 5)}))


@pytest.mark.parametrize("opset", [11, 13, 19, 21])
@pytest.mark.parametrize("to", [onnx.TensorProto.INT32, onnx.TensorProto.FLOAT16, onnx.TensorProto.BOOL,
                                onnx.TensorProto.INT8])
def test_cast(eager, opset, to):
    x = np.array([[-2.7, -0.5, 0.0, 0.4, 3.9, 100.2]], np.float32)
    agree(eager, *node_model("Cast", opset, {"x": x}, to=to))


@pytest.mark.parametrize("opset", [11, 13, 21])
def test_layout_ops(eager, opset):
    x = f32(2, 3, 4)
    agree(eager, *node_model("Transpose", opset, {"x": x}))
    agree(eager, *node_model("Transpose", opset, {"x": x}, perm=[1, 2, 0]))
    agree(eager, *node_model("Concat", opset, {"a": x, "b": f32(2, 3, 2)}, axis=-1))
    for axis in (0, 2, -1):
        agree(eager, *node_model("Flatten", opset, {"x": x}, axis=axis))
    agree(eager, *node_model("Reshape", opset, {"x": x}, constants={"s": i64(0, -1, 2)}))
    agree(eager, *node_model("Expand", opset, {"x": f32(3, 1)}, constants={"s": i64(2, 1, 4)}))
    agree(eager, *node_model("Where", opset, {"c": RNG.random((3, 1)) > 0.5, "a": f32(3, 4), "b": f32(4)}))


@pytest.mark.parametrize("opset", [14, 21])
def test_reshape_allowzero(eager, opset):
    agree(eager, *node_model("Reshape", opset, {"x": f32(2, 3, 4)}, constants={"s": i64(0, 12)}, allowzero=0))
    agree(eager, *node_model("Reshape", opset, {"x": f32(2, 3, 4)}, constants={"s": i64(4, 6)}, allowzero=1))


@pytest.mark.parametrize("opset", [11, 12, 13, 21])
def test_squeeze_and_unsqueeze_take_axes_as_attribute_then_input(eager, opset):
    x = f32(1, 3, 1, 2)
    if opset < 13:
        agree(eager, *node_model("Squeeze", opset, {"x": x}, axes=[0, -2]))
        agree(eager, *node_model("Unsqueeze", opset, {"x": f32(3, 2)}, axes=[-1, 0]))
    else:
        agree(eager, *node_model("Squeeze", opset, {"x": x}, constants={"axes": i64(0, -2)}))
        agree(eager, *node_model("Unsqueeze", opset, {"x": f32(3, 2)}, constants={"axes": i64(-1, 0)}))
    agree(eager, *node_model("Squeeze", opset, {"x": x}))


@pytest.mark.parametrize("opset", [11, 13, 18, 21])
def test_split_forms(eager, opset):
    x = f32(7, 2)
    if opset < 13:
        agree(eager, *node_model("Split", opset, {"x": x}, outputs=2, axis=0, split=[3, 4]))
    else:
        agree(eager, *node_model("Split", opset, {"x": x}, outputs=2, constants={"s": i64(3, 4)}))
    agree(eager, *node_model("Split", opset, {"x": f32(6, 2)}, outputs=3))
    if opset >= 18:
        agree(eager, *node_model("Split", opset, {"x": x}, outputs=3, num_outputs=3))


@pytest.mark.parametrize("opset", [11, 13, 21])
def test_slice_clamps_wraps_and_steps_backwards(eager, opset):
    x = f32(5, 6)
    for starts, ends, axes, steps in [((1, 0), (4, 100), (0, 1), (1, 2)), ((-1,), (-100,), (1,), (-2,)),
                                      ((10,), (0,), (0,), (-1,)), ((2,), (1000,), (-1,), (1,))]:
        constants = {"s": i64(*starts), "e": i64(*ends), "a": i64(*axes), "t": i64(*steps)}
        agree(eager, *node_model("Slice", opset, {"x": x}, constants=constants))


@pytest.mark.parametrize("opset", [11, 13, 21])
def test_gather_with_negative_and_nd_indices(eager, opset):
    x = f32(5, 4)
    agree(eager, *node_model("Gather", opset, {"x": x, "i": np.array([[0, -1], [3, -5]], np.int64)}, axis=0))
    agree(eager, *node_model("Gather", opset, {"x": x, "i": np.array([-1, 2, 0], np.int32)}, axis=1))
    agree(eager, *node_model("Gather", opset, {"x": x, "i": np.array(-2, np.int64)}, axis=0))


@pytest.mark.parametrize("opset", [11, 13, 18, 20])
@pytest.mark.parametrize("op_type", ["ReduceSum", "ReduceMean", "ReduceMax"])
def test_reductions_attribute_and_input_axes(eager, op_type, opset):
    x = f32(2, 3, 4)
    axes_as_input = opset >= (13 if op_type == "ReduceSum" else 18)
    for axes, keep in (([1], 0), ([0, -1], 1)):
        if axes_as_input:
            agree(eager, *node_model(op_type, opset, {"x": x}, constants={"axes": i64(*axes)}, keepdims=keep))
        else:
            agree(eager, *node_model(op_type, opset, {"x": x}, axes=axes, keepdims=keep))
    agree(eager, *node_model(op_type, opset, {"x": x}, keepdims=0))  # no axes: reduce everything
    if axes_as_input:
        agree(eager, *node_model(op_type, opset, {"x": x}, noop_with_empty_axes=1))


def test_reduce_mean_of_integers_and_max_of_nothing(eager):
    agree(eager, *node_model("ReduceMean", 13, {"x": np.array([[1, 2], [4, 7]], np.int32)}, axes=[1]))
    agree(eager, *node_model("ReduceMax", 20, {"x": np.zeros((2, 0, 3), np.float32)},
                             constants={"axes": i64(1)}, keepdims=1))


@pytest.mark.parametrize("opset", [11, 12, 13, 21])
def test_dropout_in_inference(eager, opset):
    x = f32(3, 4)
    if opset < 12:
        agree(eager, *node_model("Dropout", opset, {"x": x}, outputs=2, ratio=0.3))
    else:
        agree(eager, *node_model("Dropout", opset, {"x": x}, outputs=2, constants={"r": np.array(0.3, np.float32)}))
        constants = {"r": np.array(0.0, np.float32), "t": np.array(True)}
        agree(eager, *node_model("Dropout", opset, {"x": x}, outputs=2, constants=constants))


def test_constants_and_shapes_fold(eager):
    agree(eager, *node_model("Shape", 15, {"x": f32(2, 3, 4)}, start=1))
    agree(eager, *node_model("Size", 13, {"x": f32(2, 3, 4)}))
    agree(eager, *node_model("ConstantOfShape", 20, {}, constants={"s": i64(2, 3)},
                             value=onnx.numpy_helper.from_array(np.array([7], np.int32))))
    agree(eager, *node_model("Constant", 13, {}, value_floats=[1.5, 2.5]))


# -- errors ---------------------------------------------------------------------------------------
def test_every_unsupported_op_type_is_listed_in_one_error():
    nodes = [helper.make_node("Add", ["x", "x"], ["a"]), helper.make_node("Unique", ["a"], ["b"]),
             helper.make_node("Det", ["x"], ["c"]), helper.make_node("Frobnicate", ["c"], ["d"], domain="my.ops"),
             helper.make_node("Unique", ["c"], ["e"])]
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])
    graph = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("e", onnx.TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.ops", 1)])
    with pytest.raises(UnsupportedOpError) as caught:
        check_model(model)
    message = str(caught.value)
    assert "3 unsupported op type(s)" in message
    assert "Unique (opset 17)" in message and "Det (opset 17)" in message and "my.ops::Frobnicate" in message
    assert "Add" not in message


def test_old_opsets_and_unknown_versions_are_refused():
    with pytest.raises(UnsupportedOpError, match="opsets below 11"):
        lookup("Add", 10)
    assert lookup("Softmax", 12)[1] == 11 and lookup("Softmax", 21)[1] == 13
    assert lookup("Split", 17)[1] == 13 and lookup("Split", 21)[1] == 18


@pytest.mark.parametrize("build, feature", [
    (lambda: node_model("BatchNormalization", 15, {"x": f32(2, 3), "s": f32(3), "b": f32(3), "m": f32(3),
                                                   "v": f32(3)}, training_mode=1), "training mode"),
    (lambda: node_model("MaxPool", 13, {"x": f32(1, 1, 4, 4, 4)}, outputs=2, kernel_shape=[2, 2, 2]), "Indices"),
    (lambda: node_model("QuantizeLinear", 21, {"x": f32(2, 4)}, constants={"s": f32(2, 2)}, axis=1, block_size=2),
     "blocked quantization"),
    (lambda: node_model("GroupNormalization", 21, {"x": f32(1, 4, 3)}, constants={"s": f32(4), "b": f32(4)},
                        num_groups=2, stash_type=0), "stash_type"),
])
def test_unsupported_features_are_named(eager, build, feature):
    model, feeds = build()
    with pytest.raises(UnsupportedFeature, match=feature) as caught:
        eager.run_model(model, feeds)
    assert isinstance(caught.value, UnsupportedOpError)


def test_the_table_covers_the_required_ops():
    required = ["Add", "Sub", "Mul", "Div", "Pow", "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Erf", "Max", "Min", "Relu", "Gelu", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "LayerNormalization", "BatchNormalization", "MatMul", "Gemm", "Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "Cast", "Transpose", "Concat", "Split", "Slice", "Gather", "Where", "ReduceMean", "ReduceSum", "ReduceMax", "Expand", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Dropout"]  # noqa: E501
    table = supported_ops()
    for op_type in required:
        for opset in range(11, 22):
            if onnx.defs.has(op_type) and _exists(op_type, opset):
                lookup(op_type, opset)  # raises when the version in effect has no converter
        assert op_type in table


def _exists(op_type: str, opset: int) -> bool:
    try:
        onnx.defs.get_schema(op_type, opset)
    except onnx.defs.SchemaError:
        return False
    return True


# -- the context interface ---------------------------------------------------------------------------
class RecordingContext:
    """A graph-like context: values are descriptors, shapes come from the catalog's ``infer``,
    and only constants have static values.  It shows the interface is all converters need."""

    def __init__(self) -> None:
        self.ops: list[str] = []
        self.constants: dict[int, np.ndarray] = {}

    def op(self, name: str, *inputs: Any, outputs: int = 1, **attrs: Any) -> Any:
        self.ops.append(name)
        inferred = get_op(name).infer(list(inputs), attrs)
        return inferred[0] if outputs == 1 else tuple(inferred[:outputs])

    def constant(self, array: np.ndarray) -> Any:
        desc = TensorDesc(np.shape(array), as_dtype(np.asarray(array).dtype))
        self.constants[id(desc)] = np.asarray(array)
        return desc

    def shape(self, value: Any) -> tuple[int, ...]:
        return value.shape

    def dtype(self, value: Any) -> Any:
        return value.dtype

    def static_value(self, value: Any, what: str) -> np.ndarray:
        if id(value) not in self.constants:
            raise UnsupportedFeature(None, f"{what} must be a constant")
        return self.constants[id(value)]


def test_a_graph_context_needs_only_the_interface():
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["h"], transB=1),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Reshape", ["r", "shape"], ["y"])]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(f32(16, 8), "w"), onnx.numpy_helper.from_array(f32(16), "b"),
         onnx.numpy_helper.from_array(i64(2, -1), "shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    context = RecordingContext()
    values = emit_graph(context, model.graph, {"x": TensorDesc((4, 8), "float32")}, model_opsets(model))
    assert context.ops == ["Transpose", "Addmm", "Relu", "Reshape"]
    assert values["y"].shape == (2, 32)
    shape_input = {"x": TensorDesc((4, 8), "float32"), "s": TensorDesc((2,), "int64")}
    model2, _ = node_model("Reshape", 13, {"x": f32(4, 8), "s": i64(2, 16)})
    with pytest.raises(UnsupportedFeature, match="Reshape's shape must be a constant"):
        emit_graph(context, model2.graph, shape_input, model_opsets(model2))
