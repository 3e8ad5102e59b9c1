"""An actor no node can host is refused when it is created, not left pending for ever."""

from __future__ import annotations

import numpy as np
import pytest
import ray

import aclpipe
from aclpipe.ray import app, pipeline_actor

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_cluster")]


def graph() -> aclpipe.Graph:
    g = aclpipe.Graph("resources")
    g.output("y", g.relu(g.input("x", shape=(None, 4))))
    return g


def test_more_npus_than_any_node_has_is_refused_at_creation():
    # The test cluster has one node with two NPUs.
    with pytest.raises(ValueError, match="an actor on 3 NPUs cannot be placed: the most NPUs on one live node"):
        pipeline_actor(graph(), npus=3, backend="sim")
    with pytest.raises(ValueError, match="npus must be a positive int"):
        pipeline_actor(graph(), npus=0, backend="sim")


def test_a_serve_replica_on_more_npus_than_any_node_has_is_refused_at_creation():
    with pytest.raises(ValueError, match="a Serve replica on 3 NPUs cannot be placed"):
        app(graph(), npus_per_replica=3, backend="sim")


def test_an_actor_the_cluster_can_host_still_starts():
    actor = pipeline_actor(graph(), npus=2, backend="sim")
    try:
        x = np.array([[-1, 2, -3, 4]], np.float32)
        np.testing.assert_array_equal(ray.get(actor.run.remote(x=x), timeout=120)["y"], np.maximum(x, 0))
    finally:
        ray.kill(actor)
