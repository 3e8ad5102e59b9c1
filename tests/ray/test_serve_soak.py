"""A soak of the Serve app: a few thousand mixed good and bad requests from many concurrent
clients, on a graph whose rows are independent (joined into shared runs) and on one that mixes
them (one request per run).  Every good request gets its own right answer, every bad one a 400
naming its problem, and nothing is lost, duplicated or answered with another's data."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from serve_kit import post, serving

import aclpipe

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_cluster")]

WEIGHT = np.random.default_rng(29).standard_normal((8, 4)).astype(np.float32)
REQUESTS, CLIENTS = 2000, 24


def independent_rows() -> aclpipe.Graph:
    g = aclpipe.Graph("soak_rows")
    g.output("y", g.tanh(g.matmul(g.input("x", shape=(None, 8)), g.constant("w", WEIGHT))))
    return g


def mixed_rows() -> aclpipe.Graph:
    g = aclpipe.Graph("soak_total")
    g.output("y", g.cumsum(g.input("x", shape=(None, 8)), dim=0))
    return g


EXPECTED = {"soak_rows": lambda x: np.tanh(x @ WEIGHT), "soak_total": lambda x: np.cumsum(x, axis=0)}

#: Bodies no entry point may accept, each with a piece of the error it must get.
BAD = [
    (b'{"x": [[1, 2, 3]]}', "input 'x'"),  # a row of 3 where 8 are declared
    (b'{"y": [[0, 0, 0, 0, 0, 0, 0, 0]]}', "x"),  # no input x
    (b'{"x": [[NaN, 0, 0, 0, 0, 0, 0, 0]]}', "NaN"),  # not JSON
    (b'{"x": [[null, 0, 0, 0, 0, 0, 0, 0]]}', "x"),  # null is not a number
    (b'{"x": "eight floats"}', "x"),  # text
    (b'{"x": [[1e300, 0, 0, 0, 0, 0, 0, 0]]}', "x"),  # overflows float32
    (b'{"x": [[1, 2], [3, 4, 5, 6, 7, 8, 9, 10]]}', "x"),  # ragged
    (b'{"x": ' + b"[" * 2000 + b"]" * 2000 + b"}", ""),  # nested too deep
    (b'not json at all', ""),
]


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    with serving((("soak_rows", independent_rows()), ("soak_total", mixed_rows())), batch_wait_timeout_s=0.01) as url:
        yield url


def test_thousands_of_mixed_requests_from_many_clients_each_get_their_own_answer(base):
    rng = random.Random(7)
    plan: list[tuple[str, bytes, np.ndarray | None, str]] = []
    for index in range(REQUESTS):
        route = rng.choice(("soak_rows", "soak_total"))
        if rng.random() < 0.2:
            body, expected_error = rng.choice(BAD)
            plan.append((route, body, None, expected_error))
        else:  # each good request's rows carry its own index: another's data cannot pass unseen
            x = np.random.default_rng(index).standard_normal((rng.randint(1, 5), 8)).astype(np.float32)
            x[:, 0] = index
            plan.append((route, json.dumps({"x": x.tolist()}).encode(), x, ""))
    with ThreadPoolExecutor(CLIENTS) as pool:
        answers = list(pool.map(lambda item: post(f"{base}/{item[0]}", item[1]), plan))
    good = bad = 0
    for (route, _, x, expected_error), (status, body) in zip(plan, answers, strict=True):
        if x is None:
            assert status == 400, (route, body[:200])
            assert expected_error in json.loads(body)["error"], body[:300]
            bad += 1
            continue
        assert status == 200, (route, body[:300])
        got = np.asarray(json.loads(body)["y"], np.float32)
        np.testing.assert_allclose(got, EXPECTED[route](x), rtol=1e-4, atol=1e-4)
        good += 1
    assert good + bad == REQUESTS and good > REQUESTS // 2 and bad > REQUESTS // 10
