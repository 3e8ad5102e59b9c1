"""What the simulator's sanitizer (on by default) costs, measured side by side in one run.

The same pipeline runs a graph from ``graphs/`` on two simulated devices, one with the
sanitizer off and one with it on (every access checked for happens-before, padding and
executor destruction included), alternating batches of runs so that machine load hits both
alike; prints the median run latency of each and their ratio.

Run: ``python benchmarks/bench_sanitizer.py [--graph graphs/transformer.yaml] [--runs 60]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import anyio
import numpy as np

import aclpipe
from aclpipe import Pipeline
from aclpipe.graph import Graph, load_graph

GRAPHS = Path(__file__).resolve().parent.parent / "graphs"


def _inputs(graph: Graph, batch: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    arrays = {}
    for name, spec in graph.inputs.items():
        shape = tuple(batch if not isinstance(dim, int) else dim for dim in spec.shape)
        arrays[name] = rng.standard_normal(shape).astype(np.dtype(str(spec.dtype)))
    return arrays


async def _latencies(pipes: dict[bool, Pipeline], inputs: dict[str, np.ndarray], runs: int,
                     chunk: int = 5) -> dict[bool, list[float]]:
    seen: dict[bool, list[float]] = {False: [], True: []}
    for pipe in pipes.values():  # warm up: prepare, first runs
        for _ in range(3):
            await pipe.run(**inputs)
    while len(seen[True]) < runs:
        for sanitize, pipe in pipes.items():
            for _ in range(chunk):
                started = time.perf_counter()
                await pipe.run(**inputs)
                seen[sanitize].append(time.perf_counter() - started)
    return seen


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--graph", default=str(GRAPHS / "transformer.yaml"))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--runs", type=int, default=60)
    args = parser.parse_args(argv)
    graph = load_graph(args.graph)
    inputs = _inputs(graph, args.batch)
    devices = {sanitize: aclpipe.open_device("sim", sanitizer=sanitize) for sanitize in (False, True)}

    async def measure() -> dict[bool, list[float]]:
        pipes = {sanitize: Pipeline(graph, device, streams=4, depth=2) for sanitize, device in devices.items()}
        try:
            return await _latencies(pipes, inputs, args.runs)
        finally:
            for pipe in pipes.values():
                await pipe.aclose()

    seen = anyio.run(measure)
    for device in devices.values():
        device.close()
    off, on = (statistics.median(seen[sanitize]) * 1e3 for sanitize in (False, True))
    print(f"$ python benchmarks/bench_sanitizer.py {' '.join(argv if argv is not None else sys.argv[1:])}".rstrip())
    print(f"graph {Path(args.graph).name}, batch {args.batch}, 4 streams, depth 2, median of {args.runs} runs each")
    print(f"{'sanitizer':<12}{'ms/run':>10}")
    print(f"{'off':<12}{off:>10.3f}")
    print(f"{'on':<12}{on:>10.3f}")
    print(f"on / off: {on / off:.2f}x")


if __name__ == "__main__":
    main()
