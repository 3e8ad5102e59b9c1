"""Lifecycle benchmarks on the simulated NPU, sanitizer off, each printed side by side with its baseline.

``cache``     400 requests of 1 to 400 rows through one pipeline: what it holds afterwards
              (programs, executors, device bytes, pinned buffers, streams against the device's
              limit: captured programs hold model streams) and the wall time, with the
              program cache unbounded (``max_programs`` above 400: one program per batch size,
              as before the bound existed), bounded (``max_programs=16``), and bounded with
              shape buckets (powers of two: 9 programs serve every size).
``overhead``  what the guards and the blocking entry points cost per call on a prepared one-node
              graph: the thread/event-loop check and the input checks ``await pipe.run()``
              makes (timed in a tight loop) as a share of its latency, ``pipe.run_sync()`` (an
              event loop per call) and ``aclpipe.run()`` (prepares and frees per call).

Run: ``python benchmarks/bench_lifecycle.py [cache|overhead ...]`` (default: both).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import anyio
import numpy as np

import aclpipe
from aclpipe import Pipeline
from aclpipe.graph import Graph

WIDTH = 64


def classifier() -> Graph:
    """x[rows, 64] -> matmul 128, relu, matmul 10, softmax (the server example's shape)."""
    rng = np.random.default_rng(0)
    g = Graph("classifier")
    x = g.input("x", shape=("rows", WIDTH))
    w1 = g.constant("w1", (rng.standard_normal((WIDTH, 128)) / 8).astype(np.float32))
    w2 = g.constant("w2", (rng.standard_normal((128, 10)) / 11).astype(np.float32))
    g.output("y", g.softmax(g.matmul(g.relu(g.matmul(x, w1)), w2), dim=-1))
    return g


def _held(device: aclpipe.Device, pipe: Pipeline) -> dict[str, Any]:
    stats = pipe.stats()
    memory = device.backend.memory
    return {"programs": stats.signatures, "prepared": stats.prepared, "executors": stats.executors,
            "device MiB": device.mem_info().used / 2**20, "pinned buffers": len(memory.live_host_buffers()),
            "streams": stats.streams, "stream limit": stats.device_streams["limit"], "captured": stats.captured,
            "evicted": stats.evicted, "starved": stats.starved}


async def _serve_every_size(sizes: list[int], **options: Any) -> tuple[dict[str, Any], float]:
    device = aclpipe.open_device("sim", sanitizer=False)
    rng = np.random.default_rng(1)
    batches = [rng.standard_normal((rows, WIDTH)).astype(np.float32) for rows in sizes]
    pipe = Pipeline(classifier(), device, streams=2, depth=2, **options)
    started = time.perf_counter()
    for x in batches:
        out = await pipe.run(x=x)
        assert out["y"].shape == (len(x), 10)
    wall = time.perf_counter() - started
    held = _held(device, pipe)
    await pipe.aclose()
    device.close()
    return held, wall


def bench_cache(args: argparse.Namespace) -> None:
    sizes = list(range(1, args.sizes + 1))
    np.random.default_rng(2).shuffle(sizes)  # requests arrive in any order
    buckets = tuple(2**k for k in range(max(sizes).bit_length() + 1))
    cases = [("unbounded (one program per size)", {"max_programs": len(sizes) + 1}),
             ("max_programs=16", {"max_programs": 16}),
             (f"max_programs=16, buckets {buckets[0]}..{buckets[-1]}", {"max_programs": 16, "buckets": buckets})]
    print(f"cache: {len(sizes)} requests of 1 to {max(sizes)} rows (shuffled), one pipeline each way")
    rows = [(name, *anyio.run(lambda options=options: _serve_every_size(sizes, **options))) for name, options in cases]
    base_held, base_wall = rows[0][1], rows[0][2]
    print(f"  {'':44} {'programs':>8} {'prepared':>8} {'executors':>9} {'device MiB':>10} {'pinned':>6} "
          f"{'streams':>9} {'captured':>8} {'evicted':>7} {'starved':>7} {'wall s':>7} {'memory / unbounded':>18}")
    for name, held, wall in rows:
        streams = f"{held['streams']}/{held['stream limit']}"
        print(f"  {name:44} {held['programs']:8d} {held['prepared']:8d} {held['executors']:9d} "
              f"{held['device MiB']:10.2f} {held['pinned buffers']:6d} {streams:>9} {held['captured']:8d} "
              f"{held['evicted']:7d} {held['starved']:7d} {wall:7.2f} "
              f"{held['device MiB'] / base_held['device MiB']:18.3f}")
    print("  streams: held by the pipeline (its own and its captured programs' models) / the device's limit; "
          "evicted: idle programs freed (beyond max_programs, or for the streams a new capture needed); "
          "starved: programs prepared uncaptured for lack of streams")
    print(f"  wall time bounded / unbounded: {rows[1][2] / base_wall:.2f}; with buckets: {rows[2][2] / base_wall:.2f}")


def _median_us(call: Callable[[], Any], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def _tight_us(call: Callable[[], Any], calls: int = 20000) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - started) / calls * 1e6


def bench_overhead(args: argparse.Namespace) -> None:
    g = Graph("one")
    x = np.ones((4, 8), np.float32)
    g.output("y", g.relu(g.input("x", shape=(4, 8))))
    device = aclpipe.open_device("sim", sanitizer=False)
    pipe = Pipeline(g, device, streams=1, depth=1)
    runs = args.runs

    def guard() -> None:
        pipe._affinity.enter("run")
        pipe._affinity.leave()

    async def measure() -> tuple[float, float, float]:
        for _ in range(20):
            await pipe.run(x=x)
        latencies = []
        for _ in range(runs):
            started = time.perf_counter()
            await pipe.run(x=x)
            latencies.append(time.perf_counter() - started)
        # The guards run() adds, in a tight loop inside the event loop (as run() calls them).
        return statistics.median(latencies) * 1e6, _tight_us(guard), _tight_us(lambda: pipe._check_inputs({"x": x}))

    latency, guard_us, checks_us = anyio.run(measure)
    sync = _median_us(lambda: pipe.run_sync(x=x), runs)
    pipe.close()
    oneshot = _median_us(lambda: aclpipe.run(g, x=x, device=device), max(runs // 10, 5))
    device.close()
    print(f"overhead: one Relu on 4x8 floats, median of {runs} calls (aclpipe.run: {max(runs // 10, 5)})")
    print(f"  await pipe.run()                        {latency:9.1f} us   1.00x")
    print(f"    of which the thread/event-loop check  {guard_us:9.2f} us   {guard_us / latency:.4f}x")
    print(f"    of which the input checks             {checks_us:9.2f} us   {checks_us / latency:.4f}x")
    print(f"  pipe.run_sync()                         {sync:9.1f} us   {sync / latency:.2f}x (an event loop per call)")
    print(f"  aclpipe.run()                           {oneshot:9.1f} us   {oneshot / latency:.2f}x "
          "(opens, prepares and frees a pipeline per call)")


BENCHES = {"cache": bench_cache, "overhead": bench_overhead}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("benches", nargs="*", metavar="bench", help=f"any of {', '.join(BENCHES)} (default: all)")
    parser.add_argument("--sizes", type=int, default=400, help="batch sizes for cache (default 400)")
    parser.add_argument("--runs", type=int, default=300, help="calls for overhead (default 300)")
    parser.add_argument("--quick", action="store_true", help="fewer sizes and calls")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.runs = 60, 60
    for name in args.benches or list(BENCHES):
        if name not in BENCHES:
            parser.error(f"unknown bench {name!r}; expected any of {', '.join(BENCHES)}")
        BENCHES[name](args)


if __name__ == "__main__":
    main()
