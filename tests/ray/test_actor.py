"""PipelineActor on a local Ray cluster: one NPU each, arrays through the object store, restarts."""

from __future__ import annotations

import time

import numpy as np
import pytest
import ray

import aclpipe
from aclpipe.ray import pipeline_actor

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_cluster")]


def graph() -> aclpipe.Graph:
    g = aclpipe.Graph("actor")
    x = g.input("x", shape=(None, 16))
    weight = np.random.default_rng(4).standard_normal((16, 8)).astype(np.float32)
    g.output("y", g.relu(g.matmul(x, g.constant("w", weight))))
    return g


def expected(x: np.ndarray) -> np.ndarray:
    return np.maximum(x @ graph().constants["w"], 0)


def test_each_actor_drives_the_npu_ray_gave_it():
    actors = [pipeline_actor(graph(), backend="sim") for _ in range(2)]
    try:
        x = np.random.default_rng(0).standard_normal((64, 16)).astype(np.float32)
        outputs = ray.get([actor.run.remote(x=x) for actor in actors])
        for out in outputs:
            np.testing.assert_allclose(out["y"], expected(x), rtol=1e-5, atol=1e-6)
        stats = ray.get([actor.stats.remote() for actor in actors])
        assert sorted(s["visible_devices"][0] for s in stats) == ["0", "1"]  # one NPU each
        assert all(s["devices"] == ["sim:0"] and s["runs"] == 1 for s in stats)
        answers = ray.get(actors[0].run_batch.remote([{"x": x[:3]}, {"x": x[3:4]}]))
        np.testing.assert_allclose(np.concatenate([a["y"] for a in answers]), expected(x[:4]), rtol=1e-5,
                                   atol=1e-6)
    finally:
        for actor in actors:
            ray.kill(actor)


def test_ray_restarts_a_dead_actor_with_its_pipeline():
    actor = pipeline_actor(graph(), backend="sim", max_restarts=1, max_task_retries=2)
    try:
        x = np.ones((2, 16), np.float32)
        assert ray.get(actor.run.remote(x=x))["y"].shape == (2, 8)
        first = ray.get(actor.stats.remote())["pid"]
        ray.kill(actor, no_restart=False)  # the process dies; Ray starts a new one, retrying calls
        deadline = time.monotonic() + 60
        while ray.get(actor.stats.remote(), timeout=60)["pid"] == first:  # the kill lands asynchronously
            assert time.monotonic() < deadline, "Ray did not restart the actor"
            time.sleep(0.1)
        out = ray.get(actor.run.remote(x=x), timeout=60)
        np.testing.assert_allclose(out["y"], expected(x), rtol=1e-5, atol=1e-6)
    finally:
        ray.kill(actor)
