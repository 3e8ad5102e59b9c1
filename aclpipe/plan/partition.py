"""Cutting a bound graph into contiguous stages, one per device (pipeline parallelism).

:func:`partition_graph` takes the launching nodes in the bound graph's (topological) order
and cuts them into ``len(budgets)`` contiguous, non-empty stages so that the costliest
stage is as cheap as possible (the steady-state throughput of a pipeline of stages is one
run per bottleneck stage time) while every stage fits its device: its constants plus
``slots`` copies of its activations stay within the device's budget.  That is what lets a
model whose weights exceed one device run on several.

How: binary search on the bottleneck cost ``B``; for one ``B``, stages are made greedily
from the left, each as long as cost <= ``B`` and memory <= its budget allow, leaving at
least one node for every later stage.  A stage's memory only shrinks when its range does,
so with equal budgets the greedy cut is feasible whenever any cut is, and the search finds
the least bottleneck; each test is one pass over the nodes.

Memory is an upper bound (no reuse): every value the stage writes or receives counts in
full, as do the graph inputs it reads; a constant counts in every stage that reads it.

Values a later stage reads travel as storage (a view is re-made on the reading side), from
the stage that wrote them straight to each stage that reads them.  :func:`stage_graph`
makes the bound graph of one stage: its inputs are the graph inputs it reads and the values
it receives; its outputs are the graph outputs it makes and, under :func:`boundary_key`,
the values it sends.  Everything here is pure data: no device is involved.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from ..errors import PlanError
from ..graph.bound import BoundGraph, BoundNode
from .order import estimate_cost

__all__ = ["Partition", "Stage", "boundary_key", "partition_graph", "stage_graph"]


@dataclass(frozen=True)
class Stage:
    """One contiguous run of launching nodes, for one device.

    ``receives``/``sends`` are ``(storage value, other stage)`` pairs; ``activation_bytes`` is
    one slot's worth (values written or received, graph inputs read); ``cost`` is modelled µs.
    """

    index: int
    nodes: tuple[str, ...]
    cost: float
    constant_bytes: int
    activation_bytes: int
    receives: tuple[tuple[str, int], ...]
    sends: tuple[tuple[str, int], ...]

    def memory(self, slots: int) -> int:
        """Device bytes the stage needs with ``slots`` runs in flight (an upper bound)."""
        return self.constant_bytes + slots * self.activation_bytes


@dataclass(frozen=True)
class Partition:
    """Stages in order; ``bottleneck`` is the costliest stage's cost and ``boundary_bytes`` the
    bytes one run copies between stages."""

    stages: tuple[Stage, ...]
    bottleneck: float
    boundary_bytes: int
    home: Mapping[str, int]  # storage value -> the stage that writes it (inputs/constants: first reader)


def boundary_key(value: str, to: int) -> str:
    """The output name under which a stage sends ``value`` to stage ``to``."""
    return f"{value}->stage{to}"


class _Graph:
    """What the cut needs from a bound graph, computed once."""

    def __init__(self, graph: BoundGraph, costs: Mapping[str, float] | None):
        self.graph = graph
        self.nodes = [node for node in graph.nodes if not node.is_view]
        self.writer: dict[str, int] = {}
        for position, node in enumerate(self.nodes):
            for value in node.outputs:
                if value is not None:
                    self.writer[value] = position
        values = graph.values
        self.reads = [tuple(dict.fromkeys(values[v].storage for v in node.inputs if v is not None))
                      for node in self.nodes]
        self.costs = [_node_cost(graph, node, costs) for node in self.nodes]
        self.size = {name: value.desc.extent_bytes for name, value in values.items()}

    def constant(self, storage: str) -> bool:
        return self.graph.values[storage].kind == "constant"


def _node_cost(graph: BoundGraph, node: BoundNode, costs: Mapping[str, float] | None) -> float:
    if costs is not None and node.name in costs:
        return float(costs[node.name])
    descs = [graph.values[v].desc if v is not None else None for v in node.inputs]
    outs = [graph.values[v].desc if v is not None else None for v in node.outputs]
    return estimate_cost(node.op, descs, outs)


class _Range:
    """Cost and memory of the stage ``[start, end)``, grown one node at a time."""

    def __init__(self, info: _Graph, start: int):
        self.info, self.start, self.end = info, start, start
        self.cost = 0.0
        self.constants: set[str] = set()
        self.activations: set[str] = set()
        self.constant_bytes = self.activation_bytes = 0

    def grown(self, slots: int) -> tuple[float, int]:
        """(cost, memory) once the next node joins, without adding it."""
        extra_constants, extra_activations = self._new(self.end)
        size = self.info.size
        constant_bytes = self.constant_bytes + sum(size[c] for c in extra_constants)
        activation_bytes = self.activation_bytes + sum(size[a] for a in extra_activations)
        return self.cost + self.info.costs[self.end], constant_bytes + slots * activation_bytes

    def add(self) -> None:
        extra_constants, extra_activations = self._new(self.end)
        size = self.info.size
        self.constants |= extra_constants
        self.activations |= extra_activations
        self.constant_bytes += sum(size[c] for c in extra_constants)
        self.activation_bytes += sum(size[a] for a in extra_activations)
        self.cost += self.info.costs[self.end]
        self.end += 1

    def _new(self, position: int) -> tuple[set[str], set[str]]:
        info = self.info
        constants = {s for s in info.reads[position] if info.constant(s)} - self.constants
        touched = {s for s in info.reads[position] if not info.constant(s)}
        touched |= {v for v in info.nodes[position].outputs if v is not None}
        return constants, touched - self.activations


def _greedy(info: _Graph, budgets: Sequence[int], slots: int, bottleneck: float) -> list[int] | None:
    """Stage starts for this bottleneck, or None when no cut meets it."""
    count, stages, starts, start = len(info.nodes), len(budgets), [], 0
    for index, budget in enumerate(budgets):
        last_end = count - (stages - index - 1)  # leave a node for every later stage
        current = _Range(info, start)
        while current.end < last_end:
            cost, memory = current.grown(slots)
            if memory > budget or (cost > bottleneck and current.end > current.start):
                break
            current.add()
        if current.end == current.start:
            return None
        starts.append(start)
        start = current.end
    return starts if start == count else None


def partition_graph(graph: BoundGraph, budgets: Sequence[int], *, slots: int = 1,
                    costs: Mapping[str, float] | None = None) -> Partition:
    """Cut ``graph`` into ``len(budgets)`` stages; stage ``k`` must fit ``budgets[k]`` bytes.

    ``slots`` is how many runs each stage keeps in flight (each needs its own activations);
    ``costs`` overrides node costs (µs) by name.  Raises :class:`PlanError` when the graph
    has fewer launching nodes than stages, or when no cut fits the budgets.
    """
    if not budgets:
        raise ValueError("partition_graph needs at least one budget (one per device)")
    if slots < 1:
        raise ValueError(f"slots must be >= 1, got {slots}")
    info = _Graph(graph, costs)
    if len(info.nodes) < len(budgets):
        raise PlanError(f"graph {graph.name!r} has {len(info.nodes)} launching nodes; it cannot be cut into "
                        f"{len(budgets)} stages: use at most {len(info.nodes)} devices")
    low, high = max(info.costs), sum(info.costs)
    starts = _greedy(info, budgets, slots, high)
    if starts is None:
        raise PlanError(_does_not_fit(info, graph, budgets, slots))
    for _ in range(64):  # bisection on the bottleneck; each step is one pass over the nodes
        if high - low <= 1e-9 * max(high, 1.0):
            break
        middle = (low + high) / 2
        found = _greedy(info, budgets, slots, middle)
        if found is None:
            low = middle
        else:
            high, starts = middle, found
    return _describe(info, starts)


def _does_not_fit(info: _Graph, graph: BoundGraph, budgets: Sequence[int], slots: int) -> str:
    total_constants = sum(info.size[name] for name in graph.constants)
    return (f"graph {graph.name!r} does not fit {len(budgets)} devices: its constants alone take "
            f"{total_constants} bytes, plus {slots} slot(s) of activations per stage, against budgets of "
            f"{list(budgets)} bytes; use more devices, fewer slots (depth) or a smaller batch")


def _describe(info: _Graph, starts: Sequence[int]) -> Partition:
    bounds = [*starts, len(info.nodes)]
    stage_of = {}
    for index in range(len(starts)):
        for position in range(bounds[index], bounds[index + 1]):
            stage_of[position] = index
    home: dict[str, int] = {value: stage_of[position] for value, position in info.writer.items()}
    for position, reads in enumerate(info.reads):
        for storage in reads:
            home.setdefault(storage, stage_of[position])  # inputs and constants: their first reader
    crossings: set[tuple[str, int, int]] = set()
    for position, reads in enumerate(info.reads):
        for storage in reads:
            source = home[storage]
            if storage in info.writer and source != stage_of[position]:
                crossings.add((storage, source, stage_of[position]))
    stages = []
    for index in range(len(starts)):
        current = _Range(info, bounds[index])
        while current.end < bounds[index + 1]:
            current.add()
        stages.append(Stage(
            index, tuple(info.nodes[p].name for p in range(bounds[index], bounds[index + 1])), current.cost,
            current.constant_bytes, current.activation_bytes,
            tuple(sorted((value, source) for value, source, to in crossings if to == index)),
            tuple(sorted((value, to) for value, source, to in crossings if source == index))))
    return Partition(tuple(stages), max(stage.cost for stage in stages),
                     sum(info.size[value] for value, _, _ in crossings), MappingProxyType(home))


def stage_graph(graph: BoundGraph, partition: Partition, index: int) -> BoundGraph:
    """The bound graph stage ``index`` runs: see the module docstring."""
    stage = partition.stages[index]
    values = graph.values
    own = set(stage.nodes)
    received = {value for value, _ in stage.receives}
    inputs: dict[str, None] = {}
    constants: dict[str, None] = {}
    needed_views: set[str] = set()
    written = {v for node in graph.nodes if node.name in own for v in node.outputs if v is not None}
    producer = {v: node for node in graph.nodes for v in node.outputs if v is not None}

    def need(value: str) -> None:
        kind = values[value].kind
        if kind == "view":
            node = producer[value]
            if node.name not in needed_views:
                needed_views.add(node.name)
                need(node.inputs[0])  # type: ignore[arg-type]  # a view has exactly one input
        elif kind == "constant":
            constants[value] = None
        elif kind == "input" or value in received:
            inputs[value] = None
        elif value not in written:
            raise PlanError(f"stage {index} reads {value!r}, which no stage sends it")  # a broken partition

    for node in graph.nodes:
        if node.name in own:
            for value in node.inputs:
                if value is not None:
                    need(value)
    outputs = {name: value for name, value in graph.outputs.items() if partition.home[values[value].storage] == index}
    for value in outputs.values():
        need(value)
    for value, to in stage.sends:
        key = boundary_key(value, to)
        if key in graph.outputs:
            raise PlanError(f"graph output {key!r} clashes with the name of a stage boundary; rename the output")
        outputs[key] = value
    nodes = tuple(node for node in graph.nodes if node.name in own or node.name in needed_views)
    used = set(inputs) | set(constants) | {v for node in nodes for v in (*node.inputs, *node.outputs) if v is not None}
    stage_values = {name: values[name] for name in values if name in used}
    for name in received:
        if not values[name].desc.is_contiguous:
            raise PlanError(f"value {name!r} crosses a stage boundary but is not contiguous")
        stage_values[name] = type(values[name])(name, values[name].desc, "input")
    return BoundGraph(
        name=f"{graph.name}[stage {index}]", nodes=nodes, values=MappingProxyType(stage_values),
        inputs=tuple(inputs), outputs=MappingProxyType(outputs),
        constants=MappingProxyType({name: graph.constants[name] for name in constants}),
        input_shapes=MappingProxyType({name: values[name].desc.shape for name in inputs}), dims=graph.dims,
        host_values=graph.host_values)
