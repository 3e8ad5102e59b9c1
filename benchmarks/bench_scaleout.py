"""Several simulated devices in one Pipeline, timing model on, sanitizer off.

``replicas``  throughput of ``stream()`` over a graph from ``graphs/`` on 1, 2 and 4 devices
              (``device=["sim:0", ...]``), against N times the one-device figure (goal: at
              least 0.9 x N).
``stages``    a deep model (Add + Relu layers on 4 MiB tables) split over 2 and 4 devices
              (``split="stages"``) against the same model on one device: throughput of
              ``stream()``, the stages' modelled costs, and what the boundary copies over the
              peer link cost per run (from a trace of each device).

With the timing model on, every task holds its engine for its modelled time multiplied by
``--time-scale`` wall seconds per device second, so the figures measure the schedule across
devices rather than how fast two CPU cores run numpy.  The host still enqueues every run:
at too small a time scale it becomes the bottleneck (the script prints the host's share).

Run: ``python benchmarks/bench_scaleout.py [replicas|stages ...] [--batches N] [--time-scale X]``
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import numpy as np

import aclpipe
from aclpipe import Pipeline
from aclpipe.graph import Graph, load_graph

GRAPHS = Path(__file__).resolve().parent.parent / "graphs"
QUICK_ARGS = ["--batches", "16", "--layers", "8"]


def _inputs(graph: Graph, batch: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = {name: tuple(batch if d is None or isinstance(d, str) else d for d in spec.shape)
              for name, spec in graph.inputs.items()}
    return {name: rng.standard_normal(shape).astype(graph.inputs[name].dtype.numpy) for name, shape in shapes.items()}


async def _steady_rate(pipe: Pipeline, batches: list[dict[str, np.ndarray]], skip: int) -> float:
    """Batches per wall second through ``stream()``.  With ``skip`` > 0, in the steady state:
    between the arrival of result ``skip`` and result ``-skip - 1``, so that filling and
    draining a pipeline of stages does not count; with 0, from the first batch sent to the
    last result (replicas fill and drain in one run's time)."""
    arrivals = [time.perf_counter()]
    async for _ in pipe.stream(batches):
        arrivals.append(time.perf_counter())
    if not skip:
        return len(batches) / (arrivals[-1] - arrivals[0])
    middle = arrivals[1 + skip:len(arrivals) - skip]
    return (len(middle) - 1) / (middle[-1] - middle[0])


async def _throughput(graph: Graph, devices: Any, batches: list[dict[str, np.ndarray]], skip: int,
                      **options: Any) -> float:
    """Steady-state batches per wall second, after a warm-up that prepares everything."""
    async with Pipeline(graph, devices, **options) as pipe:
        async for _ in pipe.stream(batches[:4]):
            pass
        return await _steady_rate(pipe, batches, skip)


def _open(count: int, time_scale: float) -> list[aclpipe.Device]:
    return [aclpipe.open_device(f"sim:{k}", timing=True, time_scale=time_scale, sanitizer=False) for k in range(count)]


def bench_replicas(args: argparse.Namespace) -> None:
    graph = load_graph(GRAPHS / f"{args.graph}.yaml")
    batches = [_inputs(graph, args.batch, seed) for seed in range(args.batches)]
    print(f"replicas: {args.graph}.yaml, batch {args.batch}, {args.batches} batches through stream(), "
          f"streams 4, depth 2 per device, timing model x{args.time_scale:g}")
    base = None
    for count in (1, 2, 4):
        devices = _open(count, args.time_scale)
        try:
            rate = anyio.run(_throughput, graph, devices if count > 1 else devices[0], batches, 0)
        finally:
            for device in devices:
                device.close()
        base = base or rate
        print(f"    {count} device(s): {rate:7.1f} batches/s   {rate / base:4.2f}x one device   "
              f"{rate / (base * count):4.2f} of {count}x")


def deep_model(layers: int, width: int) -> Graph:
    """A row ``x[1, width]`` broadcast against ``layers`` bias tables ``[width, width]`` (Add, then
    Relu), summed over rows at the end.  Every kernel moves 4-12 MiB, so each one fills all AI
    cores (one device is saturated, as a model that needs stages would be), while the host's
    numpy work per kernel stays far below its modelled time; inputs and outputs are one row,
    so the copies that matter are the stage boundaries."""
    rng = np.random.default_rng(11)
    g = Graph(f"deep{layers}")
    h = g.input("x", shape=(1, width))
    for layer in range(layers):
        bias = rng.standard_normal((width, width)).astype(np.float32)
        h = g.relu(g.add(h, g.constant(f"b{layer}", bias), name=f"add{layer}"), name=f"relu{layer}")
    g.output("y", g.op("ReduceSum", h, dims=[0], keepDims=True, name="sum"))
    return g


async def _stage_figures(graph: Graph, devices: Sequence[aclpipe.Device], batches: list[dict[str, np.ndarray]],
                         ) -> tuple[float, list[dict[str, Any]], float, list[float]]:
    """Throughput, the stages' figures, modelled µs of peer copies per run, and each device's
    modelled compute µs per run (the last two from traces)."""
    async with Pipeline(graph, list(devices), split="stages") as pipe:
        async for _ in pipe.stream(batches[:4]):
            pass
        for device in devices:
            device.backend.trace_begin()
        rate = await _steady_rate(pipe, batches, len(devices))
        traces = [d.backend.trace_end() for d in devices]
        stages = [dict(stage) for stage in pipe.stats().stages]
    peer = sum(r.duration for t in traces for r in t if (r.engine or "").startswith("peer:")) / len(batches)
    compute = [1e6 * sum(r.duration for r in t if r.engine == "compute") / len(batches) for t in traces]
    return rate, stages, peer * 1e6, compute


def bench_stages(args: argparse.Namespace) -> None:
    graph = deep_model(args.layers, args.width)
    batches = [_inputs(graph, 1, seed) for seed in range(args.batches)]
    weights = sum(a.nbytes for a in graph.constants.values())
    print(f"stages: {args.layers} x (Add of a {args.width}x{args.width} table + Relu), "
          f"{weights / 2**20:.0f} MiB of weights, {args.batches} batches (steady state), "
          f"timing model x{args.time_scale:g}")
    device = _open(1, args.time_scale)[0]
    try:
        single = anyio.run(lambda: _throughput(graph, device, batches, 2, depth=8))
    finally:
        device.close()
    print(f"    1 device (depth 8):       {single:7.1f} batches/s")
    for count in (2, 4):
        devices = _open(count, args.time_scale)
        try:
            rate, stages, peer_us, compute_us = anyio.run(_stage_figures, graph, devices, batches)
        finally:
            for each in devices:
                each.close()
        costs = ", ".join(f"{s['cost_us']:.0f}" for s in stages)
        busy = ", ".join(f"{us:.0f}" for us in compute_us)
        sends = sum(s["sends_bytes"] for s in stages)
        print(f"    {count} stages (depth {2 * count}):     {rate:7.1f} batches/s   {rate / single:4.2f}x one device")
        print(f"        planner's stage costs [{costs}] µs; the devices computed [{busy}] µs per run; boundary "
              f"copies {sends / 2**10:.0f} KiB/run, {peer_us:.1f} µs/run on the peer links")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="*", metavar="replicas|stages", help="what to run (default: both)")
    parser.add_argument("--batches", type=int, default=32)
    parser.add_argument("--time-scale", type=float, default=5000.0)
    parser.add_argument("--graph", default="transformer")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--width", type=int, default=1024)
    args = parser.parse_args()
    print(f"host: {os.cpu_count()} CPUs, load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    parts = {"replicas": bench_replicas, "stages": bench_stages}
    for part in args.parts or list(parts):
        if part not in parts:
            parser.error(f"unknown part {part!r}: choose from {', '.join(parts)}")
        parts[part](args)


if __name__ == "__main__":
    main()
