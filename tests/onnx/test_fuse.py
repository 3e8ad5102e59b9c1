"""A BatchNormalization folded into the Conv before it at import: when it may, what it gives."""

from __future__ import annotations

import anyio
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import aclpipe
from aclpipe.onnx.fuse import fuse_conv_batch_norm
from aclpipe.onnx.importer import load_onnx

RNG = np.random.default_rng(5)
C_IN, C_OUT = 3, 4


def _init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array, np.float32), name)


def _norm_params(prefix: str, channels: int = C_OUT) -> list[onnx.TensorProto]:
    return [_init(f"{prefix}_s", RNG.uniform(0.5, 2, channels)), _init(f"{prefix}_b", RNG.normal(size=channels)),
            _init(f"{prefix}_m", RNG.normal(size=channels)), _init(f"{prefix}_v", RNG.uniform(0.2, 3, channels))]


def _model(*, bias: bool = True, extra_reader: bool = False, conv_output: bool = False,
           params_as_inputs: bool = False, shared_weight: bool = False) -> onnx.ModelProto:
    """x -> Conv -> BatchNormalization -> Relu -> y (plus the variations the flags name)."""
    inits = [_init("w", RNG.normal(size=(C_OUT, C_IN, 3, 3)))] + _norm_params("bn")
    conv_inputs = ["x", "w"]
    if bias:
        inits.append(_init("cb", RNG.normal(size=C_OUT)))
        conv_inputs.append("cb")
    nodes = [helper.make_node("Conv", conv_inputs, ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "bn_s", "bn_b", "bn_m", "bn_v"], ["n"], name="bn",
                              epsilon=1e-3),
             helper.make_node("Relu", ["n"], ["y"], name="relu")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, C_IN, 6, 6])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if extra_reader:
        nodes.append(helper.make_node("Neg", ["c"], ["z"], name="neg"))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    if conv_output:
        outputs.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, None))
    if params_as_inputs:  # the scale is a graph input: not a constant
        inits = [t for t in inits if t.name != "bn_s"]
        inputs.append(helper.make_tensor_value_info("bn_s", TensorProto.FLOAT, [C_OUT]))
    if shared_weight:  # a second Conv + BN reads the same weight
        inits += _norm_params("bn2")
        nodes += [helper.make_node("Conv", ["y", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
                  helper.make_node("BatchNormalization", ["c2", "bn2_s", "bn2_b", "bn2_m", "bn2_v"], ["y2"],
                                   name="bn2"),
                  helper.make_node("Conv", ["y", "w2"], ["y3"], name="conv3", pads=[1, 1, 1, 1])]
        inits.append(_init("w2", RNG.normal(size=(C_OUT, C_OUT, 3, 3))))
        outputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y2", "y3")]
    graph = helper.make_graph(nodes, "fuse", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {value.name: RNG.normal(size=[d.dim_value for d in value.type.tensor_type.shape.dim]).astype(np.float32)
            for value in model.graph.input}


def _unfused_peer(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime with its graph optimizations off: the model's nodes as written."""
    onnxruntime = pytest.importorskip("onnxruntime")
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return list(session.run(None, feeds))


def _run(graph: aclpipe.Graph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    async def go() -> dict[str, np.ndarray]:
        device = aclpipe.open_device("sim", sanitizer=True)
        try:
            async with aclpipe.Pipeline(graph, device, streams=1) as pipe:
                return await pipe.run(**feeds)
        finally:
            device.close()

    return anyio.run(go)


def _ops(graph: aclpipe.Graph, feeds: dict[str, np.ndarray]) -> list[str]:
    return [node.op for node in graph.specialize(**feeds).nodes]


@pytest.mark.parametrize("bias", [True, False])
def test_a_conv_and_its_batch_norm_become_one_launch_with_the_same_outputs(bias):
    model = _model(bias=bias)
    before = model.SerializeToString()
    feeds = _feeds(model)
    graph = load_onnx(model)
    assert graph.rewrites == ("Conv 'conv' + BatchNormalization 'bn': folded into the Conv's weight and bias",)
    assert "BatchNorm" not in _ops(graph, feeds) and _ops(graph, feeds).count("Convolution") == 1
    (want,) = _unfused_peer(model, feeds)
    got = _run(graph, feeds)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert model.SerializeToString() == before  # the caller's model is left as it was
    assert not {"w", "bn_s", "bn_b", "bn_m", "bn_v", "cb"} & {t.name for t in graph.model.graph.initializer}


def test_the_folded_parameters_follow_onnxruntimes_order_of_operations():
    model = _model(bias=True)
    fused, _ = fuse_conv_batch_norm(model)
    arrays = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    new = {t.name: numpy_helper.to_array(t) for t in fused.graph.initializer}
    factor = arrays["bn_s"] / np.sqrt(arrays["bn_v"] + np.float32(1e-3))
    conv = next(node for node in fused.graph.node if node.op_type == "Conv")
    assert list(conv.output) == ["n"]
    np.testing.assert_array_equal(new[conv.input[1]], arrays["w"] * factor[:, None, None, None])
    np.testing.assert_array_equal(new[conv.input[2]], (arrays["cb"] - arrays["bn_m"]) * factor + arrays["bn_b"])
    assert new[conv.input[1]].dtype == np.float32 and new[conv.input[2]].dtype == np.float32


@pytest.mark.parametrize("variation", ["extra_reader", "conv_output", "params_as_inputs"])
def test_nothing_is_folded_when_something_else_could_tell(variation):
    model = _model(**{variation: True})
    feeds = _feeds(model)
    graph = load_onnx(model)
    assert graph.rewrites == () and "BatchNorm" in _ops(graph, feeds)
    got = _run(graph, feeds)
    for output, want in zip(model.graph.output, _unfused_peer(model, feeds)):
        np.testing.assert_allclose(got[output.name], want, rtol=1e-5, atol=1e-5)


def test_fuse_conv_bn_false_imports_every_node_as_it_is():
    model = _model()
    graph = load_onnx(model, fuse_conv_bn=False)
    assert graph.rewrites == () and "BatchNorm" in _ops(graph, _feeds(model))


def test_a_weight_read_by_another_conv_stays_and_the_folded_one_is_new():
    model = _model(shared_weight=True)
    feeds = _feeds(model)
    graph = load_onnx(model)
    assert len(graph.rewrites) == 2 and "BatchNorm" not in _ops(graph, feeds)
    names = {t.name for t in graph.model.graph.initializer}
    assert "w2" in names and "w" not in names  # conv3 still reads w2 as it was
    got = _run(graph, feeds)
    for output, want in zip(model.graph.output, _unfused_peer(model, feeds)):
        np.testing.assert_allclose(got[output.name], want, rtol=1e-4, atol=1e-4)
