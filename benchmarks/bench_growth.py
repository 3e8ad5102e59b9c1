"""How each stage's cost grows with the graph, on graphs of several shapes (issue 25, goal 4).

``bench_scaling.py`` follows one generator (a random DAG, or a chain) from 100 to 20,000
nodes; this benchmark asks the same question of five shapes, each at ``--sizes`` nodes
(default 500, 1,000, 2,000, 4,000, 8,000), and fits the growth of every stage:

- ``chain``: one long chain of unary ops (Relu, Neg, Abs, and a MatMul every eighth node);
- ``fan``: one input fanned out to n/3 parallel two-op branches, summed back by a balanced
  tree of Adds (the widest graph: n/3 values live at once);
- ``random``: a seeded random DAG, each node reading a recent value (and half of them a second
  one, now and then from far back), like ``bench_scaling.random_dag``;
- ``branchy``: a deep net of residual blocks, each 2-4 parallel branches of 1-3 ops merged
  by Adds onto the skip connection (ResNet/Inception-like);
- ``loop``: a recurrent cell (MatMul, Add, Relu, Sub, Mul, Add: a GRU-like update of ``h``
  reading the input ``x`` each step) repeated n/6 times, as a graph of n nodes (the later
  stages take it).  Its ONNX form is a real ``Loop`` node over that cell with n/6 trips, which
  imports as one ``Loop`` node holding the body (control flow, not unrolled), so its import
  stays flat as the trips grow;
- ``loopexit``: the same ``Loop`` with an exit condition computed on the device (a ReduceMax
  of ``h`` against a limit), as in issue 25's table recognizer (its batch is 32, so the
  condition cannot become a host value); it too imports as one ``Loop`` node.

Every value is float32 ``(8, 64)``; MatMuls share one 64x64 weight.  The stages, each timed
once per graph in this process (CPU seconds of the process, the steadier figure on a shared
machine; wall seconds are fitted too):

- ``import``: ``load_onnx`` of the same graph written with onnx.helper, then ``specialize``;
- ``bind``: ``graph.bind(x=...)`` of the graph made with the builder API;
- ``plan``: ``make_plan(bound, streams=4)``;
- ``prepare``: ``Pipeline(graph, device, streams=4, depth=2).prepare(x=...)`` on the simulated
  NPU, sanitizer off (bind and plan again, constants, phase one for every node in every slot,
  capture);
- ``first run``: the first ``await pipe.run(x=...)``.

The growth is the least-squares slope of log(time) against log(nodes) over the sizes.  At
these sizes n log n itself fits a slope of about 1.1 (1 + 1/ln n, with ln n between 6 and 9),
so a stage counts as **<= n log n** when its slope is at most ``--threshold`` (default 1.15);
above that it is reported as super-linear.  The last line is the verdict over every shape
and stage.  A warm-up graph of the smallest size of each shape runs first and is not counted.

A slope below 1 is no flaw: ``plan_memory`` places buffers greedily against their conflict
lists while the conflicting pairs number at most ``PAIR_BUDGET`` (30,000) and sweeps in
launch order beyond, so a small graph can cost more to plan than a larger one.

Run: ``python benchmarks/bench_growth.py [--shapes chain fan random branchy loop loopexit]
[--sizes 500 1000 2000 4000 8000] [--threshold 1.15]`` (about 70 s with the defaults on 2 shared cores).
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import anyio
import numpy as np
import onnx
from onnx import TensorProto, helper

import aclpipe
from aclpipe.graph import Graph
from aclpipe.onnx.importer import load_onnx

BATCH, WIDTH = 8, 64
#: ``loopexit``'s fixed batch: its input then holds more than ``OnnxLimits.host_value_elements``
#: (1,024) elements, so the importer cannot settle the condition by making it a host value.
EXIT_BATCH = 32
SIZES = (500, 1000, 2000, 4000, 8000)
THRESHOLD = 1.15
STAGES = ("import", "bind", "plan", "prepare", "first run")
UNARY = ("Relu", "Neg", "Abs")
BINARY = ("Add", "Mul", "Sub", "Max")


# -- the shapes, written once as a list of nodes -------------------------------------------------------
@dataclass
class Net:
    """A graph as plain data: node k makes value k + 1 from the values it names (value 0 is
    the input ``x``); ``MatMul`` multiplies by the shared weight.  Values nobody reads are
    summed into the output by :meth:`finish`, so nothing is pruned."""

    name: str
    nodes: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    cell: list[tuple[str, tuple[int, ...]]] | None = None  # ``loop``: the body repeated
    exit: bool = False  # ``loop exit``: the Loop's condition is computed on the device

    def add(self, op: str, *inputs: int) -> int:
        self.nodes.append((op, inputs))
        return len(self.nodes)

    def finish(self) -> Net:
        read = {value for _, inputs in self.nodes for value in inputs}
        unread = [value for value in range(1, len(self.nodes) + 1) if value not in read]
        while len(unread) > 1:  # a balanced tree of Adds
            unread = [self.add("Add", *unread[k:k + 2]) if k + 1 < len(unread) else unread[k]
                      for k in range(0, len(unread), 2)]
        return self


def chain(size: int, rng: np.random.Generator) -> Net:
    net, value = Net(f"chain{size}"), 0
    for index in range(size):
        value = net.add("MatMul" if index % 8 == 7 else UNARY[index % 3], value)
    return net.finish()


def fan(size: int, rng: np.random.Generator) -> Net:
    net = Net(f"fan{size}")
    for index in range(size // 3):
        net.add(UNARY[index % 3], net.add(UNARY[(index + 1) % 3], 0))
    return net.finish()


def random_dag(size: int, rng: np.random.Generator) -> Net:
    net = Net(f"random{size}")
    while len(net.nodes) < size * 17 // 20:
        count = len(net.nodes) + 1
        first = count - 1 - int(rng.integers(0, min(4, count)))
        if rng.random() < 0.5:
            far = rng.random() < 0.02
            second = int(rng.integers(0, count)) if far else count - 1 - int(rng.integers(0, min(64, count)))
            net.add(BINARY[int(rng.integers(0, 4))], first, second)
        else:
            net.add("MatMul" if rng.random() < 0.1 else UNARY[int(rng.integers(0, 3))], first)
    return net.finish()


def branchy(size: int, rng: np.random.Generator) -> Net:
    net, value = Net(f"branchy{size}"), 0
    while len(net.nodes) < size:
        merged = value
        for _ in range(int(rng.integers(2, 5))):
            branch = value
            for depth in range(int(rng.integers(1, 4))):
                branch = net.add("MatMul" if depth == 0 and rng.random() < 0.3 else UNARY[int(rng.integers(0, 3))],
                                 branch)
            merged = net.add("Add", merged, branch)
        value = net.add("Relu", merged)
    return net.finish()


#: The recurrent cell of ``loop``: inputs are (x, h), values numbered from 2 within the cell.
CELL = [("MatMul", (1,)), ("Add", (2, 0)), ("Relu", (3,)), ("Sub", (4, 1)), ("Mul", (5, 0)), ("Add", (1, 6))]


def loop(size: int, rng: np.random.Generator) -> Net:
    net, h = Net(f"loop{size}", cell=CELL), 0
    for _ in range(size // len(CELL)):
        made = [0, h]
        for op, inputs in CELL:
            made.append(net.add(op, *(made[i] for i in inputs)))
        h = made[-1]
    return net


def loop_exit(size: int, rng: np.random.Generator) -> Net:
    net = loop(size, rng)
    net.name, net.exit = f"loopexit{size}", True
    return net


SHAPES: dict[str, Callable[[int, np.random.Generator], Net]] = {
    "chain": chain, "fan": fan, "random": random_dag, "branchy": branchy, "loop": loop,
    "loopexit": loop_exit}


# -- two emitters: the builder API and onnx.helper --------------------------------------------------------
def _weight() -> np.ndarray:
    rng = np.random.default_rng(1)
    return (rng.standard_normal((WIDTH, WIDTH)) / math.sqrt(WIDTH)).astype(np.float32)


BUILD = {"Relu": "relu", "Neg": "neg", "Abs": "abs", "Add": "add", "Mul": "mul", "Sub": "sub", "Max": "maximum"}


def to_graph(net: Net) -> Graph:
    g = Graph(net.name)
    values = [g.input("x", shape=("batch", WIDTH))]
    weight = g.constant("w", _weight())
    for op, inputs in net.nodes:
        args = [values[i] for i in inputs]
        values.append(g.matmul(args[0], weight) if op == "MatMul" else getattr(g, BUILD[op])(*args))
    g.output("y", values[-1])
    return g


def _onnx_nodes(nodes: list[tuple[str, tuple[int, ...]]], name: Callable[[int], str], first: int
                ) -> list[onnx.NodeProto]:
    """Node k makes value ``first + k``."""
    return [helper.make_node(op, [name(i) for i in inputs] + (["w"] if op == "MatMul" else []), [name(first + k)])
            for k, (op, inputs) in enumerate(nodes)]


def to_onnx(net: Net) -> onnx.ModelProto:
    """The same graph in ONNX; ``loop`` as one ``Loop`` node over its cell."""
    rows = EXIT_BATCH if net.exit else "batch"
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, (rows, WIDTH))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, (rows, WIDTH))
    weight = onnx.numpy_helper.from_array(_weight(), "w")
    if net.cell is None:
        nodes = _onnx_nodes(net.nodes, lambda i: "x" if i == 0 else f"v{i}", 1)
        nodes.append(helper.make_node("Identity", [f"v{len(net.nodes)}"], ["y"]))
        graph = helper.make_graph(nodes, net.name, [x], [y], [weight])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    cell = _onnx_nodes(net.cell, lambda i: ("x", "h")[i] if i < 2 else f"c{i}", 2)
    h_next = f"c{len(net.cell) + 1}"
    if net.exit:  # a condition only the device knows: every trip is emitted, the carried value masked
        condition = [helper.make_node("ReduceMax", [h_next], ["peak"], keepdims=0),
                     helper.make_node("Less", ["peak", "limit"], ["keep_out"])]
    else:
        condition = [helper.make_node("Identity", ["keep"], ["keep_out"])]
    body = helper.make_graph(
        [*cell, *condition], "cell",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("keep", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h", TensorProto.FLOAT, (rows, WIDTH))],
        [helper.make_tensor_value_info("keep_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info(h_next, TensorProto.FLOAT, (rows, WIDTH))],
        [helper.make_tensor("limit", TensorProto.FLOAT, (), [1e30])] if net.exit else [])
    constants = [weight, helper.make_tensor("trips", TensorProto.INT64, (), [len(net.nodes) // len(net.cell)]),
                 helper.make_tensor("start", TensorProto.BOOL, (), [True])]
    loop_node = helper.make_node("Loop", ["trips", "start" if net.exit else "", "x"], ["y"], body=body)
    graph = helper.make_graph([loop_node], net.name, [x], [y], constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# -- measuring -------------------------------------------------------------------------------------------
@contextmanager
def timed(stage: str, row: dict[str, tuple[float, float]]) -> Iterator[None]:
    gc.collect()
    start, cpu = time.perf_counter(), time.process_time()
    yield
    row[stage] = (time.process_time() - cpu, time.perf_counter() - start)


def measure(net: Net) -> dict[str, tuple[float, float]]:
    """Each stage's (CPU seconds, wall seconds) for one graph."""
    row: dict[str, tuple[float, float]] = {}
    shape = (EXIT_BATCH if net.exit else BATCH, WIDTH)
    model = to_onnx(net)
    with timed("import", row):
        load_onnx(model).specialize(x=shape)
    # A Loop imports as one node whatever its trips; the later stages take the cell written out.
    graph = to_graph(net)
    with timed("bind", row):
        bound = graph.bind(x=shape)
    with timed("plan", row):
        aclpipe.make_plan(bound, streams=4)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)

    async def pipeline() -> None:
        device = aclpipe.open_device("sim", sanitizer=False)
        try:
            async with aclpipe.Pipeline(graph, device, streams=4, depth=2) as pipe:
                with timed("prepare", row):
                    pipe.prepare(x=shape)
                with timed("first run", row):
                    await pipe.run(x=x)
        finally:
            device.close()

    anyio.run(pipeline)
    return row


def slope(points: list[tuple[int, float]]) -> float | None:
    """Least-squares slope of log(time) in log(nodes)."""
    usable = [(math.log(n), math.log(t)) for n, t in points if t > 0]
    if len(usable) < 2:
        return None
    xs = [x for x, _ in usable]
    mean_x, mean_y = sum(xs) / len(xs), sum(y for _, y in usable) / len(usable)
    return sum((x - mean_x) * (y - mean_y) for x, y in usable) / sum((x - mean_x) ** 2 for x in xs)


def report(shape: str, rows: list[tuple[int, dict[str, tuple[float, float]]]], threshold: float
           ) -> list[tuple[float, str, str]]:
    """Print one shape's table; return (CPU slope, shape, stage) per stage."""
    print(f"\n== {shape}: CPU ms per stage (nodes as built), fitted exponent of CPU and wall time in nodes")
    print(f"{'stage':<11}" + "".join(f"{n:>10,}" for n, _ in rows) + f"{'cpu exp':>9}{'wall exp':>9}  verdict")
    fitted = []
    for stage in STAGES:
        cpu = slope([(n, row[stage][0]) for n, row in rows])
        wall = slope([(n, row[stage][1]) for n, row in rows])
        cells = "".join(f"{row[stage][0] * 1e3:>10.1f}" for _, row in rows)
        verdict = "-" if cpu is None else "<= n log n" if cpu <= threshold else "SUPER-LINEAR"
        print(f"{stage:<11}{cells}{cpu or math.nan:>9.2f}{wall or math.nan:>9.2f}  {verdict}", flush=True)
        if cpu is not None:
            fitted.append((cpu, shape, stage))
    return fitted


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=list(SHAPES))
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--threshold", type=float, default=THRESHOLD,
                        help="largest exponent counted as n log n at these sizes")
    args = parser.parse_args(argv)
    print("$ python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv if argv is not None else sys.argv[1:])]))
    print(f"host: {os.cpu_count()} CPUs, load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"exponent <= {args.threshold:g} counts as n log n (n log n itself fits about 1.1 at these sizes)")
    started = time.perf_counter()
    fitted: list[tuple[float, str, str]] = []
    for shape in args.shapes:
        measure(SHAPES[shape](min(args.sizes), np.random.default_rng(0)))  # warm-up: imports, caches
        rows = []
        for size in sorted(args.sizes):
            net = SHAPES[shape](size, np.random.default_rng(0))
            rows.append((len(net.nodes), measure(net)))
        fitted += report(shape, rows, args.threshold)
    worst = max(fitted)
    over = [f"{shape}/{stage} {value:.2f}" for value, shape, stage in sorted(fitted, reverse=True)
            if value > args.threshold]
    verdict = "met" if not over else f"missed ({', '.join(over)})"
    print(f"\ngoal: every stage <= n log n (exponent <= {args.threshold:g}) on every shape: {verdict}; "
          f"worst {worst[0]:.2f} ({worst[1]}/{worst[2]}); {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
