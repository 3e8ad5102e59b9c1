"""The Ray Serve application over HTTP on a local cluster: batched requests in JSON and .npy,
clear errors for bad requests, figures on GET, and a killed replica replaced by Serve."""

from __future__ import annotations

import io
import json
import socket
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import ray
from ray import serve

import aclpipe
from aclpipe.ray import app

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_cluster")]

WEIGHT = np.random.default_rng(6).standard_normal((8, 4)).astype(np.float32)


def graph() -> aclpipe.Graph:
    g = aclpipe.Graph("served")
    x = g.input("x", shape=(None, 8))
    g.output("y", g.tanh(g.matmul(x, g.constant("w", WEIGHT))))
    return g


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def post(url: str, body: bytes, media: str) -> tuple[int, bytes, str]:
    request = urllib.request.Request(url, data=body, headers={"content-type": media})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.read(), answer.headers["content-type"]
    except urllib.error.HTTPError as error:
        return error.code, error.read(), error.headers["content-type"]


def ask(url: str, rows: int, seed: int) -> tuple[np.ndarray, Any]:
    x = np.random.default_rng(seed).standard_normal((rows, 8)).astype(np.float32)
    status, body, _ = post(url, json.dumps({"x": x.tolist()}).encode(), "application/json")
    return x, (np.asarray(json.loads(body)["y"], np.float32) if status == 200 else status)


@pytest.fixture(scope="module")
def url():
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(app(graph(), num_replicas=2, batch_size=4, backend="sim", health_check_period_s=1.0),
              name="served", route_prefix="/served")
    yield f"http://127.0.0.1:{port}/served"
    serve.delete("served")


def test_concurrent_requests_are_batched_and_answered_row_for_row(url):
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda seed: ask(url, 1 + seed % 3, seed), range(16)))
    for x, y in answers:
        np.testing.assert_allclose(y, np.tanh(x @ WEIGHT), rtol=1e-5, atol=1e-6)
    figures = json.loads(urllib.request.urlopen(url, timeout=60).read())
    assert figures["devices"] == ["sim:0"] and figures["visible_devices"][0] in ("0", "1")


def test_npy_in_npy_out(url):
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    buffer = io.BytesIO()
    np.save(buffer, x)
    status, body, media = post(url, buffer.getvalue(), "application/x-npy")
    assert status == 200 and media == "application/x-npy"
    np.testing.assert_allclose(np.load(io.BytesIO(body)), np.tanh(x @ WEIGHT), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("body", "media", "status", "message"), [
    (b'{"z": [[1]]}', "application/json", 400, "takes inputs"),
    (b'{"x": [1, 2]}', "application/json", 400, "2 dimensions"),
    (b'{"x": [[1, 2, 3]]}', "application/json", 400, "dim"),
    (b"a,b", "text/csv", 415, "unsupported content type"),
])
def test_bad_requests_get_a_clear_answer_alone(url, body, media, status, message):
    got, answer, _ = post(url, body, media)
    assert got == status and message in json.loads(answer)["error"]


def replicas() -> set[str]:
    return {actor["name"] for actor in ray.util.list_named_actors(all_namespaces=True)
            if actor["namespace"] == "serve" and "SERVE_REPLICA" in actor["name"] and "served" in actor["name"]}


def test_serve_replaces_a_replica_whose_process_died(url):
    before = replicas()
    assert len(before) == 2
    victim = sorted(before)[0]
    ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)
    deadline = time.monotonic() + 90
    while True:  # Serve's controller notices the dead replica and starts another
        now = replicas()
        if len(now) == 2 and victim not in now:
            break
        assert time.monotonic() < deadline, f"Serve did not replace {victim}: {now}"
        time.sleep(0.5)
    deadline = time.monotonic() + 60
    while True:  # the new replica answers once it is up
        x, y = ask(url, 2, 99)
        if not isinstance(y, int):
            break
        assert time.monotonic() < deadline, f"no answer after the restart: HTTP {y}"
        time.sleep(0.5)
    np.testing.assert_allclose(y, np.tanh(x @ WEIGHT), rtol=1e-5, atol=1e-6)
