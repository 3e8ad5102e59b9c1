"""What the simulator's sanitizer (on by default) costs, per model, measured side by side in one run.

For each model of the set, the same pipeline (4 compute streams, depth 2) runs on two
simulated devices, one with the sanitizer off and one with it on (every access checked for
happens-before, padding and executor destruction included), alternating batches of five
runs so that machine load hits both alike; one row per model gives the median steady run
latency of each and their ratio, and the same for the process's CPU time per run (every
thread's; on a shared machine the steadier figure, as other processes' time is not in it).  The set:

- the graphs of ``graphs/`` (``*.yaml``, batch ``--batch``);
- the ONNX zoo models written with onnx.helper (``graphs/onnx_zoo``, their first input
  signature), and the packaged real models whose packages are installed;
- ``loop256``: an ONNX ``Loop`` of 256 trips with a GRU-style body on (16, 128) floats and
  an exit condition computed on the device (the class of issue 25's table recognizer, smaller);
- ``chain4000`` and ``random4000``: the synthetic graphs of ``bench_scaling.py`` (a chain of
  Relu/Neg and a seeded random DAG, about 4,000 nodes each): the largest graphs of the set,
  where a check whose cost grows with what the allocation has seen would show.

The last line is issue 25's goal 2: ``goal: sanitizer <= 1.5x of off on every model: met/missed
(worst ratio, model)``.  Each model runs ``--runs`` timed runs per device at most, fewer
(at least 5) when a model's runs would take more than ``--budget`` seconds.

Run: ``python benchmarks/bench_sanitizer.py [--models NAME ...] [--batch 8] [--runs 30] [--budget 20]``
(``--list`` names the models).
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import onnx
from onnx import TensorProto, helper

import aclpipe
from aclpipe import Pipeline
from aclpipe.graph import Graph, load_graph
from aclpipe.onnx.importer import load_onnx

ROOT = Path(__file__).resolve().parent.parent
GRAPHS = ROOT / "graphs"
sys.path.insert(0, str(GRAPHS))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scaling import chain_graph, random_dag  # noqa: E402
from onnx_zoo import MODELS as ZOO  # noqa: E402
from onnx_zoo.packaged import PACKAGED  # noqa: E402

GOAL_RATIO = 1.5
ZOO_MODELS = ("bert_opset17", "mobile_opset13", "ocr_opset13")
Feeds = dict[str, Any]
Maker = Callable[[int], tuple[Any, Feeds]]


# -- the models --------------------------------------------------------------------------------------
def _inputs(graph: Graph, batch: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    arrays = {}
    for name, spec in graph.inputs.items():
        shape = tuple(batch if not isinstance(dim, int) else dim for dim in spec.shape)
        arrays[name] = rng.standard_normal(shape).astype(np.dtype(str(spec.dtype)))
    return arrays


def _yaml(path: Path) -> Maker:
    def make(batch: int) -> tuple[Any, Feeds]:
        graph = load_graph(path)
        return graph, _inputs(graph, batch)
    return make


def _synthetic(build: Callable[[int, int], Graph], size: int) -> Maker:
    def make(batch: int) -> tuple[Any, Feeds]:
        graph = build(size, 0)
        return graph, _inputs(graph, batch)
    return make


def _onnx(model: Any) -> Maker:
    def make(batch: int) -> tuple[Any, Feeds]:
        graph = load_onnx(model.model, input_shapes=getattr(model, "input_shapes", None))
        return graph, model.feeds()[0]
    return make


def loop_model(trips: int = 256, batch: int = 16, width: int = 128) -> onnx.ModelProto:
    """A ``Loop`` of ``trips`` iterations whose body is a GRU-style update of ``h`` and whose
    condition is computed from ``h`` on the device (it stays true: every trip runs).  The
    inputs have more elements than ``OnnxLimits.host_value_elements``, so the condition cannot
    be settled by making them host values: it is computed on the device, as in a real model."""
    rng = np.random.default_rng(0)

    def weight(name: str) -> onnx.TensorProto:
        return helper.make_tensor(name, TensorProto.FLOAT, (width, width),
                                  (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32).ravel())

    body = helper.make_graph(
        [helper.make_node("MatMul", ["h", "wz"], ["hz"]), helper.make_node("Add", ["hz", "x"], ["az"]),
         helper.make_node("Sigmoid", ["az"], ["z"]),
         helper.make_node("MatMul", ["h", "wh"], ["hh"]), helper.make_node("Add", ["hh", "x"], ["ah"]),
         helper.make_node("Tanh", ["ah"], ["candidate"]),
         helper.make_node("Sub", ["candidate", "h"], ["step"]), helper.make_node("Mul", ["z", "step"], ["moved"]),
         helper.make_node("Add", ["h", "moved"], ["h_next"]),
         helper.make_node("ReduceMax", ["h_next"], ["peak"], keepdims=0),
         helper.make_node("Less", ["peak", "limit"], ["keep_going"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h", TensorProto.FLOAT, (batch, width))],
        [helper.make_tensor_value_info("keep_going", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_next", TensorProto.FLOAT, (batch, width))],
        [weight("wz"), weight("wh"), helper.make_tensor("limit", TensorProto.FLOAT, (), [10.0])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "start", "h0"], ["h_final"], body=body)], f"loop{trips}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (batch, width)),
         helper.make_tensor_value_info("h0", TensorProto.FLOAT, (batch, width))],
        [helper.make_tensor_value_info("h_final", TensorProto.FLOAT, (batch, width))],
        [helper.make_tensor("trips", TensorProto.INT64, (), [trips]),
         helper.make_tensor("start", TensorProto.BOOL, (), [True])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _loop(trips: int) -> Maker:
    def make(batch: int) -> tuple[Any, Feeds]:
        rng = np.random.default_rng(0)
        feeds = {name: rng.standard_normal((16, 128)).astype(np.float32) for name in ("x", "h0")}
        return load_onnx(loop_model(trips)), feeds
    return make


def models() -> dict[str, Maker]:
    """Every model of the set, by name, smallest first within each kind."""
    table: dict[str, Maker] = {path.name: _yaml(path) for path in sorted(GRAPHS.glob("*.yaml"))}
    table.update({name: _onnx(ZOO[name]) for name in ZOO_MODELS})
    table.update({name: _onnx(model) for name, model in PACKAGED.items() if not model.skip and model.file()})
    table["loop256"] = _loop(256)
    table["chain4000"] = _synthetic(chain_graph, 4000)
    table["random4000"] = _synthetic(random_dag, 4000)
    return table


# -- measuring -----------------------------------------------------------------------------------------
async def _latencies(pipes: dict[bool, Pipeline], feeds: Feeds, runs: int, budget: float,
                     chunk: int = 5) -> tuple[dict[bool, list[float]], dict[bool, list[float]]]:
    """Wall seconds and process CPU seconds of each timed run, per sanitizer setting."""
    seen: dict[bool, list[float]] = {False: [], True: []}
    cpu: dict[bool, list[float]] = {False: [], True: []}
    for pipe in pipes.values():  # warm up: prepare, first runs
        for _ in range(3):
            await pipe.run(**feeds)
    started = time.perf_counter()
    while len(seen[True]) < runs and (len(seen[True]) < chunk or time.perf_counter() - started < budget):
        for sanitize, pipe in pipes.items():
            for _ in range(chunk):
                begun, begun_cpu = time.perf_counter(), time.process_time()
                await pipe.run(**feeds)
                seen[sanitize].append(time.perf_counter() - begun)
                cpu[sanitize].append(time.process_time() - begun_cpu)
    return seen, cpu


def measure(make: Maker, args: argparse.Namespace) -> tuple[int, dict[str, tuple[float, float]], int]:
    """(nodes launched, {"wall"/"cpu": (median ms off, median ms on)}, runs each) for one model."""
    graph, feeds = make(args.batch)
    devices = {sanitize: aclpipe.open_device("sim", sanitizer=sanitize) for sanitize in (False, True)}

    async def run() -> tuple[int, tuple[dict[bool, list[float]], dict[bool, list[float]]]]:
        pipes = {sanitize: Pipeline(graph, device, streams=4, depth=2) for sanitize, device in devices.items()}
        try:
            launched = len(pipes[False].plan_for(**feeds).nodes)  # every planned node is a launch
            return launched, await _latencies(pipes, feeds, args.runs, args.budget)
        finally:
            for pipe in pipes.values():
                await pipe.aclose()

    try:
        launched, (seen, cpu) = anyio.run(run)
    finally:
        for device in devices.values():
            device.close()
    medians = {clock: (statistics.median(times[False]) * 1e3, statistics.median(times[True]) * 1e3)
               for clock, times in (("wall", seen), ("cpu", cpu))}
    return launched, medians, len(seen[True])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--models", nargs="+", help="names from --list (default: all)")
    parser.add_argument("--batch", type=int, default=8, help="batch of the yaml, loop and synthetic graphs")
    parser.add_argument("--runs", type=int, default=30, help="timed runs per device at most")
    parser.add_argument("--budget", type=float, default=20.0, help="seconds of timed runs per model, about")
    parser.add_argument("--list", action="store_true", help="name the models and stop")
    args = parser.parse_args(argv)
    table = models()
    if args.list:
        print("\n".join(table))
        return
    unknown = sorted(set(args.models or ()) - set(table))
    if unknown:
        parser.error(f"unknown models {unknown}; --list names them")
    print("$ python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv if argv is not None else sys.argv[1:])]))
    print(f"host: {os.cpu_count()} CPUs, load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          "4 compute streams, depth 2, medians of alternating batches of 5 runs")
    print(f"{'':<37}{'---------- wall ----------':>30}{'---------- CPU -----------':>30}")
    print(f"{'model':<22}{'launches':>9}{'runs':>6}" + f"{'off ms':>11}{'on ms':>11}{'on/off':>8}" * 2
          + f"{'us/launch':>11}")
    worst = {"wall": (0.0, ""), "cpu": (0.0, "")}
    for name in args.models or table:
        launched, medians, runs = measure(table[name], args)
        cells = ""
        for clock, (off, on) in medians.items():
            cells += f"{off:>11.3f}{on:>11.3f}{on / off:>7.2f}x"
            worst[clock] = max(worst[clock], (on / off, name))
        off, on = medians["cpu"]
        print(f"{name:<22}{launched:>9}{runs:>6}{cells}{(on - off) * 1e3 / max(launched, 1):>11.2f}", flush=True)
    ratio, model = worst["wall"]
    print(f"goal: sanitizer <= {GOAL_RATIO:g}x of off on every model: {'met' if ratio <= GOAL_RATIO else 'missed'} "
          f"(worst {ratio:.2f}x, {model})")
    ratio, model = worst["cpu"]
    print(f"      in CPU time of the process: {'met' if ratio <= GOAL_RATIO else 'missed'} "
          f"(worst {ratio:.2f}x, {model})")
    print("us/launch: the process CPU time the sanitizer adds per launched node, (on - off) / launches")


if __name__ == "__main__":
    main()
