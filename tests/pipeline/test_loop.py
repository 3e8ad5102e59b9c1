"""Loop nodes run by a Pipeline (aclpipe.pipeline.loop): runs overlapping in a stream, a
fault in the body named by its node, and a program with a loop never captured whole."""

from __future__ import annotations

import anyio
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import aclpipe
from aclpipe.errors import ExecutionError

FLOAT, BOOL, INT64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64


def _model(trips: int = 50):
    """h <- tanh(h @ w + x) while max(h) < limit (the limit from a large input: on the device)."""
    rng = np.random.default_rng(3)
    body = helper.make_graph(
        [helper.make_node("MatMul", ["h", "w"], ["hw"]), helper.make_node("Add", ["hw", "x"], ["a"]),
         helper.make_node("Tanh", ["a"], ["h_next"]),
         helper.make_node("ReduceMax", ["h_next"], ["peak"], keepdims=0),
         helper.make_node("ReduceSum", ["big"], ["limit"], keepdims=0),
         helper.make_node("Less", ["peak", "limit"], ["go"])],
        "body", [helper.make_tensor_value_info("i", INT64, []), helper.make_tensor_value_info("c", BOOL, []),
                 helper.make_tensor_value_info("h", FLOAT, [4, 8])],
        [helper.make_tensor_value_info("go", BOOL, []), helper.make_tensor_value_info("h_next", FLOAT, [4, 8])],
        [numpy_helper.from_array((rng.standard_normal((8, 8)) / 3).astype(np.float32), "w")])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "", "h0"], ["h_final"], body=body),
         helper.make_node("Relu", ["h_final"], ["y"])], "loop",
        [helper.make_tensor_value_info(name, FLOAT, shape) for name, shape in
         (("x", [4, 8]), ("h0", [4, 8]), ("big", [2000]))],
        [helper.make_tensor_value_info("y", FLOAT, [4, 8])],
        [numpy_helper.from_array(np.array(trips, np.int64), "trips")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), body


def _reference(feed, w, trips=50):
    h, limit = feed["h0"], feed["big"].sum()
    for _ in range(trips):
        h = np.tanh(h @ w + feed["x"])
        if not h.max() < limit:
            break
    return np.maximum(h, 0)


def _feeds(count):
    rng = np.random.default_rng(9)
    return [{"x": rng.standard_normal((4, 8)).astype(np.float32), "h0": rng.standard_normal((4, 8)).astype(np.float32),
             "big": np.full(2000, limit / 2000, np.float32)} for limit in np.linspace(0.2, 1.5, count)]


@pytest.mark.parametrize("workspace", ["pool", "per-call"])
def test_streamed_runs_of_a_loop_agree_with_numpy(workspace):
    model, body = _model()
    w = numpy_helper.to_array(body.initializer[0])
    feeds = _feeds(6)

    async def main():
        device = aclpipe.open_device("sim", sanitizer=True)
        try:
            async with aclpipe.Pipeline(aclpipe.load_onnx(model), device, depth=2, workspace=workspace) as pipe:
                return [result async for result in pipe.stream(feeds)]
        finally:
            device.close()

    for feed, result in zip(feeds, anyio.run(main)):
        np.testing.assert_allclose(result["y"], _reference(feed, w), rtol=1e-5, atol=1e-6)


def test_a_fault_in_the_body_names_the_body_node():
    model, _ = _model()

    async def main():
        device = aclpipe.open_device("sim", sanitizer=True)
        try:
            async with aclpipe.Pipeline(aclpipe.load_onnx(model), device) as pipe:
                device.inject_fault("kernel", match="Tanh", skip=3)
                await pipe.run(**{**_feeds(1)[0], "big": np.full(2000, 1.0, np.float32)})
        finally:
            device.close()

    with pytest.raises(ExecutionError, match=r"h_final/body/.*Tanh") as info:
        anyio.run(main)
    assert "body" in (info.value.node or "")


def test_a_program_with_a_loop_runs_uncaptured_and_prepares_its_body_once():
    model, _ = _model()
    feeds = _feeds(2)

    async def main():
        device = aclpipe.open_device("sim", sanitizer=True)
        try:
            async with aclpipe.Pipeline(aclpipe.load_onnx(model), device, depth=2) as pipe:
                for feed in feeds:
                    await pipe.run(**feed)
                return pipe.stats()
        finally:
            device.close()

    stats = anyio.run(main)
    assert stats.prepared == 1


def test_a_loop_in_a_stage_pipeline_reads_its_exit_without_the_pipelines_timeline():
    model, body = _model()
    w = numpy_helper.to_array(body.initializer[0])
    feeds = _feeds(3)

    async def main():
        async with aclpipe.Pipeline(aclpipe.load_onnx(model), device="sim:0,1", split="stages") as pipe:
            return [await pipe.run(**feed) for feed in feeds]

    for feed, result in zip(feeds, anyio.run(main)):
        np.testing.assert_allclose(result["y"], _reference(feed, w), rtol=1e-5, atol=1e-6)


def test_work_on_other_streams_before_and_after_a_loop_orders_around_it():
    """Branches on several streams before the loop, one of them read only after it: the parts
    around the loop are captured separately, and the sanitizer checks their order."""
    model, body = _model()
    graph = model.graph
    graph.node.insert(0, helper.make_node("Neg", ["x"], ["negated"]))
    graph.node.insert(0, helper.make_node("Exp", ["h0"], ["grown"]))
    graph.node.insert(0, helper.make_node("Sigmoid", ["h0"], ["squashed"]))
    graph.node.append(helper.make_node("Add", ["y", "negated"], ["y_neg"]))
    graph.node.append(helper.make_node("Mul", ["y_neg", "grown"], ["z"]))
    graph.node.append(helper.make_node("Add", ["z", "squashed"], ["out"]))
    graph.output.append(helper.make_tensor_value_info("out", FLOAT, [4, 8]))
    w = numpy_helper.to_array(body.initializer[0])
    feeds = _feeds(5)

    async def main():
        device = aclpipe.open_device("sim", sanitizer=True)
        try:
            async with aclpipe.Pipeline(aclpipe.load_onnx(model), device, streams=4, depth=2) as pipe:
                return [result async for result in pipe.stream(feeds)]
        finally:
            device.close()

    for feed, result in zip(feeds, anyio.run(main)):
        y = _reference(feed, w)
        want = (y - feed["x"]) * np.exp(feed["h0"]) + 1 / (1 + np.exp(-feed["h0"]))
        np.testing.assert_allclose(result["out"], want, rtol=1e-5, atol=1e-6)


def test_a_run_cancelled_while_its_loop_reads_its_exit_leaves_the_pipeline_usable():
    model, body = _model(trips=400)
    w = numpy_helper.to_array(body.initializer[0])
    feed = {**_feeds(1)[0], "big": np.full(2000, 1.0, np.float32)}  # never exits: all 400 trips

    async def main():
        device = aclpipe.open_device("sim", sanitizer=True)
        try:
            async with aclpipe.Pipeline(aclpipe.load_onnx(model), device) as pipe:
                await pipe.run(**feed)  # prepared
                with anyio.move_on_after(0.005):
                    await pipe.run(**feed)
                return await pipe.run(**feed)
        finally:
            device.close()

    np.testing.assert_allclose(anyio.run(main)["y"], _reference(feed, w, trips=400), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("on_device", [True, False], ids=["while-task", "host-reads"])
def test_a_loop_with_a_device_exit_agrees_on_both_paths(on_device):
    """With conditional tasks the loop is captured whole (a WHILE task decides, nothing is read
    back); without them its exit is read back per block.  Odd and even trip counts, early exits."""
    import dataclasses

    results = {}
    for trips in (17, 50):  # above UNROLL_TRIPS: one Loop node
        model, body = _model(trips)
        w = numpy_helper.to_array(body.initializer[0])
        feeds = _feeds(4)

        async def main(model=model, feeds=feeds):
            device = aclpipe.open_device("sim", sanitizer=True)
            backend = device.backend
            if not on_device:
                backend.capabilities = dataclasses.replace(backend.capabilities, conditional_models=False)
            try:
                async with aclpipe.Pipeline(aclpipe.load_onnx(model), device, depth=2) as pipe:
                    backend.trace_begin()
                    outputs = [result async for result in pipe.stream(feeds)]
                    kinds = {record.name.split()[0] for record in backend.trace_end()}
                    return outputs, kinds
            finally:
                device.close()

        outputs, kinds = anyio.run(main)
        results[trips] = kinds
        for feed, result in zip(feeds, outputs):
            np.testing.assert_allclose(result["y"], _reference(feed, w, trips), rtol=1e-5, atol=1e-6)
    assert all(("while" in kinds) == on_device for kinds in results.values())


def test_a_fault_in_a_while_task_body_names_the_body_node():
    model, _ = _model()

    async def main():
        device = aclpipe.open_device("sim", sanitizer=True)
        try:
            async with aclpipe.Pipeline(aclpipe.load_onnx(model), device) as pipe:
                await pipe.run(**_feeds(1)[0])  # captured whole from here
                device.inject_fault("kernel", match="Tanh", skip=3)
                await pipe.run(**{**_feeds(1)[0], "big": np.full(2000, 1.0, np.float32)})
        finally:
            device.close()

    with pytest.raises(ExecutionError, match=r"h_final/body/.*Tanh") as info:
        anyio.run(main)
    assert "body" in (info.value.node or "")
