"""Batched requests on a Ray worker's host never mix (no cluster needed): requests share a run
only when the planner proves the graph keeps rows apart, and a bad request fails alone."""

from __future__ import annotations

import numpy as np
import pytest

import aclpipe
from aclpipe.errors import ExecutionError, GraphError
from aclpipe.ray import PipelineHost

pytestmark = pytest.mark.anyio

WEIGHT = np.random.default_rng(23).standard_normal((8, 4)).astype(np.float32)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # what Ray's async actors run on


def running_total() -> aclpipe.Graph:
    """Every output leads with the batch dim, yet row i sums rows 0..i: joined requests would
    see each other's numbers."""
    g = aclpipe.Graph("running_total")
    g.output("y", g.cumsum(g.input("x", shape=(None, 8)), dim=0, name="cs"))
    return g


def rows() -> aclpipe.Graph:
    g = aclpipe.Graph("rows")
    g.output("y", g.tanh(g.matmul(g.input("x", shape=(None, 8)), g.constant("w", WEIGHT))))
    return g


def lookup() -> aclpipe.Graph:
    """Rows of a table by index: an index past the table fails on the device, not before."""
    g = aclpipe.Graph("lookup")
    table = g.constant("table", np.arange(40, dtype=np.float32).reshape(10, 4))
    g.output("y", g.embedding(table, g.input("i", shape=(None, 3), dtype="int64")))
    return g


def x_of(count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, 8)).astype(np.float32)


async def test_a_graph_that_mixes_rows_answers_each_request_with_its_own_rows():
    host = PipelineHost(running_total(), backend="sim")
    try:
        requests = [{"x": x_of(count, seed)} for seed, count in enumerate([2, 3, 1, 4])]
        answers = await host.run_batch(requests)
        for answer, request in zip(answers, requests):
            np.testing.assert_allclose(answer["y"], np.cumsum(request["x"], axis=0), rtol=1e-5, atol=1e-6)
        verdict = host.batch_verdict(requests[0])
        assert not verdict.ok and verdict.node == "cs"
    finally:
        await host.aclose()


async def test_seven_good_requests_are_answered_and_the_bad_one_fails_alone():
    host = PipelineHost(rows(), backend="sim")
    try:
        good = [{"x": x_of(1 + seed % 3, seed)} for seed in range(7)]
        requests = [*good[:3], {"x": [[1.0, 2.0, 3.0]]}, *good[3:]]  # 3 features, not 8
        answers = await host.run_batch(requests, return_exceptions=True)
        assert isinstance(answers[3], GraphError) and "input 'x'" in str(answers[3])
        for answer, request in zip(answers[:3] + answers[4:], good):
            assert isinstance(answer, dict)
            np.testing.assert_allclose(answer["y"], np.tanh(request["x"] @ WEIGHT), rtol=1e-5, atol=1e-6)
    finally:
        await host.aclose()


async def test_requests_wrong_in_each_way_are_refused_each_with_its_own_error():
    host = PipelineHost(rows(), backend="sim")
    try:
        requests = [{"x": x_of(2, 0)}, {"z": x_of(2, 1)}, {"x": [["a"] * 8]}, {"x": x_of(2, 2)[0]},
                    {"x": x_of(1, 3)}]
        answers = await host.run_batch(requests, return_exceptions=True)
        assert "missing ['x'], unknown ['z']" in str(answers[1])
        assert isinstance(answers[2], ValueError)
        assert isinstance(answers[3], GraphError) and "dims" in str(answers[3])
        for index in (0, 4):
            np.testing.assert_allclose(answers[index]["y"], np.tanh(requests[index]["x"] @ WEIGHT), rtol=1e-5,
                                       atol=1e-6)
        with pytest.raises(ValueError, match="unknown"):  # without return_exceptions: the first error
            await host.run_batch(requests)
    finally:
        await host.aclose()


async def test_a_value_the_device_refuses_fails_only_its_own_request():
    host = PipelineHost(lookup(), backend="sim")
    try:
        indices = [np.array([[1, 2, 3]]), np.array([[0, 9, 99]]), np.array([[4, 5, 6], [7, 8, 9]])]
        answers = await host.run_batch([{"i": i} for i in indices], return_exceptions=True)
        assert isinstance(answers[1], ExecutionError) and "out of range" in str(answers[1])
        table = np.arange(40, dtype=np.float32).reshape(10, 4)
        for index in (0, 2):
            np.testing.assert_array_equal(answers[index]["y"], table[indices[index]])
    finally:
        await host.aclose()


async def test_requests_of_several_shapes_share_runs_shape_by_shape():
    g = aclpipe.Graph("features")
    g.output("y", g.softmax(g.input("x", shape=(None, None)), dim=-1))
    host = PipelineHost(g, backend="sim")
    try:
        requests = [{"x": np.random.default_rng(seed).standard_normal((2, 4 + 4 * (seed % 2))).astype(np.float32)}
                    for seed in range(4)]
        answers = await host.run_batch(requests)
        for answer, request in zip(answers, requests):
            x = request["x"]
            expected = np.exp(x - x.max(axis=-1, keepdims=True))
            np.testing.assert_allclose(answer["y"], expected / expected.sum(axis=-1, keepdims=True), rtol=1e-5)
        assert host.pipeline.stats().runs == 2  # one joined run per shape
    finally:
        await host.aclose()
