"""load_onnx: what becomes what (initializers, Constant nodes, dynamic dims, outputs), folding,
specialization per signature, and the errors (all unsupported ops at once, the failing node named)."""

from __future__ import annotations

import anyio
import numpy as np
import onnx
import pytest
from model_kit import run_pipeline
from onnx import TensorProto, helper, numpy_helper
from onnx_peer import peer_outputs, relative_error

import aclpipe
from aclpipe.errors import GraphError, UnsupportedOpError
from aclpipe.onnx.context import UnsupportedFeature
from aclpipe.onnx.importer import OnnxGraph, load_onnx


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "test", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _tensor(name, dims, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, dims)


def _flatten_model(opset=17):
    """x[batch, 3, h] -> Reshape(x, Concat(Shape(x)[0], -1)) @ w + Constant bias."""
    weight = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(12, 1) / 10, "w")
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes0"], ["batch1"]),
        helper.make_node("Concat", ["batch1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("MatMul", ["flat", "w"], ["product"]),
        helper.make_node("Constant", [], ["bias"], value=numpy_helper.from_array(np.array([0.5], np.float32))),
        helper.make_node("Add", ["product", "bias"], ["y"], name="add_bias"),
    ]
    initializers = [weight, numpy_helper.from_array(np.array(0, np.int64), "zero"),
                    numpy_helper.from_array(np.array([0], np.int64), "axes0"),
                    numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    return _model(nodes, [_tensor("x", ["batch", 3, 4])], [_tensor("y", ["batch", 1])], initializers, opset)


# -- what becomes what -------------------------------------------------------------------------
def test_inputs_keep_dynamic_dims_and_initializers_become_constants():
    model = _flatten_model()
    model.graph.input.append(_tensor("unused", [None, "n", 2]))
    model.graph.input[1].type.tensor_type.shape.dim[0].Clear()  # a dim with neither value nor name
    graph = load_onnx(model)
    assert isinstance(graph, OnnxGraph) and not graph.is_static
    assert graph.inputs["x"].shape == ("batch", 3, 4)
    assert graph.inputs["unused"].shape == (None, "n", 2)
    assert set(graph.constants) == {"w", "zero", "axes0", "minus1"}
    np.testing.assert_array_equal(graph.constants["w"], numpy_helper.to_array(model.graph.initializer[0]))
    assert list(graph.outputs) == ["y"]


def test_shape_arithmetic_folds_and_only_tensor_work_reaches_the_device():
    graph = load_onnx(_flatten_model())
    specialized = graph.specialize(x=(5, 3, 4))
    assert [node.op for node in specialized.nodes] == ["Reshape", "Matmul", "Add"]
    reshape = specialized.nodes[0]
    assert reshape.attrs["shape"] == (5, 12)
    # Only the weight and the Constant node's value are device constants; the shape pieces folded away.
    assert "w" in specialized.constants and len(specialized.constants) == 2
    assert any(name.startswith("bias~") for name in specialized.constants)


def test_runs_at_several_batch_sizes_and_matches_the_peer():
    model = _flatten_model()
    graph = load_onnx(model)
    feeds = [{"x": np.random.default_rng(b).standard_normal((b, 3, 4)).astype(np.float32)} for b in (4, 1, 3)]
    results = anyio.run(run_pipeline, graph, feeds)
    for batch, result in zip(feeds, results):
        (want,) = peer_outputs(model, batch)
        assert relative_error(result["y"], want) < 1e-6
    assert graph.signatures == 3


def test_static_models_are_specialized_and_validated_at_load():
    model = _flatten_model()
    graph = load_onnx(model, input_shapes={"x": (2, 3, 4)})
    assert graph.is_static and graph.signatures == 1
    assert [node.op for node in graph.nodes] == ["Reshape", "Matmul", "Add"]
    with pytest.raises(GraphError, match="fixes it at 3"):
        load_onnx(model, input_shapes={"x": (2, 5, 4)})
    with pytest.raises(GraphError, match="not inputs of the model"):
        load_onnx(model, input_shapes={"nope": (1,)})


def test_constants_are_shared_across_signatures_only_when_their_bytes_match():
    graph = load_onnx(_flatten_model())
    first, second = graph.specialize(x=(2, 3, 4)), graph.specialize(x=(7, 3, 4))
    for name in set(first.constants) & set(second.constants):
        np.testing.assert_array_equal(first.constants[name], second.constants[name])
    assert "w" in first.constants and "w" in second.constants


def test_outputs_that_are_inputs_or_constants_are_copied_by_a_node():
    nodes = [helper.make_node("Identity", ["x"], ["same"]),
             helper.make_node("Constant", [], ["fixed"], value=numpy_helper.from_array(np.ones(3, np.float32))),
             helper.make_node("Relu", ["x"], ["unused"])]
    model = _model(nodes, [_tensor("x", ["n"])], [_tensor("same", ["n"]), _tensor("fixed", [3])])
    graph = load_onnx(model)
    specialized = graph.specialize(x=(4,))
    assert [node.op for node in specialized.nodes] == ["InplaceCopy", "InplaceCopy"]  # the dead Relu is pruned
    x = np.arange(4, dtype=np.float32)
    (result,) = anyio.run(run_pipeline, graph, [{"x": x}])
    np.testing.assert_array_equal(result["same"], x)
    np.testing.assert_array_equal(result["fixed"], np.ones(3, np.float32))


def test_loads_from_a_path_and_from_bytes(tmp_path):
    model = _flatten_model()
    path = tmp_path / "flat.onnx"
    onnx.save(model, str(path))
    assert load_onnx(path).name == "test"
    assert load_onnx(model.SerializeToString(), name="bytes").name == "bytes"
    with pytest.raises(FileNotFoundError):
        load_onnx(tmp_path / "missing.onnx")
    with pytest.raises(TypeError):
        load_onnx(42)  # type: ignore[arg-type]


def test_imported_graphs_are_edited_through_specializations(tmp_path):
    graph = load_onnx(_flatten_model())
    x = next(iter(graph.values.values()))
    with pytest.raises(GraphError, match="specialize"):
        graph.relu(x)
    with pytest.raises(GraphError, match="outputs are the model's"):
        graph.output("z", x)
    with pytest.raises(GraphError, match="dynamic input dims"):
        graph.save(tmp_path / "g.yaml")
    static = load_onnx(_flatten_model(), input_shapes={"x": (2, 3, 4)})
    static.save(tmp_path / "g.yaml")
    loaded = aclpipe.load_graph(tmp_path / "g.yaml")
    assert [node.op for node in loaded.nodes] == ["Reshape", "Matmul", "Add"]


# -- errors ------------------------------------------------------------------------------------
def test_every_unsupported_op_is_listed_in_one_error():
    nodes = [helper.make_node("Det", ["x"], ["a"]), helper.make_node("Unique", ["x"], ["b"]),
             helper.make_node("Det", ["x"], ["c"]),
             helper.make_node("Custom", ["x"], ["d"], domain="com.example")]
    model = _model(nodes, [_tensor("x", [4])], [_tensor("d", [4])])
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    with pytest.raises(UnsupportedOpError) as caught:
        load_onnx(model)
    message = str(caught.value)
    assert "3 unsupported op type(s)" in message
    assert "Det (opset 17)" in message and "Unique (opset 17)" in message and "com.example::Custom" in message


def test_old_opsets_are_refused_with_a_hint_and_upgraded_on_request():
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    model = _model(nodes, [_tensor("x", [2])], [_tensor("y", [2])], opset=9)
    with pytest.raises(UnsupportedOpError, match="upgrade_opset=13"):
        load_onnx(model)
    graph = load_onnx(model, upgrade_opset=13)
    assert graph.opsets[""] == 13 and [node.op for node in graph.nodes] == ["Relu"]


def test_invalid_nodes_are_named_with_their_input_shapes():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="projection")]
    model = _model(nodes, [_tensor("x", ["batch", 3])], [_tensor("y", ["batch", 2])],
                   [numpy_helper.from_array(np.ones((4, 2), np.float32), "w")])
    graph = load_onnx(model)  # dynamic: validated when bound
    with pytest.raises(GraphError, match=r"ONNX node MatMul 'projection' \(opset 17, inputs \[float32\[5, 3\], "
                                         r"float32\[4, 2\]\]\)"):
        graph.specialize(x=(5, 3))
    with pytest.raises(GraphError, match="projection"):
        load_onnx(model, input_shapes={"x": (5, 3)})  # static: validated at load


def test_shapes_computed_from_large_tensor_data_are_refused_naming_the_node():
    # A small input read as a shape is a host value (tests/onnx_models/test_host_values.py); one
    # too large to be a host value is refused, naming the node and the input.
    nodes = [helper.make_node("Cast", ["s"], ["target"], to=TensorProto.INT64),
             helper.make_node("Slice", ["target", "zero", "two"], ["first"]),
             helper.make_node("Reshape", ["x", "first"], ["y"], name="data_reshape")]
    initializers = [numpy_helper.from_array(np.array([0], np.int64), "zero"),
                    numpy_helper.from_array(np.array([2], np.int64), "two")]
    model = _model(nodes, [_tensor("x", [6]), _tensor("s", [5000])], [_tensor("y", [None, None])], initializers)
    with pytest.raises(UnsupportedFeature, match=r"data_reshape.*computed from graph input\(s\) 's' "
                                                 r"\(float32\[5000\]\), too large to be host values"):
        load_onnx(model)
