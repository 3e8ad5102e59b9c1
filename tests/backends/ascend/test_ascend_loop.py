"""A long ONNX Loop on ``ascend`` over the fake CANN: its body captured once and replayed per
iteration, carried values ping-ponged between arenas, gives what ``sim`` gives."""

from __future__ import annotations

import anyio
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import aclpipe

FLOAT, BOOL, INT64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64


def _model(trips: int = 24):
    rng = np.random.default_rng(4)
    body = helper.make_graph(
        [helper.make_node("MatMul", ["h", "w"], ["hw"]), helper.make_node("Add", ["hw", "x"], ["a"]),
         helper.make_node("Tanh", ["a"], ["h_next"]), helper.make_node("Identity", ["c"], ["c_out"])],
        "body", [helper.make_tensor_value_info("i", INT64, []), helper.make_tensor_value_info("c", BOOL, []),
                 helper.make_tensor_value_info("h", FLOAT, [4, 8])],
        [helper.make_tensor_value_info("c_out", BOOL, []), helper.make_tensor_value_info("h_next", FLOAT, [4, 8])],
        [numpy_helper.from_array((rng.standard_normal((8, 8)) / 3).astype(np.float32), "w")])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "", "h0"], ["h_final"], body=body),
         helper.make_node("Relu", ["h_final"], ["y"])], "loop",
        [helper.make_tensor_value_info(name, FLOAT, [4, 8]) for name in ("x", "h0")],
        [helper.make_tensor_value_info("y", FLOAT, [4, 8])],
        [numpy_helper.from_array(np.array(trips, np.int64), "trips")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


async def _run_all(device: aclpipe.Device, feeds: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    async with aclpipe.Pipeline(aclpipe.load_onnx(_model()), device, depth=2) as pipe:
        return [out["y"] async for out in pipe.stream(feeds)]


@pytest.mark.usefixtures("any_fake_lib")
def test_a_loop_gives_the_same_outputs_on_sim_and_ascend():
    rng = np.random.default_rng(1)
    feeds = [{name: rng.standard_normal((4, 8)).astype(np.float32) for name in ("x", "h0")} for _ in range(4)]
    ascend = aclpipe.open_device("ascend:0")
    try:
        on_ascend = anyio.run(_run_all, ascend, feeds)
    finally:
        ascend.close()
    sim = aclpipe.open_device("sim", sanitizer=True)
    try:
        on_sim = anyio.run(_run_all, sim, feeds)
    finally:
        sim.close()
    for got, expected in zip(on_ascend, on_sim):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
