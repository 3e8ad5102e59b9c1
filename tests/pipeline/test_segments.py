"""Segments of a slot around its Loop nodes (aclpipe.pipeline.segments): how the steps are cut,
what the captured segments hold, and two loops with captured work between them end to end."""

from __future__ import annotations

from types import SimpleNamespace

import anyio
import numpy as np
from onnx import GraphProto, TensorProto, helper, numpy_helper

import aclpipe
from aclpipe.pipeline.segments import loop_events, segment_streams, split_steps

FLOAT, BOOL, INT64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64


def _step(lane: int, loop: bool = False) -> SimpleNamespace:
    return SimpleNamespace(lane=lane, region=object() if loop else None)


def test_steps_are_cut_around_each_loop_and_loops_stand_alone():
    a, b, loop1, c, loop2, loop3, d = (_step(0), _step(1), _step(0, True), _step(2), _step(1, True),
                                       _step(0, True), _step(0))
    assert split_steps([a, b, loop1, c, loop2, loop3, d]) == [[a, b], loop1, [c], loop2, loop3, [d]]
    assert split_steps([loop1]) == [loop1]
    assert split_steps([]) == []


def test_each_segment_holds_its_replay_stream_and_the_streams_it_uses():
    steps = [_step(0), _step(1), _step(1), _step(0, True), _step(2), _step(0, True)]
    assert segment_streams(steps) == (1 + 2) + (1 + 1)  # two segments, lanes {0, 1} and {2}
    assert segment_streams([_step(0, True)]) == 0


def test_events_per_slot_grow_with_loops_and_streams():
    assert loop_events(0, 4) == 1 + 4 + 1
    assert loop_events(2, 3) == 3 * 4 + 4 + 1
    assert loop_events(2, 4) > loop_events(2, 3) > loop_events(1, 3)


def _body(rng: np.random.Generator, name: str) -> GraphProto:
    return helper.make_graph(
        [helper.make_node("MatMul", ["h", "w"], ["hw"]), helper.make_node("Tanh", ["hw"], ["h_next"]),
         helper.make_node("Identity", ["c"], ["go"])],
        name, [helper.make_tensor_value_info("i", INT64, []), helper.make_tensor_value_info("c", BOOL, []),
               helper.make_tensor_value_info("h", FLOAT, [4, 8])],
        [helper.make_tensor_value_info("go", BOOL, []), helper.make_tensor_value_info("h_next", FLOAT, [4, 8])],
        [numpy_helper.from_array((rng.standard_normal((8, 8)) / 3).astype(np.float32), "w")])


def test_two_loops_with_work_between_them_agree_with_numpy_on_every_stream_count():
    rng = np.random.default_rng(5)
    first, second = _body(rng, "first"), _body(rng, "second")
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["x"], ["n"]),
         helper.make_node("Loop", ["trips", "", "r"], ["h1"], body=first),
         helper.make_node("Add", ["h1", "n"], ["mid"]), helper.make_node("Mul", ["mid", "n"], ["side"]),
         helper.make_node("Loop", ["trips", "", "mid"], ["h2"], body=second),
         helper.make_node("Add", ["h2", "side"], ["y"])], "two_loops",
        [helper.make_tensor_value_info("x", FLOAT, [4, 8])], [helper.make_tensor_value_info("y", FLOAT, [4, 8])],
        [numpy_helper.from_array(np.array(40, np.int64), "trips")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    w1, w2 = (numpy_helper.to_array(body.initializer[0]) for body in (first, second))
    feeds = [{"x": rng.standard_normal((4, 8)).astype(np.float32)} for _ in range(4)]

    def reference(x: np.ndarray) -> np.ndarray:
        h = np.maximum(x, 0)
        for _ in range(40):
            h = np.tanh(h @ w1)
        mid = h - x
        for _ in range(40):
            mid = np.tanh(mid @ w2)
        return mid + (h - x) * -x

    async def main(streams: int) -> list[dict[str, np.ndarray]]:
        device = aclpipe.open_device("sim", sanitizer=True)
        try:
            graph = aclpipe.load_onnx(model)
            assert sum(node.op == "Loop" for node in graph.nodes) == 2  # not unrolled
            async with aclpipe.Pipeline(graph, device, streams=streams, depth=2) as pipe:
                return [result async for result in pipe.stream(feeds)]
        finally:
            device.close()

    for streams in (1, 3):
        for feed, result in zip(feeds, anyio.run(main, streams)):
            np.testing.assert_allclose(result["y"], reference(feed["x"]), rtol=1e-5, atol=1e-5)
