"""What the Serve tests share: a local Serve instance with graphs deployed on a free port, and
a JSON POST that returns the status and body whatever the status."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from ray import serve

import aclpipe
from aclpipe.ray import app


@contextmanager
def serving(graphs: Sequence[tuple[str, aclpipe.Graph]], *, batch_wait_timeout_s: float) -> Iterator[str]:
    """Serve each (name, graph) at ``/name`` on a free local port (Serve's default is 8000);
    yields the base URL, and deletes the apps after."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    for name, graph in graphs:
        serve.run(app(graph, batch_size=8, batch_wait_timeout_s=batch_wait_timeout_s, backend="sim", name=name),
                  name=name, route_prefix=f"/{name}")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        for name, _ in graphs:
            serve.delete(name)


def post(url: str, body: bytes, timeout: float = 120) -> tuple[int, bytes]:
    """POST a JSON body; the status and the body, an error status's too."""
    request = urllib.request.Request(url, data=body, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
