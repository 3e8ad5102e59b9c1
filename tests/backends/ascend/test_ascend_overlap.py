"""Captured runs replay where consecutive runs can overlap, on the binding over the fake CANN.

The fake CANN has no timing model, so the overlap itself is measured on the simulator
(tests/pipeline/test_pipeline_overlap.py); here the binding is held to the structure that
makes it possible: ``aclmdlRIExecuteAsync`` is ordered on its stream like any task, so the
runs in flight at once must replay on different streams, each slot on its own, and complete
right and in order.
"""

from __future__ import annotations

import anyio
import numpy as np

import aclpipe
from aclpipe.backends.protocol import graph_capture


def _graph() -> aclpipe.Graph:
    rng = np.random.default_rng(3)
    g = aclpipe.Graph("replays")
    x = g.input("x", shape=(None, 16), dtype="float32")
    w = g.constant("w", rng.standard_normal((16, 8)).astype(np.float32))
    g.output("y", g.softmax(g.matmul(g.relu(x), w), dim=-1))
    return g


def test_runs_in_flight_replay_on_streams_of_their_own(fake_lib):
    device = aclpipe.open_device("ascend:0")
    backend = graph_capture(device.backend)
    assert backend is not None, "the fake CANN captures (aclmdlRI)"
    replayed_on: list[object] = []
    execute = backend.model_execute

    def spy(model, stream, context=None):
        replayed_on.append(stream)
        return execute(model, stream, context)

    device.backend.model_execute = spy  # type: ignore[method-assign]
    batches = [np.random.default_rng(seed).standard_normal((4, 16)).astype(np.float32) for seed in range(9)]

    async def run_all() -> list[np.ndarray]:
        async with aclpipe.Pipeline(_graph(), device, streams=2, depth=3) as pipe:
            return [out["y"] async for out in pipe.stream({"x": batch} for batch in batches)]

    try:
        results = anyio.run(run_all)
    finally:
        device.close()
    assert len(replayed_on) == len(batches)  # every run was one replay
    for first, second, third in zip(replayed_on, replayed_on[1:], replayed_on[2:]):
        assert len({first, second, third}) == 3  # depth 3: three runs in flight, three streams
    assert replayed_on[:3] == replayed_on[3:6] == replayed_on[6:9]  # each slot its own stream
    for batch, got in zip(batches, results):
        logits = np.maximum(batch, 0) @ np.random.default_rng(3).standard_normal((16, 8)).astype(np.float32)
        expected = np.exp(logits - logits.max(-1, keepdims=True))
        np.testing.assert_allclose(got, expected / expected.sum(-1, keepdims=True), rtol=1e-4, atol=1e-6)
