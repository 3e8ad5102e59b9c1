"""Control flow as control flow: issue 25's goal 1 on the table-recognizer class of model.

The model is ``bench_sanitizer.loop_model(--trips)``: an ONNX ``Loop`` of 1024 trips whose
body is a GRU-style update of ``h`` (two (batch, width) x (width, width) MatMuls, Sigmoid,
Tanh, the update) and whose exit is computed on the device (``max(h) < limit``: it stays
true, so every trip runs), as in the OCR table recognizer of issue 25.  Printed, with a
verdict per goal:

- import size: the catalog nodes of the specialized graph when the loop is unrolled (as
  before: ``UNROLL_TRIPS`` raised past the trip count) against now (the outer graph's nodes
  plus the body's, imported once), and how long each import took;
- first request: ``load_onnx`` + ``Pipeline`` prepare + the first run, wall seconds, with
  the sanitizer on (the default) and off; goal <= 5 s;
- steady run: the median of ``--runs`` runs against onnxruntime on one thread (the median of
  at least 30), sanitizer on and off, with the cost per body launch beside onnxruntime's per
  whole iteration (the reason when the goal is missed); goal <= 3x onnxruntime.

Run: ``python benchmarks/bench_control.py [--trips 1024] [--batch 16] [--width 128] [--runs 10]``
(``--unrolled-run`` also times the unrolled form, as imported before: a first request and two
steady runs per sanitizer setting).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import onnx

import aclpipe
from aclpipe.onnx import convert_control
from aclpipe.onnx.importer import load_onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sanitizer import loop_model

GOAL_FIRST_S = 5.0
GOAL_STEADY_RATIO = 3.0


def _nodes(graph: aclpipe.Graph) -> tuple[int, int]:
    """(outer nodes, outer nodes plus every Loop body's, nested included)."""
    outer = graph.nodes
    total = len(outer)
    pending = [node.attrs["region"].body for node in outer if node.op == "Loop"]
    while pending:
        body = pending.pop()
        total += len(body.nodes)
        pending.extend(node.attrs["region"].body for node in body.nodes if node.op == "Loop")
    return len(outer), total


def _onnx_nodes(graph: onnx.GraphProto) -> int:
    """The nodes of ``graph`` and of every subgraph in it."""
    return sum(1 + sum(_onnx_nodes(attribute.g) for attribute in node.attribute if attribute.HasField("g"))
               for node in graph.node)


def _import(model: onnx.ModelProto, unrolled: bool) -> tuple[aclpipe.Graph, float]:
    saved = convert_control.UNROLL_TRIPS
    if unrolled:
        convert_control.UNROLL_TRIPS = 1 << 62
    try:
        start = time.perf_counter()
        graph = load_onnx(model)
        graph.specialize()
        return graph, time.perf_counter() - start
    finally:
        convert_control.UNROLL_TRIPS = saved


async def _first_and_steady(model: onnx.ModelProto, feeds: dict[str, np.ndarray], sanitizer: bool, runs: int,
                            unrolled: bool = False, while_task: bool = True) -> tuple[float, list[float], np.ndarray]:
    """Seconds to the first result (load + prepare + run), then each steady run's seconds;
    ``while_task=False`` hides the device's conditional tasks (the exit is read back instead)."""
    saved = convert_control.UNROLL_TRIPS
    if unrolled:
        convert_control.UNROLL_TRIPS = 1 << 62
    device = aclpipe.open_device("sim", sanitizer=sanitizer)
    if not while_task:
        device.backend.capabilities = dataclasses.replace(device.backend.capabilities, conditional_models=False)
    try:
        start = time.perf_counter()
        graph = load_onnx(model)
        convert_control.UNROLL_TRIPS = saved
        async with aclpipe.Pipeline(graph, device) as pipe:
            result = await pipe.run(**feeds)
            first = time.perf_counter() - start
            steady = []
            for _ in range(runs):
                begin = time.perf_counter()
                result = await pipe.run(**feeds)
                steady.append(time.perf_counter() - begin)
            device.backend.trace_begin()
            await pipe.run(**feeds)
            # Device-to-host copies beyond the one output: the exit condition read back.
            _READBACKS[while_task] = sum(record.name.startswith("d2h") for record in device.backend.trace_end()) - 1
        return first, steady, next(iter(result.values()))
    finally:
        convert_control.UNROLL_TRIPS = saved
        device.close()


_READBACKS: dict[bool, int] = {}


def _onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray], runs: int) -> tuple[float, np.ndarray]:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    output: Any = session.run(None, feeds)[0]
    times = []
    for _ in range(runs):
        begin = time.perf_counter()
        output = session.run(None, feeds)[0]
        times.append(time.perf_counter() - begin)
    return statistics.median(times), output


def _verdict(met: bool) -> str:
    return "met" if met else "missed"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trips", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--unrolled-run", action="store_true", help="also time the unrolled form's first request")
    args = parser.parse_args(argv)
    model = loop_model(args.trips, args.batch, args.width)
    rng = np.random.default_rng(0)
    feeds = {name: rng.standard_normal((args.batch, args.width)).astype(np.float32) for name in ("x", "h0")}
    print(f"host: {os.cpu_count()} CPUs, load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"model: loop_model({args.trips}, batch={args.batch}, width={args.width}), exit computed on the device")

    unrolled, unrolled_s = _import(model, unrolled=True)
    now, now_s = _import(model, unrolled=False)
    before_nodes, _ = _nodes(unrolled)
    outer, total = _nodes(now)
    onnx_nodes = _onnx_nodes(model.graph)
    print(f"import size: unrolled {before_nodes} nodes ({unrolled_s:.2f} s) -> now {total} nodes "
          f"({outer} outer + {total - outer} in the body, {now_s:.3f} s); goal O(model), at most twice the "
          f"model's {onnx_nodes} ONNX nodes whatever the trip count: {_verdict(total <= 2 * onnx_nodes)}")
    del unrolled

    launches = total - outer  # the body's nodes, each one launch per iteration
    ort_s, want = _onnxruntime(model, feeds, max(args.runs, 30))
    firsts = {}
    for sanitizer in (True, False):
        first, steady, got = anyio.run(_first_and_steady, model, feeds, sanitizer, args.runs)
        error = float(np.abs(got - want).max())
        median = statistics.median(steady)
        firsts[sanitizer] = first
        label = "on " if sanitizer else "off"
        print(f"sanitizer {label}: first request {first:.2f} s (goal <= {GOAL_FIRST_S:g} s: "
              f"{_verdict(first <= GOAL_FIRST_S)}); steady {median * 1e3:.1f} ms vs onnxruntime "
              f"{ort_s * 1e3:.1f} ms = {median / ort_s:.1f}x (goal <= {GOAL_STEADY_RATIO:g}x: "
              f"{_verdict(median / ort_s <= GOAL_STEADY_RATIO)}); per iteration {median / args.trips * 1e6:.0f} us, "
              f"{median / args.trips / launches * 1e6:.1f} us per launch ({launches} launches) against onnxruntime's "
              f"{ort_s / args.trips * 1e6:.0f} us per whole iteration; max |error| {error:.1e}")
    # The exit decided on the device (a WHILE task in the captured model, where the product has
    # conditional tasks) against read back on the host once per block, sanitizer off.
    paths = {}
    for while_task in (True, False):
        _, steady, got = anyio.run(_first_and_steady, model, feeds, False, args.runs, False, while_task)
        paths[while_task] = (statistics.median(steady), float(np.abs(got - want).max()))
    labels = ((True, "WHILE task on the device"), (False, "read back on the host"))
    print("exit condition (sanitizer off):   " + "   |   ".join(
        f"{label}: {_READBACKS[key]} readbacks per run, steady {paths[key][0] * 1e3:.1f} ms, max |error| "
        f"{paths[key][1]:.1e}" for key, label in labels))
    if args.unrolled_run:
        for sanitizer in (True, False):
            first, steady, _ = anyio.run(_first_and_steady, model, feeds, sanitizer, 2, True)
            print(f"unrolled (before), sanitizer {'on ' if sanitizer else 'off'}: first request {first:.1f} s, "
                  f"steady {statistics.median(steady) * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
