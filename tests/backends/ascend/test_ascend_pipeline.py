"""The pipeline end to end on ``ascend`` over the fake CANN: the same graphs give the same
outputs as on ``sim``, and ``aclpipe selftest --device ascend:0`` passes."""

from __future__ import annotations

import anyio
import numpy as np
import pytest

import aclpipe
from aclpipe.cli import main as cli_main


def _graph() -> aclpipe.Graph:
    rng = np.random.default_rng(7)
    g = aclpipe.Graph("ascend-e2e")
    x = g.input("x", shape=(None, 16), dtype="float32")
    w1 = g.constant("w1", rng.standard_normal((16, 32)).astype(np.float32))
    w2 = g.constant("w2", rng.standard_normal((32, 8)).astype(np.float32))
    left = g.relu(g.matmul(x, w1))
    right = g.mul(g.matmul(x, w1), g.matmul(x, w1))
    joined = g.add(left, right, alpha=0.5)
    g.output("y", g.softmax(g.matmul(joined, w2), dim=-1))
    return g


async def _run_all(device: aclpipe.Device, batches: list[np.ndarray], streams: int) -> list[np.ndarray]:
    async with aclpipe.Pipeline(_graph(), device, streams=streams, depth=2) as pipe:
        return [out["y"] async for out in pipe.stream({"x": batch} for batch in batches)]


@pytest.mark.parametrize("streams", [1, 4])
def test_the_same_graph_gives_the_same_outputs_on_sim_and_ascend(any_fake_lib, streams):
    batches = [np.random.default_rng(seed).standard_normal((4, 16)).astype(np.float32) for seed in range(6)]
    ascend = aclpipe.open_device("ascend:0")
    try:
        on_ascend = anyio.run(_run_all, ascend, batches, streams)
    finally:
        ascend.close()
    sim = aclpipe.open_device("sim", sanitizer=True)
    try:
        on_sim = anyio.run(_run_all, sim, batches, streams)
    finally:
        sim.close()
    assert len(on_ascend) == len(batches)
    for got, expected in zip(on_ascend, on_sim):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_selftest_passes_on_ascend(fake_lib, capsys):
    assert cli_main(["selftest", "--device", "ascend:0"]) == 0
    table = capsys.readouterr().out
    assert "│ passed" in table and "│ failed" not in table
