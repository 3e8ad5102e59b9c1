"""If, Loop and Scan through load_onnx + Pipeline, against the peer runtime: branches chosen at
prepare or selected on the device, loops unrolled (trip counts from constants, shapes or host
values; a device-computed condition masked), nested subgraphs reading outer values."""

from __future__ import annotations

import anyio
import numpy as np
import pytest
from model_kit import make_model, run_pipeline, tensor
from onnx import TensorProto, helper, numpy_helper
from onnx_peer import peer_outputs, relative_error

from aclpipe.errors import GraphError
from aclpipe.onnx.context import UnsupportedFeature
from aclpipe.onnx.importer import load_onnx
from aclpipe.onnx.validate import OnnxLimits

INT64, BOOL, FLOAT = TensorProto.INT64, TensorProto.BOOL, TensorProto.FLOAT
RNG = np.random.default_rng(11)


def _const(name, value, dtype=np.float32):
    return numpy_helper.from_array(np.array(value, dtype), name)


def _check_against_peer(model, feeds, streams=2):
    graph = load_onnx(model)
    results = anyio.run(run_pipeline, graph, feeds, streams)
    for feed, result in zip(feeds, results):
        for output, want in zip(model.graph.output, peer_outputs(model, feed)):
            got = result[output.name]
            assert got.shape == want.shape and got.dtype == want.dtype, output.name
            assert relative_error(got, want) < 1e-6, output.name
    return graph


def _branch(name, nodes, output):
    return helper.make_graph(nodes, name, [], [tensor(output, None)])


# -- If ----------------------------------------------------------------------------------------
def test_if_on_a_condition_folded_from_shapes_plans_only_the_chosen_branch():
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
             helper.make_node("Greater", ["batch", "two"], ["big"]),
             helper.make_node("If", ["big"], ["y"],
                              then_branch=_branch("then", [helper.make_node("Relu", ["x"], ["r"])], "r"),
                              else_branch=_branch("else", [helper.make_node("Neg", ["x"], ["n"])], "n"))]
    model = make_model(nodes, [tensor("x", ["batch", 3])], [tensor("y", None)],
                       [_const("zero", 0, np.int64), _const("two", 2, np.int64)])
    feeds = [{"x": RNG.standard_normal((b, 3)).astype(np.float32)} for b in (1, 4)]
    graph = _check_against_peer(model, feeds)
    assert [node.op for node in graph.specialize(x=(4, 3)).nodes] == ["Relu"]
    assert [node.op for node in graph.specialize(x=(1, 3)).nodes] == ["Neg"]
    assert not graph.host_inputs


def test_if_on_a_condition_computed_on_the_device_selects_the_result_there():
    # The condition depends on all of a large input, which cannot be a host value.
    nodes = [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
             helper.make_node("Greater", ["total", "zero"], ["positive"]),
             helper.make_node("If", ["positive"], ["y"],
                              then_branch=_branch("then", [helper.make_node("Mul", ["x", "w"], ["scaled"])], "scaled"),
                              else_branch=_branch("else", [helper.make_node("Sub", ["x", "w"], ["shifted"])],
                                                  "shifted"))]
    model = make_model(nodes, [tensor("x", [40, 40])], [tensor("y", None)],
                       [_const("zero", 0.0), _const("w", RNG.standard_normal((40, 40)))])
    base = RNG.standard_normal((40, 40)).astype(np.float32)
    graph = _check_against_peer(model, [{"x": np.abs(base)}, {"x": -np.abs(base)}])
    assert "Where" in [node.op for node in graph.specialize().nodes]


def test_if_on_a_device_condition_needs_branches_of_one_shape():
    nodes = [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
             helper.make_node("Greater", ["total", "zero"], ["positive"]),
             helper.make_node("If", ["positive"], ["y"], name="pick",
                              then_branch=_branch("then", [helper.make_node("Relu", ["x"], ["r"])], "r"),
                              else_branch=_branch("else", [helper.make_node("ReduceMax", ["x"], ["m"])], "m"))]
    model = make_model(nodes, [tensor("x", [40, 40])], [tensor("y", None)], [_const("zero", 0.0)])
    with pytest.raises(UnsupportedFeature, match=r"pick.*one shape and dtype; then gives float32\[40, 40\], else "
                                                 r"float32\[1, 1\]"):
        load_onnx(model)


def test_nested_branches_read_values_of_every_enclosing_graph():
    inner = helper.make_graph([helper.make_node("Add", ["x", "outer_value"], ["inner_sum"]),
                               helper.make_node("Mul", ["inner_sum", "middle_value"], ["inner_out"])],
                              "inner", [], [tensor("inner_out", None)])
    middle = helper.make_graph([helper.make_node("Neg", ["x"], ["middle_value"]),
                                helper.make_node("If", ["flag"], ["middle_out"], then_branch=inner,
                                                 else_branch=_branch("e2", [helper.make_node("Identity", ["x"],
                                                                                             ["plain"])], "plain"))],
                               "middle", [], [tensor("middle_out", None)])
    nodes = [helper.make_node("Exp", ["x"], ["outer_value"]),
             helper.make_node("If", ["flag"], ["y"], then_branch=middle,
                              else_branch=_branch("e1", [helper.make_node("Abs", ["x"], ["absolute"])], "absolute"))]
    model = make_model(nodes, [tensor("x", [2, 3]), tensor("flag", [], BOOL)], [tensor("y", None)])
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    graph = _check_against_peer(model, [{"x": x, "flag": np.array(True)}, {"x": x, "flag": np.array(False)}])
    assert graph.host_inputs == {"flag"}


# -- Loop --------------------------------------------------------------------------------------
def _accumulating_body(extra_nodes=(), scan=True):
    """(i, cond, acc) -> (cond, acc + x * i, [acc]): reads ``x`` from the outer graph."""
    nodes = [helper.make_node("Cast", ["i"], ["i_float"], to=FLOAT),
             helper.make_node("Mul", ["x", "i_float"], ["step"]),
             helper.make_node("Add", ["acc", "step"], ["acc_out"]),
             helper.make_node("Identity", ["cond"], ["cond_out"]), *extra_nodes]
    outputs = [tensor("cond_out", [], BOOL), tensor("acc_out", None)] + ([tensor("seen", [3])] if scan else [])
    if scan:
        nodes.append(helper.make_node("Identity", ["acc"], ["seen"]))
    return helper.make_graph(nodes, "body", [tensor("i", [], INT64), tensor("cond", [], BOOL), tensor("acc", [3])],
                             outputs)


def test_a_loop_with_a_constant_trip_count_is_unrolled():
    nodes = [helper.make_node("Loop", ["trips", "", "start"], ["total", "history"], body=_accumulating_body())]
    model = make_model(nodes, [tensor("x", [3])], [tensor("total", None), tensor("history", None)],
                       [_const("trips", 4, np.int64), _const("start", [1, 2, 3])])
    graph = _check_against_peer(model, [{"x": RNG.standard_normal(3).astype(np.float32)}])
    # Iteration 0 multiplies by a folded zero; later ones are Mul + Add; history is one Cat.
    assert [node.op for node in graph.specialize().nodes].count("Cat") == 1


def test_a_loop_trip_count_from_an_input_is_a_host_value():
    nodes = [helper.make_node("Loop", ["trips", "", "start"], ["total", "history"], body=_accumulating_body())]
    model = make_model(nodes, [tensor("x", [3]), tensor("trips", [], INT64)],
                       [tensor("total", None), tensor("history", None)], [_const("start", [1, 2, 3])])
    x = RNG.standard_normal(3).astype(np.float32)
    graph = _check_against_peer(model, [{"x": x, "trips": np.array(n)} for n in (1, 3, 5)])
    assert graph.host_inputs == {"trips"}


def test_a_loop_whose_condition_is_computed_on_the_device_is_masked():
    """acc grows by x until its sum passes a limit; the limit comes from a large input."""
    body = helper.make_graph(
        [helper.make_node("Add", ["acc", "x"], ["acc_out"]),
         helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
         helper.make_node("ReduceSum", ["big"], ["limit"], keepdims=0),
         helper.make_node("Less", ["total", "limit"], ["cond_out"])],
        "body", [tensor("i", [], INT64), tensor("cond", [], BOOL), tensor("acc", [3])],
        [tensor("cond_out", [], BOOL), tensor("acc_out", [3])])
    nodes = [helper.make_node("Loop", ["trips", "go", "start"], ["final"], body=body)]
    model = make_model(nodes, [tensor("x", [3]), tensor("big", [2000])], [tensor("final", None)],
                       [_const("trips", 6, np.int64), _const("go", True, np.bool_), _const("start", [0, 0, 0])])
    x = np.ones(3, np.float32)
    feeds = [{"x": x, "big": np.full(2000, limit / 2000, np.float32)} for limit in (2.5, 7.0, 100.0)]
    _check_against_peer(model, feeds)


def test_a_device_condition_with_scan_outputs_is_refused():
    body = _accumulating_body(extra_nodes=[])
    body.node[3].CopyFrom(helper.make_node("Greater", ["big_sum", "zero"], ["cond_out"]))
    nodes = [helper.make_node("ReduceSum", ["big"], ["big_sum"], keepdims=0),
             helper.make_node("Loop", ["trips", "", "start"], ["total", "history"], body=body, name="loop")]
    model = make_model(nodes, [tensor("x", [3]), tensor("big", [2000])],
                       [tensor("total", None), tensor("history", None)],
                       [_const("trips", 3, np.int64), _const("start", [1, 2, 3]), _const("zero", 0.0)])
    with pytest.raises(UnsupportedFeature, match=r"loop.*condition is computed on the device and it has scan outputs"):
        load_onnx(model)


def test_a_huge_trip_count_is_one_loop_node_not_an_unrolled_graph():
    # Unrolling stays bounded (OnnxLimits.iterations, graph_nodes) where a loop must unroll:
    # test_loop_region.py; a long loop is one node, its stacked scan output sized first.
    nodes = [helper.make_node("Loop", ["trips", "", "start"], ["total", "history"], body=_accumulating_body())]
    model = make_model(nodes, [tensor("x", [3])], [tensor("total", None), tensor("history", None)],
                       [_const("trips", 10**9, np.int64), _const("start", [1, 2, 3])])
    with pytest.raises(GraphError, match=r"float32\[1000000000, 3\].*OnnxLimits.tensor_bytes"):
        load_onnx(model, limits=OnnxLimits(iterations=50, graph_nodes=60))
    nodes = [helper.make_node("Loop", ["trips", "", "start"], ["total"], body=_accumulating_body(scan=False))]
    model = make_model(nodes, [tensor("x", [3])], [tensor("total", None)],
                       [_const("trips", 10**9, np.int64), _const("start", [1, 2, 3])])
    assert [node.op for node in load_onnx(model, limits=OnnxLimits(iterations=50, graph_nodes=60)).nodes] == ["Loop"]


def test_a_loop_with_no_trip_count_runs_while_its_folded_condition_holds():
    body = helper.make_graph(
        [helper.make_node("Add", ["acc", "one"], ["acc_out"]), helper.make_node("Less", ["acc_out", "five"], ["c"])],
        "body", [tensor("i", [], INT64), tensor("cond", [], BOOL), tensor("acc", [])],
        [tensor("c", [], BOOL), tensor("acc_out", [])])
    nodes = [helper.make_node("Loop", ["", "go", "zero"], ["count"], body=body),
             helper.make_node("Mul", ["x", "count"], ["y"])]
    model = make_model(nodes, [tensor("x", [2])], [tensor("y", None)],
                       [_const("go", True, np.bool_), _const("zero", 0.0), _const("one", 1.0), _const("five", 5.0)])
    graph = _check_against_peer(model, [{"x": np.array([1, 2], np.float32)}])
    assert [node.op for node in graph.specialize().nodes] == ["Mul"]  # the whole loop folded


# -- Scan --------------------------------------------------------------------------------------
def test_scan_with_reversed_inputs_and_outputs_on_other_axes():
    body = helper.make_graph(
        [helper.make_node("Add", ["state", "a"], ["state_out"]),
         helper.make_node("Mul", ["a", "b"], ["product"])],
        "body", [tensor("state", [2]), tensor("a", [2]), tensor("b", [2])],
        [tensor("state_out", [2]), tensor("product", [2])])
    nodes = [helper.make_node("Scan", ["init", "seq_a", "seq_b"], ["final", "products"], body=body,
                              num_scan_inputs=2, scan_input_axes=[0, 1], scan_input_directions=[0, 1],
                              scan_output_axes=[1], scan_output_directions=[1])]
    model = make_model(nodes, [tensor("init", [2]), tensor("seq_a", [5, 2]), tensor("seq_b", [2, 5])],
                       [tensor("final", None), tensor("products", None)])
    feeds = [{"init": RNG.standard_normal(2).astype(np.float32),
              "seq_a": RNG.standard_normal((5, 2)).astype(np.float32),
              "seq_b": RNG.standard_normal((2, 5)).astype(np.float32)}]
    _check_against_peer(model, feeds, streams=4)
