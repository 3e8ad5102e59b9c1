"""The DAG the planner works on, its launch order, and the critical path that drives it.

A :class:`Dag` is nodes ``0..n-1`` with their predecessors and a cost estimate each (in
modelled microseconds).  :func:`topological_order` is deterministic: among ready nodes the
one with the longest remaining critical path (its *bottom level*: its own cost plus the
longest chain of costs after it) goes first, then the one inserted first.  Launching the
critical path early is what lets the other streams fill in around it.

:func:`estimate_cost` is a roofline estimate from shapes alone (no phase one needed): a
launch latency plus the larger of bytes moved over HBM bandwidth and FLOPs over the vector or
cube rate; copies between host and device use PCIe bandwidth.  Callers with better numbers
(measured, or from ``OpPlan.flops``/``bytes``) pass their own costs instead.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

from ..errors import PlanError
from ..tensor import TensorDesc

__all__ = [
    "CUBE_FLOPS_PER_US",
    "HBM_BYTES_PER_US",
    "LAUNCH_US",
    "PCIE_BYTES_PER_US",
    "VECTOR_FLOPS_PER_US",
    "Dag",
    "bottom_levels",
    "critical_path",
    "estimate_cost",
    "top_levels",
    "topological_order",
]

LAUNCH_US = 3.0
HBM_BYTES_PER_US = 1.6e6  # 1.6 TB/s
PCIE_BYTES_PER_US = 2.5e4  # 25 GB/s
VECTOR_FLOPS_PER_US = 2.0e7  # 20 TFLOP/s
CUBE_FLOPS_PER_US = 3.0e8  # 300 TFLOP/s (fp16 matrix unit)


_T = TypeVar("_T")


def unchecked(cls: type[_T], fields: dict[str, Any]) -> _T:
    """An instance of the frozen dataclass ``cls`` from every field's value, built without its
    ``__init__`` or checks (one ``object.__setattr__`` per field: 1.7 against 0.6 µs for a
    planned node).  Only for values the planner itself made; one per node and value."""
    instance = object.__new__(cls)
    instance.__dict__.update(fields)
    return instance


@dataclass(frozen=True)
class Dag:
    """Nodes ``0..n-1``: ``preds[i]`` are the nodes ``i`` depends on, ``costs[i]`` its estimate."""

    preds: tuple[tuple[int, ...], ...]
    costs: tuple[float, ...] = field(default=())

    def __post_init__(self) -> None:
        preds = tuple([tuple(sorted(set(p))) for p in self.preds])
        object.__setattr__(self, "preds", preds)
        costs = tuple([float(c) for c in self.costs]) if self.costs else (1.0,) * len(preds)
        if len(costs) != len(preds):
            raise ValueError(f"Dag: {len(preds)} nodes but {len(costs)} costs")
        if not all(math.isfinite(c) and c >= 0 for c in costs):
            bad = [c for c in costs if not (math.isfinite(c) and c >= 0)]
            raise ValueError(f"Dag: costs must be finite and >= 0, got {bad[:3]}")
        object.__setattr__(self, "costs", costs)
        size = len(preds)
        for node, before in enumerate(preds):
            # Sorted: the first and last are the extremes, so one comparison each per node.
            if before and (before[0] < 0 or before[-1] >= size or node in before):
                pred = next(p for p in before if not 0 <= p < size or p == node)
                raise ValueError(f"Dag: node {node} has predecessor {pred}, which is not another node")

    @classmethod
    def from_edges(cls, size: int, edges: Iterable[tuple[int, int]], costs: Sequence[float] = ()) -> Dag:
        """A DAG of ``size`` nodes from ``(producer, consumer)`` pairs."""
        preds: list[set[int]] = [set() for _ in range(size)]
        for producer, consumer in edges:
            preds[consumer].add(producer)
        return cls(tuple(tuple(p) for p in preds), tuple(costs))

    @classmethod
    def _trusted(cls, preds: tuple[tuple[int, ...], ...], costs: tuple[float, ...]) -> Dag:
        """A DAG of what another DAG's passes derived: each ``preds[i]`` already sorted,
        without repeats and naming other nodes, ``costs`` floats as checked (no checks again)."""
        return unchecked(cls, {"preds": preds, "costs": costs})

    def __len__(self) -> int:
        return len(self.preds)

    @cached_property
    def succs(self) -> tuple[tuple[int, ...], ...]:
        result: list[list[int]] = [[] for _ in self.preds]
        for node, before in enumerate(self.preds):
            for pred in before:
                result[pred].append(node)
        return tuple(tuple(s) for s in result)

    @cached_property
    def any_order(self) -> tuple[int, ...]:
        """A topological order (Kahn's, see :func:`_any_order`), found once per DAG: levels,
        the reachability index and the launch order all start from one."""
        return tuple(_kahn(self))

    @cached_property
    def edges(self) -> tuple[tuple[int, int], ...]:
        return tuple((pred, node) for node, before in enumerate(self.preds) for pred in before)

    def renumbered(self, order: Sequence[int]) -> Dag:
        """The same DAG with node ``order[k]`` renamed ``k``."""
        new = {old: k for k, old in enumerate(order)}
        if len(order) != len(self) or len(new) != len(self) or (new and (min(new) < 0 or max(new) >= len(self))):
            raise ValueError(f"Dag.renumbered: the order must list each of the {len(self)} nodes once")
        preds, costs = self.preds, self.costs
        return Dag._trusted(tuple([tuple(sorted([new[p] for p in preds[old]])) for old in order]),
                            tuple([costs[old] for old in order]))


def _any_order(dag: Dag) -> Sequence[int]:
    """Kahn's algorithm in index order; :class:`PlanError` naming the nodes left on a cycle."""
    return dag.any_order


def _kahn(dag: Dag) -> list[int]:
    missing = [len(p) for p in dag.preds]
    ready = [node for node, count in enumerate(missing) if count == 0]
    order: list[int] = []
    while ready:
        node = ready.pop()
        order.append(node)
        for succ in dag.succs[node]:
            missing[succ] -= 1
            if missing[succ] == 0:
                ready.append(succ)
    if len(order) != len(dag):
        stuck = sorted(set(range(len(dag))) - set(order))
        raise PlanError(f"the graph has a cycle through nodes {stuck[:10]}: a plan needs a DAG")
    return order


def bottom_levels(dag: Dag) -> tuple[float, ...]:
    """Per node: its cost plus the costliest path from it to a sink."""
    level = [0.0] * len(dag)
    costs, succs = dag.costs, dag.succs
    for node in reversed(_any_order(dag)):
        after = succs[node]
        level[node] = costs[node] + (max([level[s] for s in after]) if after else 0.0)
    return tuple(level)


def top_levels(dag: Dag) -> tuple[float, ...]:
    """Per node: the earliest it can start with unlimited streams (costliest path to it)."""
    level = [0.0] * len(dag)
    costs, preds = dag.costs, dag.preds
    for node in _any_order(dag):
        before = preds[node]
        level[node] = max([level[p] + costs[p] for p in before]) if before else 0.0
    return tuple(level)


def topological_order(dag: Dag) -> tuple[int, ...]:
    """Deterministic launch order: ready nodes by longest bottom level, then lowest index."""
    levels = bottom_levels(dag)
    missing = [len(p) for p in dag.preds]
    heap = [(-levels[node], node) for node, count in enumerate(missing) if count == 0]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        _, node = heapq.heappop(heap)
        order.append(node)
        for succ in dag.succs[node]:
            missing[succ] -= 1
            if missing[succ] == 0:
                heapq.heappush(heap, (-levels[succ], succ))
    return tuple(order)


def critical_path(dag: Dag) -> tuple[float, tuple[int, ...]]:
    """The length of the costliest source-to-sink path and its nodes."""
    if not len(dag):
        return 0.0, ()
    levels = bottom_levels(dag)
    node = max((n for n in range(len(dag)) if not dag.preds[n]), key=lambda n: (levels[n], -n))
    path = [node]
    while dag.succs[node]:
        node = max(dag.succs[node], key=lambda n: (levels[n], -n))
        path.append(node)
    return levels[path[0]], tuple(path)


# -- cost estimate -------------------------------------------------------------------------------
def _reduction_length(op: str, inputs: Sequence[TensorDesc | None]) -> int | None:
    """The length each output element of a cube op sums over, or None for vector ops."""
    if op in ("Matmul", "Mm", "BatchMatMul") and inputs and inputs[0] is not None and inputs[0].ndim:
        return inputs[0].shape[-1]
    if op == "Addmm" and len(inputs) > 1 and inputs[1] is not None and inputs[1].ndim:
        return inputs[1].shape[-1]
    if op == "Convolution" and len(inputs) > 1 and inputs[1] is not None and inputs[1].ndim:
        weight = inputs[1]
        return max(1, weight.numel // max(weight.shape[0], 1))
    return None


def estimate_cost(op: str, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None]) -> float:
    """Modelled microseconds for one launch of ``op`` (``"H2D"``/``"D2H"`` for copies)."""
    traffic = float(sum(t.nbytes for t in (*inputs, *outputs) if t is not None))
    if op in ("H2D", "D2H"):
        return LAUNCH_US + traffic / PCIE_BYTES_PER_US
    produced = sum(t.numel for t in outputs if t is not None)
    reduction = _reduction_length(op, inputs)
    if reduction is not None:
        compute = 2.0 * produced * reduction / CUBE_FLOPS_PER_US
    else:
        compute = float(produced) / VECTOR_FLOPS_PER_US
    return LAUNCH_US + max(traffic / HBM_BYTES_PER_US, compute)
