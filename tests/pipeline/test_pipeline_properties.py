"""Property: any DAG of catalog ops, on any streams/depth/workspace, with the timing model
perturbing which task runs when, gives numpy's numbers with the sanitizer on, and leaves no
device memory or workspace behind.

Graphs are built from elementwise, unary, matmul, softmax, layer norm, views (transpose,
reshape), cat and split nodes over 2-d float32 values; a value's magnitude bound is tracked
so that products and sums stay well inside float32 precision.  Each example runs a few
inputs concurrently, so slots, streams and workspaces of different runs interleave.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import anyio
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pipeline_graphs import assert_outputs, reference

import aclpipe
from aclpipe import Pipeline
from aclpipe.graph import Graph, Value

_UNARY = ("relu", "neg", "abs", "tanh", "sigmoid")
_BINARY = ("add", "sub", "mul", "maximum")
_KINDS = ("unary", "binary", "matmul", "softmax", "layer_norm", "transpose", "reshape", "cat", "split")
_LIMIT = 1e3  # largest magnitude a value may reach


@dataclass
class _Builder:
    """A graph under construction with the magnitude bound of each value."""

    graph: Graph
    draw: st.DrawFn
    bounds: dict[str, float] = field(default_factory=dict)
    values: list[Value] = field(default_factory=list)
    constants: int = 0

    def add(self, value: Value, bound: float) -> None:
        self.values.append(value)
        self.bounds[value.name] = bound

    def pick(self, shape: tuple[int, ...] | None = None) -> Value | None:
        choices = [v for v in self.values if shape is None or v.shape == shape]
        return self.draw(st.sampled_from(choices)) if choices else None

    def constant(self, array: np.ndarray) -> Value:
        self.constants += 1
        return self.graph.constant(f"c{self.constants}", array.astype(np.float32))

    def node(self, kind: str) -> None:
        source = self.pick()
        assert source is not None and source.shape is not None
        rows, cols = source.shape  # type: ignore[misc]
        bound = self.bounds[source.name]
        g, draw = self.graph, self.draw
        if kind == "unary":
            op = draw(st.sampled_from(_UNARY))
            self.add(getattr(g, op)(source), 1.0 if op in ("tanh", "sigmoid") else bound)
        elif kind == "binary":
            other = self.pick(source.shape) or source
            op = draw(st.sampled_from(_BINARY))
            other_bound = self.bounds[other.name]
            if op == "mul":
                new = bound * other_bound
            elif op in ("add", "sub"):
                alpha = draw(st.sampled_from([1.0, 0.5, -2.0]))
                new = bound + abs(alpha) * other_bound
                if new <= _LIMIT:
                    self.add(getattr(g, op)(source, other, alpha=alpha), new)
                return
            else:
                new = max(bound, other_bound)
            if new <= _LIMIT:
                self.add(getattr(g, op)(source, other), new)
        elif kind == "matmul":
            width = draw(st.sampled_from([2, 4, 8]))
            other = self.pick((cols, width)) if draw(st.booleans()) else None
            if other is None:
                seed = draw(st.integers(0, 2**16))
                other = self.constant(np.random.default_rng(seed).uniform(-1, 1, (cols, width)) / math.sqrt(cols))
                self.bounds[other.name] = 1 / math.sqrt(cols)
            new = bound * self.bounds[other.name] * cols
            if new <= _LIMIT:
                self.add(g.matmul(source, other), new)
        elif kind == "softmax":
            self.add(g.softmax(source, dim=draw(st.sampled_from([-1, 0]))), 1.0)
        elif kind == "layer_norm":
            gamma = self.constant(np.random.default_rng(cols).uniform(0.5, 1.5, cols))
            beta = self.constant(np.linspace(-0.5, 0.5, cols))
            self.add(g.layer_norm(source, gamma, beta, normalizedShape=[cols]), 1.5 * math.sqrt(cols) + 0.5)
        elif kind == "transpose":
            self.add(g.transpose(source, dim0=0, dim1=1), bound)
        elif kind == "reshape":
            divisors = [d for d in range(1, rows * cols + 1) if (rows * cols) % d == 0]
            last = draw(st.sampled_from(divisors))
            self.add(g.reshape(source, shape=[rows * cols // last, last]), bound)
        elif kind == "cat":
            dim = draw(st.sampled_from([0, 1]))
            partners = [v for v in self.values if v.shape is not None and v.shape[1 - dim] == source.shape[1 - dim]]
            count = draw(st.integers(1, 2))
            parts = [source] + [draw(st.sampled_from(partners)) for _ in range(count)]
            self.add(g.cat(parts, dim=dim), max(self.bounds[p.name] for p in parts))
        elif kind == "split":
            dim = draw(st.sampled_from([0, 1]))
            length = source.shape[dim]
            if length >= 2:
                first = draw(st.integers(1, length - 1))
                for piece in g.split(source, splitSections=[first, length - first], dim=dim):
                    self.add(piece, bound)


@st.composite
def random_graphs(draw: st.DrawFn) -> tuple[Graph, dict[str, np.ndarray]]:
    builder = _Builder(Graph("random"), draw)
    shape = (draw(st.sampled_from([2, 3, 4])), draw(st.sampled_from([2, 4, 6])))
    inputs: dict[str, np.ndarray] = {}
    for index in range(draw(st.integers(1, 2))):
        name = f"x{index}"
        builder.add(builder.graph.input(name, shape=shape), 1.0)
        inputs[name] = np.random.default_rng(draw(st.integers(0, 2**16))).uniform(-1, 1, shape).astype(np.float32)
    for _ in range(draw(st.integers(3, 20))):
        builder.node(draw(st.sampled_from(_KINDS)))
    produced = builder.values[len(inputs):] or builder.values
    for index, value in enumerate(draw(st.lists(st.sampled_from(produced), min_size=1, max_size=3))):
        builder.graph.output(f"y{index}", value)
    return builder.graph, inputs


def _variant(inputs: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.uniform(-1, 1, array.shape).astype(np.float32) for name, array in inputs.items()}


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=random_graphs(), streams=st.integers(1, 4), depth=st.integers(1, 3),
       workspace=st.sampled_from(["pool", "static", "per-call"]), time_scale=st.sampled_from([None, 50.0, 500.0]),
       concurrent=st.integers(1, 5), backend=st.sampled_from(["asyncio", "trio"]))
def test_random_dags_match_numpy_and_leave_nothing_behind(case, streams, depth, workspace, time_scale, concurrent,
                                                         backend):
    graph, first = case
    inputs = [first] + [_variant(first, seed) for seed in range(1, concurrent)]
    timing = {"timing": True, "time_scale": time_scale} if time_scale else {}
    device = aclpipe.open_device("sim", sanitizer=True, **timing)
    try:
        baseline = device.mem_info().used

        async def main() -> None:
            async with Pipeline(graph, device, streams=streams, depth=depth, workspace=workspace) as pipe:
                async def one(given: dict[str, np.ndarray]) -> None:
                    assert_outputs(await pipe.run(**given), reference(graph, given), rtol=2e-4)

                with anyio.fail_after(60):
                    async with anyio.create_task_group() as group:
                        for given in inputs:
                            group.start_soon(one, given)
                stats = pipe.stats()
                assert stats.in_flight == 0 and stats.failed_runs == 0
                assert stats.workspace.get("outstanding", 0) == 0

        anyio.run(main, backend=backend)
        assert device.mem_info().used == baseline
        assert not device.backend.memory.live_host_buffers()
    finally:
        device.close()
