"""Long Loops as one control node (aclpipe.onnx.loop_region): the body imported once, run per
iteration by the Pipeline, against the peer runtime: a constant trip count with scan outputs, an
exit computed on the device (early, late, never), several carried dtypes, a nested loop, and
the unrolled fallback where the body needs the iteration number on the host."""

from __future__ import annotations

import anyio
import numpy as np
import pytest
from model_kit import make_model, run_pipeline, tensor
from onnx import TensorProto, helper, numpy_helper
from onnx_peer import peer_outputs

from aclpipe.errors import GraphError
from aclpipe.graph.region import LoopRegion
from aclpipe.onnx.convert_control import UNROLL_TRIPS
from aclpipe.onnx.importer import load_onnx
from aclpipe.onnx.validate import OnnxLimits

INT64, INT32, BOOL, FLOAT, FLOAT16 = (TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL, TensorProto.FLOAT,
                                      TensorProto.FLOAT16)
RNG = np.random.default_rng(5)
TRIPS = 40


def _const(name, value, dtype=np.float32):
    return numpy_helper.from_array(np.array(value, dtype), name)


def _check(model, feeds, streams=2):
    graph = load_onnx(model)
    results = anyio.run(run_pipeline, graph, feeds, streams)
    for feed, result in zip(feeds, results):
        for output, want in zip(model.graph.output, peer_outputs(model, feed)):
            got = result[output.name]
            assert got.shape == want.shape and got.dtype == want.dtype, output.name
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-5, atol=1e-6,
                                       err_msg=output.name)
    return graph


def _loop_nodes(graph):
    nodes = graph.specialize().nodes
    return [node for node in nodes if node.op == "Loop"], nodes


def _counting_body(scan=True):
    """(i, cond, acc) -> (cond, acc + x * i, [acc]): reads ``x`` from the outer graph."""
    nodes = [helper.make_node("Cast", ["i"], ["i_float"], to=FLOAT),
             helper.make_node("Mul", ["x", "i_float"], ["step"]),
             helper.make_node("Add", ["acc", "step"], ["acc_out"]),
             helper.make_node("Identity", ["cond"], ["cond_out"])]
    outputs = [tensor("cond_out", [], BOOL), tensor("acc_out", [3])]
    if scan:
        nodes.append(helper.make_node("Identity", ["acc"], ["seen"]))
        outputs.append(tensor("seen", [3]))
    return helper.make_graph(nodes, "body", [tensor("i", [], INT64), tensor("cond", [], BOOL), tensor("acc", [3])],
                             outputs)


def test_a_long_loop_with_a_constant_trip_count_is_one_node_with_its_scan_outputs():
    nodes = [helper.make_node("Loop", ["trips", "", "start"], ["total", "history"], body=_counting_body())]
    model = make_model(nodes, [tensor("x", [3])], [tensor("total", None), tensor("history", None)],
                       [_const("trips", TRIPS, np.int64), _const("start", [1, 2, 3])])
    graph = _check(model, [{"x": RNG.standard_normal(3).astype(np.float32)} for _ in range(2)])
    loops, nodes = _loop_nodes(graph)
    assert len(nodes) == 1 and len(loops) == 1
    region = loops[0].attrs["region"]
    assert isinstance(region, LoopRegion) and region.trips == TRIPS and region.condition is None


def test_import_size_does_not_grow_with_the_trip_count():
    sizes = []
    for trips in (UNROLL_TRIPS + 1, 1000):
        nodes = [helper.make_node("Loop", ["trips", "", "start"], ["total", "history"], body=_counting_body())]
        model = make_model(nodes, [tensor("x", [3])], [tensor("total", None), tensor("history", None)],
                           [_const("trips", trips, np.int64), _const("start", [1, 2, 3])])
        loop = load_onnx(model).specialize().nodes[0]
        sizes.append(len(loop.attrs["region"].body.nodes))
    assert sizes[0] == sizes[1]


def _exit_model(limit_elements=2000, dtype=FLOAT):
    """acc grows by x until its sum passes a limit computed from a large input (so the exit is
    computed on the device); a counter and a flag ride along as carried values of other dtypes."""
    body = helper.make_graph(
        [helper.make_node("Add", ["acc", "x"], ["acc_out"]),
         helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
         helper.make_node("ReduceSum", ["big"], ["limit"], keepdims=0),
         helper.make_node("Less", ["total", "limit"], ["cond_out"]),
         helper.make_node("Add", ["count", "one"], ["count_out"]),
         helper.make_node("Not", ["flag"], ["flag_out"]),
         helper.make_node("Cast", ["i"], ["wide"], to=dtype),
         helper.make_node("Add", ["last", "wide"], ["last_out"])],
        "body", [tensor("i", [], INT64), tensor("cond", [], BOOL), tensor("acc", [3]), tensor("count", [], INT32),
                 tensor("flag", [2], BOOL), tensor("last", [], dtype)],
        [tensor("cond_out", [], BOOL), tensor("acc_out", [3]), tensor("count_out", [], INT32),
         tensor("flag_out", [2], BOOL), tensor("last_out", [], dtype)])
    nodes = [helper.make_node("Loop", ["trips", "go", "start", "zero", "flags", "first"],
                              ["final", "count", "flag", "last"], body=body)]
    first = np.array(0, np.float16 if dtype == FLOAT16 else np.float32)
    return make_model(nodes, [tensor("x", [3]), tensor("big", [limit_elements])],
                      [tensor("final", None), tensor("count", None, INT32), tensor("flag", None, BOOL),
                       tensor("last", None, dtype)],
                      [_const("trips", 300, np.int64), _const("go", True, np.bool_), _const("start", [0, 0, 0]),
                       numpy_helper.from_array(np.array(0, np.int32), "zero"), _const("one", 1, np.int32),
                       _const("flags", [True, False], np.bool_), numpy_helper.from_array(first, "first")])


@pytest.mark.parametrize("dtype", [FLOAT, FLOAT16])
def test_an_exit_computed_on_the_device_stops_the_loop_where_onnxruntime_does(dtype):
    model = _exit_model(dtype=dtype)
    x = np.ones(3, np.float32)
    # Exits in the first iteration, part way through a block, late, and never (all 300 trips).
    feeds = [{"x": x, "big": np.full(2000, limit / 2000, np.float32)} for limit in (1.0, 20.0, 700.0, 1e9)]
    graph = _check(model, feeds)
    loops, _ = _loop_nodes_of(graph, feeds[0])
    assert loops[0].attrs["region"].condition is not None


def _loop_nodes_of(graph, feed):
    nodes = graph.specialize(**{name: array.shape for name, array in feed.items()}).nodes
    return [node for node in nodes if node.op == "Loop"], nodes


def test_zero_trips_give_the_initial_values():
    nodes = [helper.make_node("Loop", ["trips", "", "start"], ["total", "history"], body=_counting_body())]
    model = make_model(nodes, [tensor("x", [3])], [tensor("total", None), tensor("history", None)],
                       [_const("trips", 0, np.int64), _const("start", [1, 2, 3])])
    _check(model, [{"x": RNG.standard_normal(3).astype(np.float32)}])


def test_a_loop_inside_a_loop_body_runs_as_a_nested_region():
    inner = helper.make_graph(
        [helper.make_node("Add", ["v", "x"], ["v_out"]), helper.make_node("Identity", ["c"], ["c_out"])],
        "inner", [tensor("j", [], INT64), tensor("c", [], BOOL), tensor("v", [3])],
        [tensor("c_out", [], BOOL), tensor("v_out", [3])])
    outer = helper.make_graph(
        [helper.make_node("Loop", ["inner_trips", "", "acc"], ["summed"], body=inner),
         helper.make_node("Mul", ["summed", "half"], ["acc_out"]),
         helper.make_node("Identity", ["cond"], ["cond_out"])],
        "outer", [tensor("i", [], INT64), tensor("cond", [], BOOL), tensor("acc", [3])],
        [tensor("cond_out", [], BOOL), tensor("acc_out", [3])])
    nodes = [helper.make_node("Loop", ["trips", "", "start"], ["total"], body=outer)]
    model = make_model(nodes, [tensor("x", [3])], [tensor("total", None)],
                       [_const("trips", 20, np.int64), _const("inner_trips", 30, np.int64),
                        _const("start", [1, 2, 3]), _const("half", 0.5)])
    graph = _check(model, [{"x": RNG.standard_normal(3).astype(np.float32)}])
    (loop,), _ = _loop_nodes(graph)
    assert [node.op for node in loop.attrs["region"].body.nodes].count("Loop") == 1


def _slicing_body():
    """Reads row ``i`` of ``rows`` with a Slice whose start is the iteration number: only
    unrolling knows it on the host."""
    return helper.make_graph(
        [helper.make_node("Unsqueeze", ["i", "axis0"], ["row_start"]),
         helper.make_node("Add", ["row_start", "one"], ["row_end"]),
         helper.make_node("Slice", ["rows", "row_start", "row_end"], ["row"]),
         helper.make_node("Reshape", ["row", "flat"], ["flat_row"]),
         helper.make_node("Add", ["acc", "flat_row"], ["acc_out"]),
         helper.make_node("Identity", ["cond"], ["cond_out"])],
        "body", [tensor("i", [], INT64), tensor("cond", [], BOOL), tensor("acc", [3])],
        [tensor("cond_out", [], BOOL), tensor("acc_out", [3])])


def _slicing_model(trips):
    nodes = [helper.make_node("Loop", ["trips", "", "start"], ["total"], body=_slicing_body())]
    return make_model(nodes, [tensor("rows", [trips, 3])], [tensor("total", None)],
                      [_const("trips", trips, np.int64), _const("start", [0, 0, 0]),
                       _const("axis0", [0], np.int64), _const("one", 1, np.int64), _const("flat", [3], np.int64)])


def test_a_body_that_needs_the_iteration_number_on_the_host_is_unrolled():
    model = _slicing_model(24)
    graph = _check(model, [{"rows": RNG.standard_normal((24, 3)).astype(np.float32)}])
    loops, nodes = _loop_nodes(graph)
    assert not loops and len(nodes) > 24


def test_unrolling_is_still_bounded_where_a_loop_must_unroll():
    with pytest.raises(GraphError, match=r"more than 50 subgraphs .*OnnxLimits.iterations"):
        load_onnx(_slicing_model(100), limits=OnnxLimits(iterations=50))


# -- Scan --------------------------------------------------------------------------------------
def test_a_long_scan_is_one_node_with_strided_slices_both_ways():
    steps = 30
    body = helper.make_graph(
        [helper.make_node("Add", ["state", "a"], ["state_out"]),
         helper.make_node("Mul", ["a", "b"], ["product"]),
         helper.make_node("Add", ["product", "bias"], ["shifted"])],
        "body", [tensor("state", [2]), tensor("a", [2]), tensor("b", [2])],
        [tensor("state_out", [2]), tensor("product", [2]), tensor("shifted", [2])])
    nodes = [helper.make_node("Scan", ["init", "seq_a", "seq_b"], ["final", "products", "shifted_all"], body=body,
                              num_scan_inputs=2, scan_input_axes=[0, 1], scan_input_directions=[0, 1],
                              scan_output_axes=[1, 0], scan_output_directions=[1, 0])]
    model = make_model(nodes, [tensor("init", [2]), tensor("seq_a", [steps, 2]), tensor("seq_b", [2, steps]),
                               tensor("bias", [2])],
                       [tensor("final", None), tensor("products", None), tensor("shifted_all", None)])
    feeds = [{"init": RNG.standard_normal(2).astype(np.float32),
              "seq_a": RNG.standard_normal((steps, 2)).astype(np.float32),
              "seq_b": RNG.standard_normal((2, steps)).astype(np.float32),
              "bias": RNG.standard_normal(2).astype(np.float32)}]
    graph = _check(model, feeds)
    loops, nodes = _loop_nodes(graph)
    # The loop, then the reversed output's IndexSelect and its move to axis 1 (Permute).
    assert [node.op for node in nodes] == ["Loop", "IndexSelect", "Permute"]
    assert loops[0].attrs["region"].scan_inputs


def test_a_loop_without_a_trip_count_runs_until_its_device_computed_exit():
    body = helper.make_graph(
        [helper.make_node("Add", ["acc", "x"], ["acc_out"]),
         helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
         helper.make_node("ReduceSum", ["big"], ["limit"], keepdims=0),
         helper.make_node("Less", ["total", "limit"], ["cond_out"])],
        "body", [tensor("i", [], INT64), tensor("cond", [], BOOL), tensor("acc", [3])],
        [tensor("cond_out", [], BOOL), tensor("acc_out", [3])])
    nodes = [helper.make_node("Loop", ["", "go", "start"], ["final"], body=body)]
    model = make_model(nodes, [tensor("x", [3]), tensor("big", [2000])], [tensor("final", None)],
                       [_const("go", True, np.bool_), _const("start", [0, 0, 0])])
    feeds = [{"x": np.ones(3, np.float32), "big": np.full(2000, limit / 2000, np.float32)} for limit in (2.0, 500.0)]
    graph = _check(model, feeds)
    loops, _ = _loop_nodes_of(graph, feeds[0])
    assert len(loops) == 1


def test_a_long_loop_over_constants_only_still_folds():
    body = helper.make_graph(
        [helper.make_node("Add", ["acc", "one"], ["acc_out"]), helper.make_node("Identity", ["cond"], ["c"])],
        "body", [tensor("i", [], INT64), tensor("cond", [], BOOL), tensor("acc", [])],
        [tensor("c", [], BOOL), tensor("acc_out", [])])
    nodes = [helper.make_node("Loop", ["trips", "", "zero"], ["count"], body=body),
             helper.make_node("Mul", ["x", "count"], ["y"])]
    model = make_model(nodes, [tensor("x", [2])], [tensor("y", None)],
                       [_const("trips", 100, np.int64), _const("zero", 0.0), _const("one", 1.0)])
    graph = _check(model, [{"x": np.array([1, 2], np.float32)}])
    assert [node.op for node in graph.specialize().nodes] == ["Mul"]
