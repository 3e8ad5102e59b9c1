"""Streaming with overlap: keep several runs in flight so copies hide behind compute.

With the simulator's timing model on, every copy holds the H2D or D2H engine and every kernel
holds AI cores for their modelled time.  One run at a time (depth 1) leaves the copy engines
idle while the cores work and the reverse; with depth 3, batch i+1's input copy, batch i's
compute and batch i-1's output copy run at once.  The overlap is measured from a device
trace, not assumed, and so is how close each schedule comes to the least time any schedule
could take on these engines (the busiest engine's total, plus one batch of the others to fill
and drain the pipeline): depth 3 should sit within a few percent of it.

Run: ``python examples/streaming.py [--batches 12] [--time-scale 1000] [--gantt stream.png]``
"""

from __future__ import annotations

import argparse
import asyncio

import numpy as np

import aclpipe
from aclpipe.trace import Trace, format_seconds, record_trace

FEATURES, CLASSES, BATCH = 4096, 16, 64


def build_graph() -> aclpipe.Graph:
    """A wide input (1 MiB per batch), normalised and classified: its H2D copy costs about what
    its kernels do, and the kernels are cheap for numpy, so the modelled times hold."""
    rng = np.random.default_rng(0)
    g = aclpipe.Graph("wide")
    x = g.input("x", ("batch", FEATURES))
    scale = g.constant("scale", rng.uniform(0.5, 1.5, FEATURES).astype(np.float32))
    shift = g.constant("shift", rng.normal(0, 0.1, FEATURES).astype(np.float32))
    h = g.relu(g.add(g.mul(x, scale), shift))
    weights = g.constant("w", rng.standard_normal((FEATURES, CLASSES)).astype(np.float32) * 0.02)
    g.output("y", g.softmax(g.matmul(h, weights), dim=-1))
    return g


async def stream_at_depth(graph: aclpipe.Graph, depth: int, batches: list[dict[str, np.ndarray]],
                          time_scale: float) -> Trace:
    device = aclpipe.open_device("sim", timing=True, time_scale=time_scale)
    try:
        async with aclpipe.Pipeline(graph, device, streams=2, depth=depth) as pipe:
            await pipe.run(**batches[0])  # prepare and warm up outside the measurement
            with record_trace(device) as recording:
                results = [out async for out in pipe.stream(batches)]
        assert len(results) == len(batches) and all(r["y"].shape == (BATCH, CLASSES) for r in results)
        assert recording.trace is not None
        return recording.trace
    finally:
        device.close()


async def main(count: int, time_scale: float, gantt: str | None) -> None:
    graph = build_graph()
    rng = np.random.default_rng(1)
    batches = [{"x": rng.standard_normal((BATCH, FEATURES)).astype(np.float32)} for _ in range(count)]
    print(f"{count} batches of [{BATCH}, {FEATURES}] float32 (1 MiB each), timing model on "
          f"(time scale x{time_scale:g}); times are modelled device time")
    throughput = {}
    for depth in (1, 3):
        trace = await stream_at_depth(graph, depth, batches, time_scale)
        stats = trace.stats()
        throughput[depth] = count * BATCH / stats.span
        shares = ", ".join(f"{engine} {share:.0%}" for engine, share in stats.share.items())
        print(f"depth {depth}: {format_seconds(stats.span)} for {count} batches, {throughput[depth]:,.0f} samples/s; "
              f"busy {shares}; overlap {stats.overlap_share:.0%} of the time; "
              f"copies hidden under compute {stats.copy_hidden:.0%}; {stats.bound_ratio:.2f}x the engine bound")
        if gantt and depth == 3:
            print(f"gantt chart: {trace.save_gantt(gantt, title='depth 3')}")
    print(f"depth 3 vs depth 1: {throughput[3] / throughput[1]:.2f}x the throughput")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--time-scale", type=float, default=1000.0, help="wall seconds per device second")
    parser.add_argument("--gantt", help="also draw the depth-3 timeline to this PNG (needs matplotlib)")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.batches, arguments.time_scale, arguments.gantt))
