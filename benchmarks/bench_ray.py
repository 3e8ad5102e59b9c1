"""Latency Ray adds to one inference: an actor over an in-process pipeline, Serve over the actor.

A local Ray cluster (2 CPUs, 2 simulated NPUs) runs the same graph three ways, one request at
a time, timing model and sanitizer off (so the graph itself takes a fraction of a millisecond):

- in process: ``await pipe.run(x=batch)`` on a :class:`~aclpipe.Pipeline`;
- actor: ``await actor.run.remote(x=batch)`` on a :data:`~aclpipe.ray.PipelineActor` (the
  array goes through Ray's object store, the call through Ray's RPC);
- Serve: ``POST`` of the batch as ``.npy`` to :func:`~aclpipe.ray.app` over HTTP (one kept-alive
  connection; ``serve.batch`` with no wait), answered as ``.npy``.

Printed: median and p99 of each, and what each layer adds over the one below it.

Run: ``python benchmarks/bench_ray.py [--requests N] [--graph mlp] [--batch 8]``
"""

from __future__ import annotations

import os

# One BLAS thread in every process, as Ray gives its workers (OMP_NUM_THREADS=1): otherwise the
# in-process runs fight over two cores with BLAS threads and look slower than the actor's.
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402  (after the thread settings, which numpy reads when it loads)
import asyncio  # noqa: E402
import http.client  # noqa: E402
import io  # noqa: E402
import logging  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import aclpipe  # noqa: E402
from aclpipe.graph import load_graph  # noqa: E402

GRAPHS = Path(__file__).resolve().parent.parent / "graphs"
QUICK_ARGS = ["--requests", "50"]


def summary(seconds: list[float]) -> tuple[float, float]:
    ordered = sorted(seconds)
    return statistics.median(ordered) * 1e3, ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1e3


async def in_process(graph: aclpipe.Graph, x: np.ndarray, count: int) -> list[float]:
    device = aclpipe.open_device("sim", sanitizer=False)
    try:
        async with aclpipe.Pipeline(graph, device) as pipe:
            for _ in range(20):
                await pipe.run(x=x)
            took = []
            for _ in range(count):
                started = time.perf_counter()
                await pipe.run(x=x)
                took.append(time.perf_counter() - started)
            return took
    finally:
        device.close()


async def through_actor(graph: aclpipe.Graph, x: np.ndarray, count: int) -> list[float]:
    import ray

    from aclpipe.ray import pipeline_actor

    actor = pipeline_actor(graph, backend="sim")
    try:
        for _ in range(20):
            await actor.run.remote(x=x)
        took = []
        for _ in range(count):
            started = time.perf_counter()
            await actor.run.remote(x=x)
            took.append(time.perf_counter() - started)
        return took
    finally:
        ray.kill(actor)


def through_serve(graph: aclpipe.Graph, x: np.ndarray, count: int) -> list[float]:
    from ray import serve

    from aclpipe.ray import app

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(app(graph, num_replicas=1, batch_size=8, batch_wait_timeout_s=0.0, backend="sim"),
              name="bench", route_prefix="/bench")
    buffer = io.BytesIO()
    np.save(buffer, x)
    body = buffer.getvalue()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        took = []
        for index in range(20 + count):
            started = time.perf_counter()
            connection.request("POST", "/bench", body=body, headers={"content-type": "application/x-npy"})
            answer = connection.getresponse()
            answer.read()
            assert answer.status == 200, answer.status
            if index >= 20:
                took.append(time.perf_counter() - started)
        return took
    finally:
        connection.close()
        serve.delete("bench")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--graph", default="mlp")
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    import ray

    graph = load_graph(GRAPHS / f"{args.graph}.yaml")
    width = graph.inputs["x"].shape[1]
    x = np.random.default_rng(0).standard_normal((args.batch, width)).astype(np.float32)
    print(f"host: {os.cpu_count()} CPUs, load average {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"{args.graph}.yaml, batch {args.batch} ({x.nbytes} bytes in), {args.requests} requests one at a time, "
          "simulator without timing model or sanitizer")
    # In process first, before Ray starts threads of its own in this process.
    local = summary(asyncio.run(in_process(graph, x, args.requests)))
    logging.getLogger("ray._private.accelerators.npu").setLevel(logging.CRITICAL)  # no CANN here: simulated NPUs
    os.environ["ACLPIPE_SANITIZER"] = "0"  # the workers inherit it
    ray.init(num_cpus=2, resources={"NPU": 2}, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        actor = summary(asyncio.run(through_actor(graph, x, args.requests)))
        served = summary(through_serve(graph, x, args.requests))
    finally:
        from ray import serve

        serve.shutdown()
        ray.shutdown()
    rows = [("in-process Pipeline.run", local, None), ("PipelineActor.run (Ray)", actor, local),
            ("Serve app over HTTP (.npy)", served, actor)]
    for name, (median, p99), below in rows:
        added = "" if below is None else (f"   adds {median - below[0]:6.2f} ms median, "
                                          f"{p99 - below[1]:6.2f} ms p99 over the line above")
        print(f"    {name:28s} median {median:7.2f} ms   p99 {p99:7.2f} ms{added}")


if __name__ == "__main__":
    main()
