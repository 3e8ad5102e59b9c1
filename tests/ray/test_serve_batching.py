"""The Serve app's batching over HTTP on a local cluster: concurrent clients of a graph that
mixes rows each get their own answer, and a bad request among good ones fails alone."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from serve_kit import post, serving

import aclpipe

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_cluster")]

WEIGHT = np.random.default_rng(23).standard_normal((8, 4)).astype(np.float32)


def rows() -> aclpipe.Graph:
    g = aclpipe.Graph("rows")
    g.output("y", g.tanh(g.matmul(g.input("x", shape=(None, 8)), g.constant("w", WEIGHT))))
    return g


def running_total() -> aclpipe.Graph:
    """Outputs lead with the batch dim, yet row i sums rows 0..i."""
    g = aclpipe.Graph("running_total")
    g.output("y", g.cumsum(g.input("x", shape=(None, 8)), dim=0))
    return g


def post_all(url: str, bodies: list[bytes]) -> list[tuple[int, bytes]]:
    """Every body at once, from as many clients, so that Serve batches them."""
    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(lambda body: post(url, body), bodies))


def body_of(x: np.ndarray) -> bytes:
    return json.dumps({"x": x.tolist()}).encode()


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    # A long batch wait, so that concurrent requests surely share a batch.
    with serving((("rows", rows()), ("running_total", running_total())), batch_wait_timeout_s=0.2) as url:
        yield url


def test_a_graph_that_mixes_rows_gives_each_client_its_own_answer(base):
    xs = [np.random.default_rng(seed).standard_normal((2, 8)).astype(np.float32) for seed in range(8)]
    for x, (status, body) in zip(xs, post_all(f"{base}/running_total", [body_of(x) for x in xs])):
        assert status == 200, body
        np.testing.assert_allclose(np.asarray(json.loads(body)["y"], np.float32), np.cumsum(x, axis=0), rtol=1e-5,
                                   atol=1e-6)


def test_one_bad_request_among_concurrent_good_ones_fails_alone(base):
    good = [np.random.default_rng(seed).standard_normal((1 + seed % 3, 8)).astype(np.float32) for seed in range(7)]
    answers = post_all(f"{base}/rows", [body_of(x) for x in good] + [b'{"x": [[1, 2, 3]]}'])
    for x, (status, body) in zip(good, answers):
        assert status == 200, body
        np.testing.assert_allclose(np.asarray(json.loads(body)["y"], np.float32), np.tanh(x @ WEIGHT), rtol=1e-5,
                                   atol=1e-6)
    status, body = answers[-1]
    assert status == 400 and "input 'x'" in json.loads(body)["error"], body
