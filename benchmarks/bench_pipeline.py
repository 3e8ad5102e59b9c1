"""Pipeline benchmarks on the simulated NPU, sanitizer off, each printed side by side with its baseline.

``host``        host cost per node of ``Pipeline.run()`` on a prepared 200-node graph of
                zero-cost kernels (tiny Relu/Add on 8 floats) against ``OpRunner`` per op
                (``workspace="per-call"``); enqueue path and whole-run latency, captured
                (one model replay per run) and not captured (one launch-table walk per run),
                beside the backend's own cost for the same calls without the pipeline (the
                slot's table walked or its model executed, then the done record and the
                completion host function, with nothing around them).  ``--device ascend``
                runs it on the ascend binding (over the fake CANN of ``tests/fake_cann``,
                built into a temporary folder unless ``ACLPIPE_ASCEND_LIB`` is set).
``overlap``     ``stream()`` of 32 batches with the timing model on, H2D / compute / D2H of
                similar modelled time: makespan against the lower bound (busiest engine +
                fill + drain) and against one stream doing everything in order.
``memory``      planned activation memory per slot against the live-set lower bound and one
                buffer per value, for the graphs in ``graphs/`` and a four-tower model.
``streams``     a four-tower graph on 1, 2 and 4 streams with the timing model on: run
                latency, speedup, and events/waits against one per cross-stream edge.
``completion``  device done (end of a run's last D2H copy, device clock) to the awaiting task
                resuming with its result: median and p99, under asyncio and trio.
``completion-split``  the same held runs with steps of the result path taken out in turn
                (the fault query, the output copy (made by the completion host function) and
                its hand-over, both; measurement only), alternating in
                rounds within one process: what each step costs in place.  ``--cpu``: the loop
                thread's CPU time from the completion wait returning to the caller resuming
                instead (time descheduled left out: steadier on a busy machine).
``workspaces``  a 200-node graph in which 100 nodes need a workspace (Softmax on 8 x 16),
                4 streams, depth 2, under each workspace strategy: host cost per node
                (submit -> enqueued and whole run), waits per run, and the pool against static.

Run: ``python benchmarks/bench_pipeline.py [host|overlap|memory|streams|completion ...]``
(default: all).  Timing figures depend on the machine's load: run on a quiet machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import math
import os
import shlex
import statistics
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import numpy as np

import aclpipe
from aclpipe import Pipeline
from aclpipe.eager import OpRunner
from aclpipe.graph import Graph, load_graph

GRAPHS = Path(__file__).resolve().parent.parent / "graphs"


def _open(**options: Any) -> aclpipe.Device:
    return aclpipe.open_device("sim", sanitizer=False, **options)


def _open_host_device(name: str) -> aclpipe.Device:
    """``sim`` (sanitizer off) or ``ascend:0``; without ``ACLPIPE_ASCEND_LIB``, over a fake CANN built now."""
    if name == "sim":
        return _open()
    if not os.environ.get("ACLPIPE_ASCEND_LIB"):
        import importlib.util
        import tempfile

        script = Path(__file__).resolve().parent.parent / "tests" / "fake_cann" / "build.py"
        spec = importlib.util.spec_from_file_location("fake_cann_build", script)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        os.environ["ACLPIPE_ASCEND_LIB"] = str(module.build_fake_cann(tempfile.mkdtemp(prefix="fake_cann_")))
        print(f"ascend over the fake CANN built into {os.environ['ACLPIPE_ASCEND_LIB']} (kernels cost nothing)")
    return aclpipe.open_device(name if ":" in name else f"{name}:0")


def _without_capture(device: aclpipe.Device) -> None:
    """Make the device look like a backend without graph capture (runs enqueue node by node)."""
    backend = device.backend
    backend.capabilities = dataclasses.replace(backend.capabilities, graph_capture=False)


# -- 1. host cost per node -----------------------------------------------------------------------
def tiny_graph(nodes: int = 200, branches: int = 4) -> Graph:
    """``branches`` chains of alternating Relu and Add(h, x) on 8 floats: kernels that cost nothing."""
    g = Graph(f"tiny{nodes}")
    x = g.input("x", shape=(8,))
    for branch in range(branches):
        h = x
        for k in range(nodes // branches):
            h = g.relu(h) if k % 2 else g.add(h, x)
        g.output(f"y{branch}", h)
    return g


async def _pipeline_host_cost(device: aclpipe.Device, graph: Graph, runs: int) -> dict[str, float]:
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    async with Pipeline(graph, device, streams=4, depth=2) as pipe:
        for _ in range(20):  # warm up: prepare, capture, thread start-up
            await pipe.run(x=x)
        program = next(iter(pipe._res.cache)).program
        inside = _time_backend_calls(program)
        enqueue, whole, cpu, backend_part = [], [], [], []
        for _ in range(runs):
            inside[0] = 0.0
            started, cpu_started = time.perf_counter(), time.thread_time()
            accepted = pipe.accept({"x": x})  # what run() does, timed in two parts
            ticket = await pipe.start(*accepted)
            enqueued = time.perf_counter()
            backend_part.append(inside[0])
            await pipe.finish(ticket)
            whole.append(time.perf_counter() - started)
            enqueue.append(enqueued - started)
            cpu.append(time.thread_time() - cpu_started)
        del program.enqueue, program.enqueue_completion  # back to the class's methods
        captured = program.slots[0].graph is not None
        alone = _backend_alone(device, program, pipe._res.streams, runs)
    return {"enqueue": statistics.median(enqueue), "run": statistics.median(whole), "cpu": statistics.median(cpu),
            "captured": float(captured), "alone": alone, "inside": statistics.median(backend_part),
            "own": statistics.median(e - b for e, b in zip(enqueue, backend_part, strict=True))}


def _time_backend_calls(program: Any) -> list[float]:
    """Time, inside the pipeline's own runs, the two steps that are the backend's calls (the
    model executed or the table walked; the done record and the completion host function):
    on 2 shared cores they cost more there than alone, as the device's threads are still
    busy with the run before.  Returns the cell each run's total is added to."""
    total = [0.0]
    enqueue, completion = program.enqueue, program.enqueue_completion

    async def timed_enqueue(*args: Any) -> None:
        started = time.perf_counter()
        try:
            await enqueue(*args)
        finally:
            total[0] += time.perf_counter() - started

    def timed_completion(*args: Any) -> int:
        started = time.perf_counter()
        try:
            return int(completion(*args))
        finally:
            total[0] += time.perf_counter() - started

    program.enqueue, program.enqueue_completion = timed_enqueue, timed_completion
    return total


def _backend_alone(device: aclpipe.Device, program: Any, streams: list[aclpipe.Stream], runs: int) -> float:
    """The backend's own cost for one run's calls, without the pipeline: the slot's captured model
    executed on its replay stream and joined by D2H, or its launch table walked, then the run's
    done record and its completion host
    function (aclpipe's C helper, on a counter nobody awaits), with nothing else (median; the
    streams drain between)."""
    from aclpipe.runtime.completion import COUNTER_LENGTH, HOST_FUNC_ADDRESS, ffi

    slot, d2h = program.slots[0], streams[-1]
    backend = device.backend
    counter = ffi.new(f"int64_t[{COUNTER_LENGTH}]")
    args = ffi.new("aclpipe_advance_args *", {"counter": counter, "value": 1, "wake_fd": -1})
    address = int(ffi.cast("uintptr_t", args))
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        if slot.graph is not None:  # replayed on the slot's replay stream, joined by D2H (as Program does)
            replay = streams[slot.replay_lane].handle
            backend.model_execute(slot.graph.model, replay, None)
            backend.event_record(slot.joined.handle, replay)
            backend.stream_wait_event(d2h.handle, slot.joined.handle)
        else:
            slot.body.enqueue(None)
            slot.tail.enqueue(None)
        if slot.done is not None and slot.done is not slot.joined:
            backend.event_record(slot.done.handle, d2h.handle)
        backend.host_func_c(d2h.handle, HOST_FUNC_ADDRESS, address)
        times.append(time.perf_counter() - started)
        for stream in streams:
            stream.sync()
    return statistics.median(times)


def _op_runner_cost(device: aclpipe.Device, ops: int) -> float:
    stream = device.create_stream()
    x = device.upload(np.linspace(-1, 1, 8, dtype=np.float32))
    y = device.alloc(32)
    relu = OpRunner("Relu", stream, workspace="per-call").input(x, shape=(8,), dtype="float32") \
        .output(y, shape=(8,), dtype="float32")
    add = OpRunner("Add", stream, workspace="per-call").input(y, shape=(8,), dtype="float32") \
        .input(x, shape=(8,), dtype="float32").output(y, shape=(8,), dtype="float32")
    for _ in range(20):
        relu.run()
        add.run()
    best = math.inf
    for _ in range(3):
        started = time.perf_counter()
        for k in range(ops):
            (relu if k % 2 else add).run()
        best = min(best, (time.perf_counter() - started) / ops)
    stream.close()
    return best


def bench_host(args: argparse.Namespace) -> None:
    graph = tiny_graph()
    nodes = len(graph.nodes)
    print(f"\n== host cost per node on {args.device}: {nodes}-node graph of Relu/Add on 8 floats, 4 streams, "
          f"depth 2, median of {args.runs} sequential runs")
    device = _open_host_device(args.device)
    print(f"device: {device.backend.describe()}")
    can_capture = device.capabilities.graph_capture
    runner = _op_runner_cost(device, 2000)
    captured = anyio.run(_pipeline_host_cost, device, graph, args.runs) if can_capture else None
    device.close()
    device = _open_host_device(args.device)
    _without_capture(device)
    uncaptured = anyio.run(_pipeline_host_cost, device, graph, args.runs)
    device.close()
    print(f"{'path':<70} {'us/node':>9} {'OpRunner/this':>14}")
    print(f"{'OpRunner.run() per op (per-call, sync each)':<70} {runner * 1e6:9.2f} {1.0:13.1f}x")
    rows = [("captured model replay", captured, "model_execute, done record, host function (no pipeline)"),
            ("launch table, not captured", uncaptured, "launch table, done record, host function (no pipeline)")]
    for label, result, alone in rows:
        if result is None:
            print(f"Pipeline {label}: the device cannot capture")
            continue
        for part, text in (("enqueue", "submit -> enqueued"), ("run", "whole run() latency"),
                           ("cpu", "host CPU per run (thread time)"), ("alone", alone),
                           ("inside", "in the same runs: in the backend's calls"),
                           ("own", "in the same runs: aclpipe's own Python")):
            per_node = result[part] / nodes
            title = f"Pipeline {label}: {text}" if part not in ("alone", "inside", "own") else f"  {text}"
            title = f"  backend's own calls alone: {alone}" if part == "alone" else title
            print(f"{title:<70} {per_node * 1e6:9.2f} {runner / per_node:13.1f}x")
    goals = [("not captured", uncaptured, 1.5e-6), ("captured", captured, 0.5e-6)]
    for label, result, goal in goals:
        if result is None:
            continue
        whole, own = result["enqueue"] / nodes, result["own"] / nodes
        print(f"goal <= {goal * 1e6:.1f} us/node submit -> enqueued, {label}: {'met' if whole <= goal else 'missed'} "
              f"({whole * 1e6:.2f}; the backend's own calls alone {result['alone'] / nodes * 1e6:.2f}, in these runs "
              f"{result['inside'] / nodes * 1e6:.2f}); aclpipe's own share: {own * 1e6:.2f} "
              f"({'within' if own <= goal else 'over'} the goal)")


# -- 2. overlap of H2D, compute and D2H ------------------------------------------------------------------
def overlap_graph(elements: int) -> Graph:
    g = Graph("overlap")
    x = g.input("x", shape=(elements,))
    g.output("y", g.tanh(g.mul(x, x)))
    return g


async def _stream_makespan(device: aclpipe.Device, graph: Graph, batches: list[dict[str, np.ndarray]],
                           streams: int, depth: int) -> tuple[float, dict[str, float]]:
    engines = device.backend.engines
    async with Pipeline(graph, device, streams=streams, depth=depth) as pipe:
        async for _ in pipe.stream(batches[:2]):  # warm up
            pass
        busy_before = dict(engines.busy)
        started = engines.now()
        count = 0
        async for _ in pipe.stream(batches):
            count += 1
        makespan = engines.now() - started
    assert count == len(batches)
    return makespan, {engine: engines.busy[engine] - busy_before[engine] for engine in engines.busy}


def bench_overlap(args: argparse.Namespace) -> None:
    # The simulator's own per-task overhead (thread hand-offs, sleep overshoot) is fixed wall
    # time, so a larger scale shows the schedule rather than the simulator: 5000 by default.
    elements, count, scale = 64 * 1024, 32, args.time_scale or 5000.0
    print(f"\n== stream() of {count} batches of {elements} float32 ({elements * 4 // 1024} KiB), timing model on "
          f"(time_scale {scale:g} wall s per device s), best of {args.repeats}")
    graph = overlap_graph(elements)
    batches = [{"x": np.random.default_rng(i).standard_normal(elements).astype(np.float32)} for i in range(count)]
    results: dict[str, tuple[float, dict[str, float]]] = {}
    for _ in range(args.repeats):  # interleaved, best kept: host load only ever adds time
        for label, streams, depth in (("pipelined: streams=1, depth=4", 1, 4), ("in order: streams=1, depth=1", 1, 1)):
            device = _open(timing=True, time_scale=scale)
            result = anyio.run(_stream_makespan, device, graph, batches, streams, depth)
            device.close()
            if label not in results or result[0] < results[label][0]:
                results[label] = result
    _, busy = results["pipelined: streams=1, depth=4"]
    per_batch = {engine: seconds / count for engine, seconds in busy.items()}
    order = ("h2d", "compute", "d2h")
    bound = max(sum(per_batch[e] for e in order[:i]) + count * per_batch[engine]
                + sum(per_batch[e] for e in order[i + 1:]) for i, engine in enumerate(order))
    print("modelled device time per batch: " + ", ".join(f"{e} {per_batch[e] * 1e6:.1f} us" for e in order))
    print(f"lower bound (busiest engine + fill + drain): {bound * 1e3:.3f} ms device time")
    print(f"{'schedule':<32} {'makespan':>12} {'/ bound':>9} {'vs in order':>12}")
    in_order = results["in order: streams=1, depth=1"][0]
    for label, (makespan, _) in results.items():
        print(f"{label:<32} {makespan * 1e3:9.3f} ms {makespan / bound:8.3f}x {in_order / makespan:11.2f}x")
    ratio = results["pipelined: streams=1, depth=4"][0] / bound
    print(f"goal: pipelined within 1.05 of the bound: {'met' if ratio <= 1.05 else 'missed'} ({ratio:.3f})")
    _overlap_paths(graph, batches, scale, args.repeats)


#: Every way a run reaches the device: (label, workspace strategy, capture, devices, split, depth).
#: A stage pipeline's run holds a slot on every stage until it completes, so its depth must
#: cover the whole chain (H2D, compute, peer copy, compute, D2H: four runs here, not three).
_PATHS = (
    ("captured, pool", "pool", True, 1, None, 3),
    ("captured, cached", "cached", True, 1, None, 3),
    ("launch tables, static", "static", True, 1, None, 3),
    ("not captured, pool", "pool", False, 1, None, 3),
    ("per-call", "per-call", True, 1, None, 3),
    ("replicas on 2 devices", "pool", True, 2, None, 3),
    ("stages on 2 devices, depth 4", "pool", True, 2, "stages", 4),
)


async def _path_ratio(graph: Graph, batches: list[dict[str, np.ndarray]], devices: list[aclpipe.Device],
                      workspace: str, split: str | None, depth: int) -> float:
    """stream() after a warm-up; the makespan over the engine bound (the worst device for
    replicas; the chain over both devices for stages)."""
    from aclpipe.trace import engine_bound, record_trace

    target: Any = devices[0] if len(devices) == 1 else devices
    options: dict[str, Any] = {"split": split} if split else {}
    async with Pipeline(graph, target, streams=2, depth=depth, workspace=workspace, **options) as pipe:
        async for _ in pipe.stream(batches[:3]):
            pass
        recordings = [record_trace(device) for device in devices]
        async for _ in pipe.stream(batches):
            pass
        traces = [recording.stop() for recording in recordings]
    if split != "stages":
        return max(trace.stats().bound_ratio for trace in traces)
    offsets = [device.backend.engines.now() - devices[0].backend.engines.now() for device in devices]
    tasks = [dataclasses.replace(r, engine=f"{k}:{r.engine}", start=r.start - offsets[k], end=r.end - offsets[k])
             for k, trace in enumerate(traces) for r in trace.engine_tasks()]
    span = max(r.end for r in tasks) - min(r.start for r in tasks)
    return span / engine_bound(tasks, len(batches))


def _overlap_paths(graph: Graph, batches: list[dict[str, np.ndarray]], scale: float, repeats: int) -> None:
    print(f"\nevery path, streams=2, depth 3 (makespan / engine bound, best of {repeats}):")
    worst = 0.0
    for label, workspace, capture, count, split, depth in _PATHS:
        best = math.inf
        for _ in range(repeats):
            devices = [aclpipe.open_device(f"sim:{k}", sanitizer=False, timing=True, time_scale=scale)
                       for k in range(count)]
            if not capture:
                for device in devices:
                    _without_capture(device)
            try:
                best = min(best, anyio.run(_path_ratio, graph, batches, devices, workspace, split, depth))
            finally:
                for device in devices:
                    device.close()
        worst = max(worst, best)
        print(f"  {label:<30} {best:6.3f}x")
    print(f"goal: every path within 1.10 of the bound: {'met' if worst <= 1.10 else 'missed'} (worst {worst:.3f})")


# -- 3. planned memory -------------------------------------------------------------------------------
def four_towers(width: int = 64, depth: int = 4) -> Graph:
    """Four independent towers of matmul+relu over one input, summed at the end."""
    rng = np.random.default_rng(2)
    g = Graph("four_towers")
    x = g.input("x", shape=("batch", width))
    tops = []
    for tower in range(4):
        h = x
        for layer in range(depth):
            weight = (rng.standard_normal((width, width)) / math.sqrt(width)).astype(np.float32)
            h = g.relu(g.matmul(h, g.constant(f"t{tower}w{layer}", weight)))
        tops.append(h)
    g.output("y", g.add(g.add(tops[0], tops[1]), g.add(tops[2], tops[3])))
    return g


def bench_memory(args: argparse.Namespace) -> None:
    print("\n== planned activation memory per slot (batch 32, 4 streams)")
    graphs: list[tuple[str, Graph]] = [(path.name, load_graph(path)) for path in sorted(GRAPHS.glob("*.yaml"))]
    graphs.append(("four towers (built here)", four_towers()))
    print(f"{'graph':<26} {'nodes':>5} {'arena':>10} {'lower bound':>12} {'arena/bound':>12} {'one per value':>14} "
          f"{'saved':>7}")
    for name, graph in graphs:
        shapes = {inp: tuple(32 if not isinstance(d, int) else d for d in spec.shape)
                  for inp, spec in graph.inputs.items()}
        plan = aclpipe.make_plan(graph.bind(**shapes), streams=4)
        print(f"{name:<26} {len(plan.nodes):5d} {_kib(plan.arena_size):>10} {_kib(plan.lower_bound):>12} "
              f"{plan.arena_size / max(plan.lower_bound, 1):11.2f}x {_kib(plan.naive_bytes):>14} "
              f"{1 - plan.arena_size / max(plan.naive_bytes, 1):6.0%}")


def _kib(count: int) -> str:
    return f"{count / 1024:.1f} KiB"


# -- 4. streams on a branchy graph ---------------------------------------------------------------------
async def _latency(device: aclpipe.Device, graph: Graph, streams: int, runs: int) -> tuple[float, Any]:
    engines = device.backend.engines
    x = np.random.default_rng(0).standard_normal((32, 128)).astype(np.float32)
    async with Pipeline(graph, device, streams=streams, depth=1) as pipe:
        plan = pipe.plan_for(x=x.shape)
        await pipe.run(x=x)
        times = []
        for _ in range(runs):
            started = engines.now()
            await pipe.run(x=x)
            times.append(engines.now() - started)
    return statistics.median(times), plan


def bench_streams(args: argparse.Namespace) -> None:
    graph = load_graph(GRAPHS / "branchy.yaml")
    print(f"\n== four-tower graph ({graph.name}, batch 32) on 1, 2 and 4 streams, timing model on "
          f"(time_scale {args.time_scale or 2000.0:g}), median run latency of 15 runs, best of {args.repeats}")
    print(f"{'streams':>7} {'latency':>12} {'speedup':>8} {'events':>7} {'waits':>6} {'cross-stream edges':>19}")
    base = None
    for streams in (1, 2, 4):
        latency = math.inf
        for _ in range(args.repeats):
            device = _open(timing=True, time_scale=args.time_scale or 2000.0)
            measured, plan = anyio.run(_latency, device, graph, streams, 15)
            device.close()
            latency = min(latency, measured)
        base = base or latency
        print(f"{plan.num_streams:7d} {latency * 1e6:9.1f} us {base / latency:7.2f}x {plan.num_events:7d} "
              f"{plan.num_waits:6d} {plan.cross_stream_edges:19d}")
    print("(latency in device time; events/waits count the copy streams' too; one wait per cross-stream edge "
          "is what ONNX Runtime inserts)")


# -- 5. completion latency ---------------------------------------------------------------------------
def _one_node_graph() -> tuple[Graph, np.ndarray]:
    g = Graph("small")
    x = g.input("x", shape=(8,))
    g.output("y", g.relu(x))
    return g, np.ones(8, np.float32)


@contextlib.asynccontextmanager
async def _warm_one_node_pipeline(device: aclpipe.Device) -> AsyncIterator[tuple[Pipeline, np.ndarray, Any]]:
    """The completion benchmarks' pipeline (one node, one compute stream, depth 1) after 20
    warm-up runs: yields it, its input and its D2H stream's handle."""
    g, value = _one_node_graph()
    async with Pipeline(g, device, streams=1, depth=1) as pipe:
        for _ in range(20):
            await pipe.run(x=value)
        yield pipe, value, pipe._res.streams[-1].handle


async def _resumed_at(pipe: Pipeline, value: np.ndarray, clock: Callable[[], float],
                      release: Callable[[], None] | None) -> tuple[float, float]:
    """Run once; returns ``clock()`` as the caller resumes and how long after its completion
    host function started (the stamp that host function wrote).  With ``release``, first wait
    until the caller is parked in its wait, then let the held device go."""
    resumed: list[float] = []

    async def one() -> None:
        await pipe.run(x=value)
        resumed.extend((clock(), time.monotonic_ns()))

    async with anyio.create_task_group() as group:
        group.start_soon(one)
        if release is not None:
            await anyio.sleep(0.002)  # the run is enqueued and its caller waits
            release()
    lane, timeline = pipe._d2h_lane, pipe._res.timeline
    passed = timeline.passed_at(lane, timeline.value(lane))
    assert passed is not None
    return resumed[0], (resumed[1] - passed) / 1e9


async def _completion(device: aclpipe.Device, runs: int, held: bool) -> list[tuple[float, float]]:
    """Per run: (device done -> resumed, completion host function start -> resumed).

    ``held``: a latch holds the D2H stream until the caller is parked in its wait, so the
    figure is the completion path alone; otherwise the run is awaited back to back and, on a
    one-node graph, the device may finish before the host has enqueued the run's completion.
    """
    backend = device.backend
    latencies = []
    async with _warm_one_node_pipeline(device) as (pipe, value, d2h):
        for _ in range(runs):
            gate = backend.latch(d2h) if held else None
            backend.trace_begin()
            resumed, since_host_func = await _resumed_at(pipe, value, backend.engines.now,
                                                         gate.set if gate is not None else None)
            records = backend.trace_end()
            done = max(r.end for r in records if r.kind == "copy" and r.node == "d2h:y")
            latencies.append((resumed - done, since_host_func))
    return latencies


_GATE = r"""
#include <unistd.h>
void aclpipe_bench_gate(void *flag)
{
    while (!__atomic_load_n((volatile int *)flag, __ATOMIC_ACQUIRE))
        usleep(20);
}
"""


def _gate() -> tuple[Any, Any]:
    """A C host function for the ascend figure, compiled now with cffi: a gate that holds its
    stream until a flag is set."""
    import importlib
    import tempfile

    import cffi

    builder = cffi.FFI()
    builder.cdef("void aclpipe_bench_gate(void *);")
    builder.set_source("_aclpipe_bench_gate", _GATE)
    folder = tempfile.mkdtemp(prefix="aclpipe_gate_")
    builder.compile(tmpdir=folder)
    sys.path.insert(0, folder)
    module = importlib.import_module("_aclpipe_bench_gate")
    return module.ffi, module.lib


async def _completion_native(device: aclpipe.Device, runs: int, held: bool, gate: tuple[Any, Any]
                             ) -> list[tuple[float, float]]:
    """On a backend without a trace (ascend): per run, (nan, completion host function start ->
    resumed); ``held``: a C gate holds the D2H stream until the caller waits."""
    ffi, lib = gate
    backend = device.backend
    flag = ffi.new("int *")
    gate_fn = int(ffi.cast("uintptr_t", ffi.addressof(lib, "aclpipe_bench_gate")))
    flag_at = int(ffi.cast("uintptr_t", flag))
    latencies = []
    async with _warm_one_node_pipeline(device) as (pipe, value, d2h):

        def open_gate() -> None:
            flag[0] = 1

        for _ in range(runs):
            if held:
                flag[0] = 0
                backend.host_func_c(d2h, gate_fn, flag_at)
            _, since_host_func = await _resumed_at(pipe, value, time.perf_counter, open_gate if held else None)
            latencies.append((math.nan, since_host_func))
    return latencies


async def _bare_wake(runs: int) -> list[float]:
    """Baseline: a plain thread writes a pipe; the awaiting task resumes (no pipeline, no
    simulator).  Each loop's fastest way, as the timeline does it: under asyncio a reader
    registered once, under trio ``wait_readable`` (which keeps the descriptor registered)."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    loop = asyncio._get_running_loop()
    woken: list[asyncio.Future[None]] = []

    def readable() -> None:
        os.read(read_fd, 16)
        if woken and not woken[-1].done():
            woken[-1].set_result(None)

    if loop is not None:
        loop.add_reader(read_fd, readable)
    latencies = []

    def write(written: list[float]) -> None:
        time.sleep(0.0005)
        written.append(time.perf_counter())
        os.write(write_fd, b"x")

    for _ in range(runs):
        written: list[float] = []
        thread = threading.Thread(target=write, args=(written,))
        if loop is not None:
            woken.append(loop.create_future())
            thread.start()
            await woken[-1]
        else:
            thread.start()
            await anyio.wait_readable(read_fd)
            os.read(read_fd, 16)
        latencies.append(time.perf_counter() - written[0])
        thread.join()
    if loop is not None:
        loop.remove_reader(read_fd)
    os.close(read_fd)
    os.close(write_fd)
    return latencies


def _percentiles(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]
    return f"{statistics.median(ordered) * 1e6:7.1f} us {p99 * 1e6:7.1f} us"


#: Issue 12's goal 5: completion latency over the thread-to-loop baseline, median.
COMPLETION_GOAL_US = 30.0


def bench_completion(args: argparse.Namespace) -> None:
    runs = args.runs
    native = args.device != "sim"
    print(f"\n== completion latency on {args.device}, {runs} sequential runs of a one-node graph"
          f"{'' if native else ', timing off, device clock'}")
    gate = _gate() if native else None
    print(f"{'event loop':<10} {'device':<13} {'device done -> resumed':>24} {'host function -> resumed':>26} "
          f"{'baseline: thread -> loop':>26}")
    print(f"{'':<10} {'':<13} {'median':>11} {'p99':>10}   {'median':>11} {'p99':>10}   {'median':>11} {'p99':>10}")
    verdicts = []
    for backend in ("asyncio", "trio"):
        for held in (True, False):
            device = _open_host_device(args.device)
            if gate is not None:
                latencies = anyio.run(_completion_native, device, runs, held, gate, backend=backend)
            else:
                latencies = anyio.run(_completion, device, runs, held, backend=backend)
            device.close()
            bare = anyio.run(_bare_wake, runs, backend=backend)
            done = _percentiles([d for d, _ in latencies]) if not native else f"{'n/a':>10} {'':>10}"
            print(f"{backend:<10} {'held' if held else 'back to back':<13} {done}   "
                  f"{_percentiles([start for _, start in latencies])}   {_percentiles(bare)}")
            if held:
                over = (statistics.median(start for _, start in latencies) - statistics.median(bare)) * 1e6
                verdicts.append(f"{backend} {over:+.1f} us ({'met' if over <= COMPLETION_GOAL_US else 'missed'})")
    print(f"goal <= {COMPLETION_GOAL_US:.0f} us over the baseline, median, host function -> resumed, held: "
          + ", ".join(verdicts) + " (the baseline itself moves by tens of us between runs on a shared machine: "
          "read several runs, BENCHMARKS.md section 6)")
    print("device done = end of the run's last D2H copy (simulator trace; a backend without one says n/a); then "
          "the D2H stream passes the run's tail waits and reaches the completion host function (C: stamp the "
          "monotonic clock, store the counter, write the wake pipe); the pump task reads the pipe, wakes the "
          "waiter, and the outputs are copied out. host function -> resumed starts at that stamp, on both "
          "backends (what Pipeline.stats().completion reports). held = the D2H stream is held (a latch; on "
          "ascend a C gate) until the caller waits: the "
          "completion path alone; back to back = the host may still be enqueueing the run's completion when "
          "the device finishes. baseline = a plain Python thread writing a pipe to the awaiting task "
          "(asyncio: a reader registered once, as the timeline does; trio: wait_readable): the floor "
          "for any thread-to-loop wake on this machine")


#: The result path with steps taken out, to see what each costs in place (measurement only: a
#: pipeline without them is not correct).  Measured in rounds, the variants alternating.
_SPLIT_VARIANTS = ("whole path", "no fault query", "no output copy", "neither")


def _strip(pipe: Pipeline, variant: str) -> None:
    """Give ``pipe`` (and its programs) stand-ins, on the instances, for the steps ``variant``
    takes out of a run's result path; the whole path puts the class's methods back."""
    pipe.__dict__.pop("_collect_faults", None)
    programs = [entry.program for entry in pipe._res.cache]
    for program in programs:
        program.__dict__.pop("read_outputs", None)
        program.__dict__.pop("_result_copies", None)
    if variant in ("no fault query", "neither"):
        pipe.__dict__["_collect_faults"] = lambda run: None
    if variant in ("no output copy", "neither"):
        for program in programs:
            # Both halves: the copies the completion host function makes, and the hand-over.
            program.__dict__["_result_copies"] = lambda slot: None
            program.__dict__["read_outputs"] = lambda slot: {}


def _time_cpu_after_wait(pipe: Pipeline) -> list[float]:
    """Hook ``pipe``'s timeline (on the instance: one coroutine frame more for every variant)
    so that each completed wait appends the loop thread's CPU clock (``time.thread_time``);
    returns that list.  CPU time leaves out the time the thread was descheduled."""
    timeline = pipe._res.timeline
    woke: list[float] = []
    wait = timeline.wait

    async def timed_wait(lane: int, value: int) -> None:
        await wait(lane, value)
        woke.append(time.thread_time())

    timeline.wait = timed_wait  # type: ignore[method-assign]
    return woke


async def _held_split(device: aclpipe.Device, runs: int, gate: tuple[Any, Any] | None, cpu: bool = False
                      ) -> dict[str, list[list[float]]]:
    """Per variant, per round: completion host function start -> resumed of held runs (with
    ``cpu``: the loop thread's CPU time from the completion wait returning to the caller
    resuming, instead)."""
    backend = device.backend
    rounds = max(1, runs // 30)
    results: dict[str, list[list[float]]] = {variant: [] for variant in _SPLIT_VARIANTS}
    flag: Any = None
    if gate is not None:
        ffi, lib = gate
        flag = ffi.new("int *")
        gate_fn = int(ffi.cast("uintptr_t", ffi.addressof(lib, "aclpipe_bench_gate")))
        flag_at = int(ffi.cast("uintptr_t", flag))
    async with _warm_one_node_pipeline(device) as (pipe, value, d2h):
        woke = _time_cpu_after_wait(pipe) if cpu else []

        def open_gate() -> None:
            flag[0] = 1

        for _ in range(rounds):
            for variant in _SPLIT_VARIANTS:
                _strip(pipe, variant)
                latencies = []
                for _ in range(runs // rounds):
                    if gate is not None:
                        flag[0] = 0
                        backend.host_func_c(d2h, gate_fn, flag_at)
                        release = open_gate
                    else:
                        release = backend.latch(d2h).set
                    resumed, since_host_func = await _resumed_at(pipe, value, time.thread_time, release)
                    latencies.append(resumed - woke[-1] if cpu else since_host_func)
                results[variant].append(latencies)
        _strip(pipe, "whole path")
    return results


def bench_completion_split(args: argparse.Namespace) -> None:
    native = args.device != "sim"
    gate = _gate() if native else None
    what = "loop thread CPU time from the completion wait returning to the caller resuming" if args.cpu else ""
    print(f"\n== where the completion path goes, in place: held runs on {args.device}, {args.runs} per variant "
          f"in rounds of 30, the variants alternating (medians, us){'; ' + what if what else ''}")
    print(f"{'event loop':<10} {'baseline':>9}   " + "   ".join(f"{variant:>22}" for variant in _SPLIT_VARIANTS))
    for backend in ("asyncio", "trio"):
        device = _open_host_device(args.device)
        results = anyio.run(_held_split, device, args.runs, gate, args.cpu, backend=backend)
        device.close()
        base = 0.0 if args.cpu else statistics.median(anyio.run(_bare_wake, args.runs, backend=backend)) * 1e6
        whole = [statistics.median(r) for r in results["whole path"]]
        cells = []
        for variant in _SPLIT_VARIANTS:
            median = statistics.median(x for r in results[variant] for x in r) * 1e6
            saved = sorted((w - statistics.median(r)) * 1e6 for w, r in zip(whole, results[variant], strict=True))
            over = "" if args.cpu else f" (+{median - base:4.0f})"
            cells.append(f"{median:6.1f}{over}" + (
                f" -{statistics.median(saved):3.0f}" if variant != "whole path" else "     "))
        print(f"{backend:<10} {base:9.1f}   " + "   ".join(f"{cell:>22}" for cell in cells))
    print("each cell: host function -> resumed, (over the baseline), and -N: the median per round of what taking "
          "the step(s) out saved against the whole path in the same round. Measurement only: without the fault "
          "query a failed run would not raise; without the copy no result is returned"
          + (". --cpu: the loop thread's CPU time instead of latency (so no baseline); the hook adds one coroutine "
             "frame to every variant" if args.cpu else ""))

# -- 6. workspace strategies in the pipeline --------------------------------------------------------
def workspace_graph(nodes: int = 200, branches: int = 4) -> Graph:
    """``branches`` chains alternating Softmax (which needs a workspace) and Relu on 8 x 16 floats."""
    g = Graph(f"softmax{nodes}")
    x = g.input("x", shape=(8, 16))
    for branch in range(branches):
        h = x
        for k in range(nodes // branches):
            h = g.softmax(h, dim=-1) if k % 2 == 0 else g.relu(h)
        g.output(f"y{branch}", h)
    return g


async def _workspace_cost(device: aclpipe.Device, graph: Graph, strategy: str, runs: int) -> dict[str, float]:
    x = np.linspace(-1, 1, 128, dtype=np.float32).reshape(8, 16)
    async with Pipeline(graph, device, streams=4, depth=2, workspace=strategy) as pipe:
        for _ in range(10):
            await pipe.run(x=x)
        waits_before = pipe.stats().workspace["waits"]
        enqueue, whole = [], []
        for _ in range(runs):
            started = time.perf_counter()
            accepted = pipe.accept({"x": x})
            ticket = await pipe.start(*accepted)
            enqueue.append(time.perf_counter() - started)
            await pipe.finish(ticket)
            whole.append(time.perf_counter() - started)
        stats = pipe.stats().workspace
        captured = next(iter(pipe._res.cache)).program.slots[0].graph is not None
    return {"enqueue": statistics.median(enqueue), "run": statistics.median(whole),
            "waits": (stats["waits"] - waits_before) / runs, "peak": stats["peak"], "captured": float(captured)}


def bench_workspaces(args: argparse.Namespace) -> None:
    graph = workspace_graph()
    nodes = len(graph.nodes)
    runs = max(args.runs // 3, 20)
    print(f"\n== workspace strategies: {nodes}-node graph, 100 Softmax nodes with a workspace, 4 streams, depth 2, "
          f"median of {runs} runs")
    print(f"{'strategy':<10} {'captured':>9} {'enqueue us/node':>16} {'run us/node':>12} {'waits/run':>10} "
          f"{'peak KiB':>9} {'enqueue / static':>17}")
    results = {}
    for strategy in ("static", "pool", "cached", "per-call"):
        device = _open()
        results[strategy] = anyio.run(_workspace_cost, device, graph, strategy, runs)
        device.close()
    base = results["static"]["enqueue"]
    for strategy, result in results.items():
        print(f"{strategy:<10} {'yes' if result['captured'] else 'no':>9} {result['enqueue'] / nodes * 1e6:16.2f} "
              f"{result['run'] / nodes * 1e6:12.2f} {result['waits']:10.2f} {result['peak'] / 1024:9.1f} "
              f"{result['enqueue'] / base:16.2f}x")
    ratio, waits = results["pool"]["enqueue"] / base, results["pool"]["waits"]
    print(f"goal: pool <= 2x static per node, no waits: {'met' if ratio <= 2 and not waits else 'missed'} "
          f"({ratio:.2f}x, {waits:.2f} waits/run)")


BENCHES: dict[str, Callable[[argparse.Namespace], None]] = {
    "host": bench_host, "overlap": bench_overlap, "memory": bench_memory, "streams": bench_streams,
    "completion": bench_completion, "completion-split": bench_completion_split, "workspaces": bench_workspaces,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("benches", nargs="*", metavar="bench", help=f"any of {', '.join(BENCHES)} (default: all)")
    parser.add_argument("--runs", type=int, default=300, help="runs for host and completion (default 300)")
    parser.add_argument("--repeats", type=int, default=3, help="timing-model measurements repeated (best kept)")
    parser.add_argument("--device", default="sim", help="host, workspaces, completion: 'sim' (default) or "
                        "'ascend' (the fake CANN unless ACLPIPE_ASCEND_LIB points at a CANN installation)")
    parser.add_argument("--cpu", action="store_true",
                        help="completion-split: report the loop thread's CPU time after the wake-up instead of latency")
    parser.add_argument("--time-scale", type=float, default=None,
                        help="wall seconds per modelled device second (default: 5000 overlap, 2000 streams)")
    args = parser.parse_args(argv)
    unknown = [name for name in args.benches if name not in BENCHES]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; choose from {list(BENCHES)}")
    print("$ python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv if argv is not None else sys.argv[1:])]))
    print(f"aclpipe {aclpipe.__version__}, sanitizer off, python {sys.version.split()[0]}, numpy {np.__version__}")
    for name in args.benches or list(BENCHES):
        BENCHES[name](args)


if __name__ == "__main__":
    main()
