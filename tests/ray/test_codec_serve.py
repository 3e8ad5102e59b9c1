"""Bad request bodies and values over HTTP (issue 23, sections 3 and 4): the Serve app answers
each with HTTP 400 and a message, never 500, and good requests around them are answered."""

from __future__ import annotations

import io
import json
import socket
import urllib.error
import urllib.request

import numpy as np
import pytest
from ray import serve

import aclpipe
from aclpipe.ray import app

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_cluster")]


def graph() -> aclpipe.Graph:
    g = aclpipe.Graph("typed")
    n = g.input("n", shape=(None, 2), dtype="int32")
    g.output("m", g.op("Add", n, n))
    return g


def post(url: str, body: bytes, media: str) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers={"content-type": media})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@pytest.fixture(scope="module")
def url():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(app(graph(), backend="sim"), name="typed", route_prefix="/typed")
    yield f"http://127.0.0.1:{port}/typed"
    serve.delete("typed")


def npz(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    return buffer.getvalue()


GOOD = npz(n=np.ones((1, 2), np.int32))
BAD = {
    "floats_into_int": (b'{"n": [[1.9, -2.7]]}', "application/json", "float64 values cannot become int32"),
    "past_int32": (b'{"n": [[1099511627776, 1]]}', "application/json", "do not fit int32"),
    "null": (b'{"n": [[null, 1]]}', "application/json", "null (None)"),
    "nan_literal": (b'{"n": [[NaN, 1]]}', "application/json", "holds NaN"),
    "nested_deep": (b'{"n": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "application/json", "nested too deep"),
    "truncated_npz": (GOOD[: len(GOOD) // 2], "application/x-npz", "not a readable .npz archive"),
}


@pytest.mark.parametrize(("body", "media", "message"), list(BAD.values()), ids=list(BAD))
def test_bad_requests_are_400_with_a_message(url, body, media, message):
    status, answer = post(url, body, media)
    assert status == 400 and message in json.loads(answer)["error"]
    status, answer = post(url, b'{"n": [[3, -4]]}', "application/json")  # the replica is fine
    assert status == 200 and json.loads(answer) == {"m": [[6, -8]]}
