"""Serve a graph over HTTP with Ray Serve: replicas on NPUs, requests batched into the pipeline.

    python examples/ray_serve.py graphs/mlp.yaml --replicas 2            # serve until Ctrl-C
    python examples/ray_serve.py graphs/mlp.yaml --selftest 32           # start, check 32 answers, stop

Needs the ray extra (``pip install 'aclpipe[ray]'``).  Without an Ascend server the replicas
run on simulated NPUs: the script starts a local Ray cluster that advertises ``--npus``
"NPU" resources, and each replica asks Ray for one.  POST JSON (``{"x": [[...]]}``), a
``.npy`` array (``content-type: application/x-npy``) or an ``.npz`` archive to the route;
GET answers a replica's figures.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio
import numpy as np

import aclpipe

try:
    import ray
    from ray import serve

    from aclpipe.ray import app
except ImportError:
    sys.exit("this example needs Ray Serve: pip install 'aclpipe[ray]'")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("graph", nargs="?", default=str(Path(__file__).resolve().parent.parent / "graphs" / "mlp.yaml"))
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--npus", type=int, default=2, help="NPUs the local cluster advertises")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--backend", default="sim", help="sim, or ascend on an Ascend server")
    parser.add_argument("--selftest", type=int, metavar="N", help="send N requests, check them, stop")
    return parser.parse_args()


def request(url: str, x: np.ndarray, as_npy: bool) -> tuple[dict[str, np.ndarray], float]:
    """POST one batch; returns the outputs and the seconds the answer took."""
    if as_npy:
        buffer = io.BytesIO()
        np.save(buffer, x)
        body, media = buffer.getvalue(), "application/x-npy"
    else:
        body, media = json.dumps({"x": x.tolist()}).encode(), "application/json"
    started = time.perf_counter()
    with urllib.request.urlopen(urllib.request.Request(url, data=body, headers={"content-type": media}),
                                timeout=120) as answer:
        payload, kind = answer.read(), answer.headers["content-type"]
    took = time.perf_counter() - started
    if kind == "application/json":
        return {k: np.asarray(v, np.float32) for k, v in json.loads(payload).items()}, took
    loaded = np.load(io.BytesIO(payload))
    return ({name: loaded[name] for name in loaded.files} if kind == "application/x-npz" else {"out": loaded}), took


async def local_answers(graph: aclpipe.Graph, batches: list[np.ndarray]) -> list[dict[str, np.ndarray]]:
    async with aclpipe.Pipeline(graph) as pipe:
        return [await pipe.run(x=x) for x in batches]


def selftest(url: str, graph: aclpipe.Graph, count: int, replicas: int) -> bool:
    rng = np.random.default_rng(0)
    width = graph.inputs["x"].shape[1]
    batches = [rng.standard_normal((1 + k % 4, width)).astype(np.float32) for k in range(count)]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda k: request(url, batches[k], as_npy=k % 2 == 1), range(count)))
    expected = anyio.run(local_answers, graph, batches)
    wrong = 0
    for (got, _), want in zip(answers, expected):
        for name, value in got.items():
            reference = want[name] if name in want else next(iter(want.values()))
            wrong += not np.allclose(value, reference, rtol=1e-4, atol=1e-5)
    latencies = sorted(took for _, took in answers)
    print(f"{count} requests answered by {replicas} replicas: p50 {1e3 * latencies[len(latencies) // 2]:.1f} ms, "
          f"p99 {1e3 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]:.1f} ms")
    print(f"all {count} answers match the local pipeline" if not wrong else f"{wrong} answers differ")
    return wrong == 0


def main() -> int:
    args = parse_args()
    graph = aclpipe.load_graph(args.graph) if not args.graph.endswith(".onnx") else aclpipe.load_onnx(args.graph)
    # Ray looks for CANN's Python package to name the NPU type; simulated NPUs have none.
    logging.getLogger("ray._private.accelerators.npu").setLevel(logging.CRITICAL)
    ray.init(num_cpus=2, resources={"NPU": args.npus}, include_dashboard=False, logging_level="ERROR",
             log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": args.port})
        serve.run(app(args.graph, num_replicas=args.replicas, batch_size=args.batch_size, backend=args.backend),
                  name="aclpipe", route_prefix="/infer")
        url = f"http://127.0.0.1:{args.port}/infer"
        if args.selftest:
            return 0 if selftest(url, graph, args.selftest, args.replicas) else 1
        print(f"serving {graph.name!r} at {url} on {args.replicas} replicas; Ctrl-C stops")
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    finally:
        serve.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
