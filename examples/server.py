"""An inference server: one shared pipeline answering many concurrent requests over TCP.

Protocol: newline-delimited JSON on a TCP connection.  A request is
``{"id": 7, "x": [[...64 floats...], ...]}`` (one or more rows); the answer is
``{"id": 7, "y": [[...10 probabilities...], ...]}`` or ``{"id": 7, "error": "..."}``.
A connection may send many requests without waiting; answers may come back in any order.

Every request is one ``await pipe.run(x=rows)`` on the same :class:`aclpipe.Pipeline`: runs
from different connections share its prepared programs and slots, and when all ``depth``
slots are busy a request waits for one (backpressure) instead of piling work on the device.

Clients send any number of rows, and every batch size would need its own prepared program,
so the pipeline pads each request up to a *shape bucket* (1, 2, 4, ... 64 rows) and slices the
answer back: at most seven programs, prepared once (``buckets=BUCKETS``); ``max_programs``
bounds what stays prepared, and requests of more than ``MAX_ROWS`` rows are refused.

Run: ``python examples/server.py [--port 8765]`` and, in another shell,
``echo '{"id": 1, "x": [[0.5, ...64 numbers...]]}' | nc 127.0.0.1 8765``;
or ``python examples/server.py --selftest 64``: start on a free port, send 64 concurrent
requests over several connections, check every answer against numpy, and exit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import numpy as np

import aclpipe

FEATURES, HIDDEN, CLASSES = 64, 128, 10
#: Batch sizes requests are padded up to: a handful of programs serve every request size.
BUCKETS = (1, 2, 4, 8, 16, 32, 64)
MAX_ROWS = BUCKETS[-1]


class Model:
    """A two-layer classifier with seeded weights, as an aclpipe graph and as numpy."""

    def __init__(self, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.w1 = (rng.standard_normal((FEATURES, HIDDEN)) / np.sqrt(FEATURES)).astype(np.float32)
        self.w2 = (rng.standard_normal((HIDDEN, CLASSES)) / np.sqrt(HIDDEN)).astype(np.float32)
        g = aclpipe.Graph("classifier")
        x = g.input("x", ("rows", FEATURES))
        h = g.relu(g.matmul(x, g.constant("w1", self.w1)))
        g.output("y", g.softmax(g.matmul(h, g.constant("w2", self.w2)), dim=-1))
        self.graph = g

    def reference(self, x: np.ndarray) -> np.ndarray:
        logits = np.maximum(x.astype(np.float64) @ self.w1, 0) @ self.w2
        e = np.exp(logits - logits.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)


def make_pipeline(model: Model, depth: int) -> aclpipe.Pipeline:
    """The one pipeline every connection shares."""
    return aclpipe.Pipeline(model.graph, "sim", streams=2, depth=depth, buckets=BUCKETS,
                            max_programs=len(BUCKETS))


class InferenceServer:
    """Answers requests on every connection with one shared pipeline."""

    def __init__(self, pipe: aclpipe.Pipeline):
        self.pipe = pipe
        self.answered = 0
        self.in_flight = 0
        self.peak_in_flight = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tasks: set[asyncio.Task[None]] = set()
        lock = asyncio.Lock()  # answers from concurrent requests must not interleave mid-line
        try:
            while line := await reader.readline():
                task = asyncio.create_task(self._answer(line, writer, lock))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            if tasks:
                await asyncio.gather(*tasks)
        finally:
            writer.close()

    async def _answer(self, line: bytes, writer: asyncio.StreamWriter, lock: asyncio.Lock) -> None:
        request_id: Any = None
        try:
            request = json.loads(line)
            request_id = request.get("id")
            rows = np.asarray(request["x"], dtype=np.float32)
            if rows.ndim != 2 or rows.shape[1] != FEATURES or not 1 <= rows.shape[0] <= MAX_ROWS:
                raise ValueError(f"x must be a list of 1 to {MAX_ROWS} rows of {FEATURES} numbers, got shape "
                                 f"{list(rows.shape)}")
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            try:
                out = await self.pipe.run(x=rows)
            finally:
                self.in_flight -= 1
            answer = {"id": request_id, "y": out["y"].tolist()}
            self.answered += 1
        except (ValueError, KeyError, TypeError, AttributeError, aclpipe.AclpipeError) as error:
            answer = {"id": request_id, "error": f"{type(error).__name__}: {error}"}
        async with lock:
            writer.write((json.dumps(answer) + "\n").encode())
            await writer.drain()


async def serve(port: int, depth: int) -> None:
    model = Model()
    async with make_pipeline(model, depth) as pipe:
        server = InferenceServer(pipe)
        listener = await asyncio.start_server(server.handle, "127.0.0.1", port)
        host, bound_port = listener.sockets[0].getsockname()[:2]
        print(f"listening on {host}:{bound_port} ({pipe!r}); Ctrl-C stops")
        async with listener:
            await listener.serve_forever()


# -- self-test -------------------------------------------------------------------------------------
async def _client(port: int, requests: list[tuple[int, np.ndarray]]) -> dict[int, Any]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for request_id, rows in requests:  # pipelined: all sent before any answer is read
            writer.write((json.dumps({"id": request_id, "x": rows.tolist()}) + "\n").encode())
        await writer.drain()
        answers = {}
        for _ in requests:
            answer = json.loads(await reader.readline())
            answers[answer["id"]] = answer
        return answers
    finally:
        writer.close()
        await writer.wait_closed()


async def selftest(count: int, connections: int, depth: int) -> int:
    model = Model()
    rng = np.random.default_rng(1)
    # Mostly single rows, some batches of 2 to 12: five buckets (1, 2, 4, 8, 16) serve them all.
    sizes = [1 if i % 4 else 2 + i % 11 for i in range(count)]
    requests = [(i, rng.standard_normal((rows, FEATURES)).astype(np.float32)) for i, rows in enumerate(sizes)]
    async with make_pipeline(model, depth) as pipe:
        server = InferenceServer(pipe)
        listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        async with listener:
            start = time.perf_counter()
            shares = [requests[k::connections] for k in range(connections)]
            results = await asyncio.wait_for(asyncio.gather(*(_client(port, share) for share in shares)), 120)
            elapsed = time.perf_counter() - start
        stats = pipe.stats()
    answers = {k: v for part in results for k, v in part.items()}
    worst, wrong = 0.0, []
    for request_id, rows in requests:
        answer = answers.get(request_id, {})
        if "y" not in answer:
            wrong.append(f"request {request_id}: {answer.get('error', 'no answer')}")
            continue
        difference = float(np.abs(np.asarray(answer["y"]) - model.reference(rows)).max())
        worst = max(worst, difference)
        if difference > 1e-5:
            wrong.append(f"request {request_id}: max |difference| {difference:.2e}")
    print(f"selftest: {count} requests over {connections} connections on port {port} answered in "
          f"{elapsed:.2f} s ({count / elapsed:,.0f} requests/s)")
    print(f"pipeline: {stats.runs} runs of {len(set(sizes))} batch sizes on {stats.prepared} input signatures "
          f"(buckets {list(BUCKETS)}), up to {server.peak_in_flight} requests awaiting at once (depth {depth}: the "
          "rest waited for a slot)")
    if wrong:
        print(f"FAILED: {len(wrong)} wrong answers: " + "; ".join(wrong[:5]))
        return 1
    print(f"all {count} answers match numpy (max |difference| {worst:.1e})")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8765, help="TCP port on 127.0.0.1 (default 8765)")
    parser.add_argument("--depth", type=int, default=4, help="runs in flight on the device (default 4)")
    parser.add_argument("--selftest", type=int, metavar="N", help="send N concurrent requests to a server on a "
                                                                  "free port, check the answers, exit")
    parser.add_argument("--connections", type=int, default=8, help="selftest: client connections (default 8)")
    args = parser.parse_args()
    if args.selftest is not None:
        if args.selftest < 1 or args.connections < 1:
            parser.error("--selftest and --connections must be positive")
        return asyncio.run(selftest(args.selftest, min(args.connections, args.selftest), args.depth))
    try:
        asyncio.run(serve(args.port, args.depth))
    except KeyboardInterrupt:
        print("stopped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
