"""Host values: small graph inputs that decide the graph (Reshape's shape, Slice's starts, Reduce
axes, TopK's k, an If condition, ...) are passed as ordinary run inputs; the graph is specialized
per (shapes, host values), the plan and the errors say which inputs they are, and a bounded
LRU keeps the specializations."""

from __future__ import annotations

import anyio
import numpy as np
import pytest
from model_kit import make_model, run_pipeline, tensor
from onnx import TensorProto, helper, numpy_helper
from onnx_peer import peer_outputs

import aclpipe
from aclpipe.errors import GraphError
from aclpipe.onnx.importer import load_onnx
from aclpipe.onnx.validate import OnnxLimits

INT64 = TensorProto.INT64


def _reshape_model():
    return make_model([helper.make_node("Reshape", ["x", "shape"], ["y"], name="r")],
                      [tensor("x", ["n"]), tensor("shape", [2], INT64)], [tensor("y", None)])


def test_a_shape_input_is_a_host_value_passed_as_an_ordinary_run_input():
    graph = load_onnx(_reshape_model())
    x = np.arange(6, dtype=np.float32)
    feeds = [{"x": x, "shape": np.array([2, 3])}, {"x": x, "shape": np.array([3, -1])},
             {"x": x[:4], "shape": np.array([2, 2])}, {"x": x, "shape": np.array([2, 3])}]
    results = anyio.run(run_pipeline, graph, feeds)
    assert [result["y"].shape for result in results] == [(2, 3), (3, 2), (2, 2), (2, 3)]
    np.testing.assert_array_equal(results[1]["y"], x.reshape(3, 2))
    assert graph.host_inputs == {"shape"}
    assert graph.host_reasons["shape"] == "Reshape 'r' (opset 17): Reshape's shape"
    assert graph.signatures == 3  # (6,)+[2,3] twice, (6,)+[3,-1], (4,)+[2,2]


def test_host_values_of_the_same_shape_with_other_contents_pick_their_own_program():
    graph = load_onnx(_reshape_model())
    x = np.arange(6, dtype=np.float32)
    shapes = [[2, 3], [2, 3], [3, 2], [3, 2], [2, 3], [6, 1], [6, 1]]
    results = anyio.run(run_pipeline, graph, [{"x": x, "shape": np.array(shape)} for shape in shapes])
    for shape, result in zip(shapes, results, strict=True):
        np.testing.assert_array_equal(result["y"], x.reshape(shape))


async def _prepare_and_run(graph, **inputs):
    device = aclpipe.open_device("sim", sanitizer=True)
    try:
        async with aclpipe.Pipeline(graph, device, streams=2) as pipe:
            plan = pipe.prepare(**{name: value if name in graph.host_inputs else value.shape
                                   for name, value in inputs.items()})
            result = await pipe.run(**inputs)
            return plan, result, pipe.stats()
    finally:
        device.close()


def test_the_plan_says_which_inputs_are_host_values_and_never_copies_them():
    graph = load_onnx(_reshape_model())
    graph.signature(x=np.zeros(6, np.float32), shape=np.array([6, 1]))  # finds the host value
    inputs = {"x": np.arange(6, dtype=np.float32), "shape": np.array([3, 2])}
    plan, result, stats = anyio.run(lambda: _prepare_and_run(graph, **inputs))
    assert "host values (specialized for these contents; not copied to the device): shape=[3, 2]" in plan.summary()
    assert plan.inputs == ("x",) and set(plan.host_values) == {"shape"}
    assert not any(node.op == "H2D" and node.attrs["input"] == "shape" for node in plan.nodes)
    assert result["y"].shape == (3, 2) and stats.prepare_hits == 1  # the run found what prepare made


def test_errors_say_which_inputs_are_host_values():
    graph = load_onnx(_reshape_model())
    with pytest.raises(GraphError, match=r"'r'.*expected 6 elements.*\(specialized for shape=\[4, 2\] \(host value\), "
                                         r"x=\(6,\)\)"):
        graph.specialize(x=(6,), shape=np.array([4, 2]))
    with pytest.raises(GraphError, match=r"input 'shape' is a host value \(Reshape 'r' .*give them as an array"):
        graph.specialize(x=(6,), shape=(2,))
    with pytest.raises(TypeError, match="input 'shape': expected dtype int64"):
        graph.specialize(x=(6,), shape=np.array([2, 3], np.int32))
    assert "shape: int64[2] (host value)" in repr(graph)


def test_a_host_value_input_over_the_element_limit_is_refused():
    graph = load_onnx(_reshape_model(), limits=OnnxLimits(host_value_elements=1))
    with pytest.raises(aclpipe.UnsupportedOpError, match=r"'shape' \(int64\[2\]\), too large to be host values"):
        graph.specialize(x=(6,), shape=np.array([2, 3]))


def test_specializations_are_a_bounded_lru():
    graph = load_onnx(_reshape_model(), limits=OnnxLimits(specializations=2))
    first = graph.specialize(x=(6,), shape=np.array([2, 3]))
    graph.specialize(x=(6,), shape=np.array([3, 2]))
    assert graph.specialize(x=(6,), shape=np.array([2, 3])) is first  # a hit refreshes it
    graph.specialize(x=(6,), shape=np.array([6, 1]))  # drops [3, 2], the least recently used
    assert graph.signatures == 2
    assert graph.specialize(x=(6,), shape=np.array([2, 3])) is first
    rebuilt = graph.specialize(x=(6,), shape=np.array([3, 2]))
    assert rebuilt.nodes[0].attrs["shape"] == (3, 2)


def test_many_kinds_of_host_values_in_one_model_match_the_peer():
    nodes = [helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["sliced"]),
             helper.make_node("ReduceSum", ["sliced", "reduce_axes"], ["summed"], keepdims=1),
             helper.make_node("TopK", ["summed", "k"], ["top", "top_index"], axis=-1),
             helper.make_node("Unsqueeze", ["top", "unsqueeze_axes"], ["y"]),
             helper.make_node("Tile", ["x", "repeats"], ["tiled"])]
    inputs = [tensor("x", [4, 6]), tensor("starts", [1], INT64), tensor("ends", [1], INT64),
              tensor("axes", [1], INT64), tensor("reduce_axes", [1], INT64), tensor("k", [1], INT64),
              tensor("unsqueeze_axes", [1], INT64), tensor("repeats", [2], INT64)]
    model = make_model(nodes, inputs, [tensor("y", None), tensor("tiled", None)], opset=18)
    graph = load_onnx(model)
    assert not graph.is_static  # its dims are fixed, but its host values are not known yet
    assert graph.host_inputs >= {"starts"}  # found at load, trying to specialize
    rng = np.random.default_rng(3)
    feeds = [{"x": rng.standard_normal((4, 6)).astype(np.float32), "starts": np.array([start]),
              "ends": np.array([5]), "axes": np.array([1]), "reduce_axes": np.array([0]), "k": np.array([k]),
              "unsqueeze_axes": np.array([0]), "repeats": np.array([1, repeat])}
             for start, k, repeat in ((0, 2, 2), (1, 3, 1), (2, 1, 3))]
    results = anyio.run(run_pipeline, graph, feeds)
    for feed, result in zip(feeds, results):
        want_y, want_tiled = peer_outputs(model, feed)
        np.testing.assert_allclose(result["y"], want_y, rtol=1e-6)
        np.testing.assert_array_equal(result["tiled"], want_tiled)
    assert graph.host_inputs == {"starts", "ends", "axes", "reduce_axes", "k", "unsqueeze_axes", "repeats"}


def test_a_scalar_input_selecting_an_if_branch_is_a_host_value():
    """A voice-activity style model: a sample-rate input picks the branch at prepare."""
    then_branch = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["fast"])], "then", [],
                                    [tensor("fast", None)])
    else_branch = helper.make_graph([helper.make_node("Neg", ["x"], ["slow"])], "else", [], [tensor("slow", None)])
    nodes = [helper.make_node("Greater", ["rate", "limit"], ["high"]),
             helper.make_node("If", ["high"], ["y"], then_branch=then_branch, else_branch=else_branch)]
    initializers = [numpy_helper.from_array(np.array(8000, np.int64), "limit"),
                    numpy_helper.from_array(np.array(2, np.float32), "two")]
    model = make_model(nodes, [tensor("x", ["n"]), tensor("rate", [], INT64)], [tensor("y", None)], initializers)
    graph = load_onnx(model)
    x = np.arange(3, dtype=np.float32)
    results = anyio.run(run_pipeline, graph, [{"x": x, "rate": np.array(16000)}, {"x": x, "rate": np.array(8000)}])
    np.testing.assert_array_equal(results[0]["y"], 2 * x)
    np.testing.assert_array_equal(results[1]["y"], -x)
    assert graph.host_inputs == {"rate"}
    chosen = graph.specialize(x=(3,), rate=np.array(16000))
    assert [node.op for node in chosen.nodes] == ["Mul"]  # only the chosen branch is planned


def test_a_host_value_also_read_as_a_tensor_is_uploaded_as_a_constant():
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"]),
             helper.make_node("Cast", ["shape"], ["shape_float"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["y", "shape_float"], ["z"])]
    model = make_model(nodes, [tensor("x", [6]), tensor("shape", [2], INT64)], [tensor("z", None)])
    graph = load_onnx(model)
    x = np.arange(6, dtype=np.float32)
    (result,) = anyio.run(run_pipeline, graph, [{"x": x, "shape": np.array([3, 2])}])
    np.testing.assert_array_equal(result["z"], x.reshape(3, 2) * np.array([3, 2], np.float32))


def test_a_data_dependent_op_on_a_small_input_folds_once_it_is_a_host_value():
    model = make_model([helper.make_node("NonZero", ["mask"], ["where"])],
                       [tensor("mask", [4], TensorProto.BOOL)], [tensor("where", None)])
    graph = load_onnx(model)
    masks = [np.array([True, False, True, True]), np.array([False, False, True, False])]
    results = anyio.run(run_pipeline, graph, [{"mask": mask} for mask in masks])
    for mask, result in zip(masks, results):
        np.testing.assert_array_equal(result["where"], np.array(np.nonzero(mask)))
    assert graph.host_inputs == {"mask"}
