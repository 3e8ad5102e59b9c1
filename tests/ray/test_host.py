"""The pipeline a Ray worker owns (no cluster needed): visible NPUs, batched requests, health."""

from __future__ import annotations

import numpy as np
import pytest

import aclpipe
from aclpipe.pipeline.several.replicas import ReplicaPipeline
from aclpipe.ray import GraphBundle, PipelineHost

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # what Ray's async actors run on


def rows_graph() -> aclpipe.Graph:
    g = aclpipe.Graph("rows")
    x = g.input("x", shape=(None, 8))
    weight = np.random.default_rng(2).standard_normal((8, 4)).astype(np.float32)
    g.output("y", g.tanh(g.matmul(x, g.constant("w", weight))))
    return g


def total_graph() -> aclpipe.Graph:
    """An output that sums over the batch: requests cannot share a run."""
    g = aclpipe.Graph("total")
    x = g.input("x", shape=(None, 8))
    g.output("s", g.op("ReduceSum", x, dims=[0], keepDims=False))
    return g


def request(rows: int, seed: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal((rows, 8)).astype(np.float32)}


async def test_the_host_drives_the_first_devices_ray_made_visible(monkeypatch):
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "6,7")
    host = PipelineHost(GraphBundle.of(rows_graph()), backend="sim", npus=2)
    try:
        assert isinstance(host.pipeline, ReplicaPipeline)
        stats = host.stats()
        assert stats["visible_devices"] == ["6", "7"] and stats["devices"] == ["sim:0", "sim:1"]
        out = await host.run(x=[[0.0] * 8])  # JSON-style lists become the declared dtype
        assert out["y"].shape == (1, 4) and out["y"].dtype == np.float32
    finally:
        await host.aclose()
    assert not host.healthy()


async def test_requests_of_any_size_share_runs_and_get_their_own_rows_back():
    host = PipelineHost(rows_graph(), backend="sim")
    try:
        requests = [request(rows, seed) for seed, rows in enumerate([1, 3, 2, 5])]
        answers = await host.run_batch(requests)
        for answer, inputs in zip(answers, requests):
            np.testing.assert_allclose(answer["y"], (await host.run(**inputs))["y"], rtol=1e-6)
        assert host.stats()["signatures"] <= 1 + len(requests)  # 11 rows padded to 16: one shared run
        assert host.pipeline.stats().runs == 1 + len(requests)
    finally:
        await host.aclose()


async def test_graphs_whose_outputs_mix_the_rows_answer_request_by_request():
    host = PipelineHost(total_graph(), backend="sim")
    try:
        requests = [request(rows, seed) for seed, rows in enumerate([2, 3])]
        answers = await host.run_batch(requests)
        for answer, inputs in zip(answers, requests):
            np.testing.assert_allclose(answer["s"], inputs["x"].sum(axis=0), rtol=1e-5)
        verdict = host.batch_verdict(requests[0])
        assert not verdict.ok and "ReduceSum reduces the batch axis 0" in verdict.reason
    finally:
        await host.aclose()


async def test_a_host_whose_devices_are_all_out_is_unhealthy():
    host = PipelineHost(rows_graph(), backend="sim", npus=2)
    try:
        assert host.healthy()
        for device in host.pipeline.devices:
            device.inject_fault("kernel")
        for seed in range(2):
            with pytest.raises(aclpipe.ExecutionError):
                await host.run(**request(2, seed))
        assert not host.healthy()
    finally:
        await host.aclose()


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="npus"):
        PipelineHost(rows_graph(), npus=0)
