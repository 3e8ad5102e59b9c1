"""The Plan: what the pipeline executes, as frozen data it can print, draw and replay.

:func:`make_plan` runs the passes over a :class:`~aclpipe.graph.bound.BoundGraph`:

1. nodes: one ``"H2D"`` pseudo-node per graph input (writes the input's device copy), every
   compute node (view nodes launch nothing and are left out: their values alias their base),
   one ``"D2H"`` pseudo-node per graph output (reads the output's device value);
2. dependencies: a node depends on the writer of the storage behind each value it reads;
3. order (:mod:`.order`), compute streams (:mod:`.streams`; copies get stream
   ``num_streams`` for H2D and ``num_streams + 1`` for D2H), events (:mod:`.events`) and
   arena offsets (:mod:`.memory`).

Executing a plan: for each node in ``nodes`` order, on stream ``node.stream``, wait on the
events recorded after the nodes in ``node.waits``, launch it, and record its event if
``node.record``.  Value ``v`` lives at ``arena_base + values[v].arena_offset`` (views: at their
base's address, with their descriptor's strides and offset; constants: their own buffers).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from ..gc_pause import paused_gc
from ..tensor import TensorDesc
from .arena import A2_RULE, ArenaRule
from .events import place_events
from .memory import Buffer, plan_memory
from .order import Dag, estimate_cost, topological_order, unchecked
from .render import plan_dot, plan_summary
from .streams import assign_streams

if TYPE_CHECKING:
    from ..graph.bound import BoundGraph

__all__ = ["COPY_OPS", "VALUE_KINDS", "Plan", "PlannedNode", "ValuePlacement", "make_plan"]

VALUE_KINDS = ("input", "constant", "activation", "output", "view")
COPY_OPS = ("H2D", "D2H")
#: One shared read-only view for the many nodes without attributes.
_NO_ATTRS: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class PlannedNode:
    """One launch.

    ``index`` is its position in :attr:`Plan.nodes`; ``inputs``/``outputs`` are value names in
    the op's argument order (``None`` for an optional argument left out).  ``H2D`` nodes have
    no inputs and write the input's device value (``attrs["input"]`` names the graph input);
    ``D2H`` nodes read one value and write none (``attrs["output"]`` names the graph output).
    ``waits`` are indices of earlier nodes whose recorded event this node waits on; ``record``
    says whether an event is recorded after it.  ``cost`` is the planner's estimate (µs).
    """

    index: int
    name: str
    op: str
    stream: int
    inputs: tuple[str | None, ...]
    outputs: tuple[str | None, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict, hash=False)
    waits: tuple[int, ...] = ()
    record: bool = False
    cost: float = 0.0


@dataclass(frozen=True)
class ValuePlacement:
    """Where a value lives.

    ``kind``: ``"input"`` (device copy of a graph input), ``"constant"`` (its own buffer),
    ``"activation"``, ``"output"`` (an activation some graph output reads), ``"view"`` (an alias
    of ``base``'s storage; ``desc`` has its strides and offset).  ``arena_offset`` is set for
    inputs, activations and outputs.  ``nbytes`` is the storage the value owns: its aligned
    arena size, a constant's array size, 0 for views.  ``writer``/``readers`` are node indices.
    """

    name: str
    desc: TensorDesc
    kind: str
    arena_offset: int | None
    nbytes: int
    base: str | None = None
    writer: int | None = None
    readers: tuple[int, ...] = ()


@dataclass(frozen=True)
class Plan:
    """A bound graph planned for ``num_streams`` compute streams plus two copy streams.

    ``arena_rule`` sizes and aligns every arena piece (``alignment`` is its offset
    alignment); ``lower_bound`` uses the same footprints, so ``arena_size / lower_bound``
    compares like with like.  ``memory_strategy`` names the placement that won.
    """

    name: str
    nodes: tuple[PlannedNode, ...]
    values: Mapping[str, ValuePlacement]
    inputs: tuple[str, ...]
    outputs: Mapping[str, str]
    constants: Mapping[str, np.ndarray] = field(compare=False, repr=False)
    input_shapes: Mapping[str, tuple[int, ...]]
    num_streams: int
    h2d_stream: int
    d2h_stream: int
    arena_size: int
    lower_bound: int
    naive_bytes: int
    alignment: int
    num_events: int
    num_waits: int
    cross_stream_edges: int
    arena_rule: ArenaRule = A2_RULE
    memory_strategy: str = ""
    #: Contents of the host-value inputs the graph was specialized for (see
    #: :mod:`aclpipe.graph.signature`); they are constants of the plan, not inputs.
    host_values: Mapping[str, np.ndarray] = field(default_factory=dict, compare=False, repr=False)

    @property
    def stream_count(self) -> int:
        """Every stream the plan uses: compute streams plus the H2D and D2H streams."""
        return self.num_streams + 2

    def nodes_on(self, stream: int) -> tuple[PlannedNode, ...]:
        return tuple(node for node in self.nodes if node.stream == stream)

    def summary(self) -> str:
        """A readable account: per stream its nodes, waits and records; memory vs the bound."""
        return plan_summary(self)

    def to_dot(self, notes: Mapping[str, str] | None = None) -> str:
        """Graphviz DOT: one cluster per stream, data edges solid, event waits dashed; ``notes``
        (node name -> text) adds a last line to those nodes' labels."""
        return plan_dot(self, notes)


#: A node before ordering: (name, op, inputs, outputs, attrs).
_Row = tuple[str, str, tuple[str | None, ...], tuple[str | None, ...], dict[str, Any]]


def _draft(graph: BoundGraph) -> list[_Row]:
    rows: list[_Row] = []
    for name in graph.inputs:
        rows.append((f"h2d:{name}", "H2D", (), (name,), {"input": name}))
    for node in graph.nodes:
        if not node.is_view:
            rows.append((node.name, node.op, node.inputs, node.outputs, dict(node.attrs)))
    for output, value in graph.outputs.items():
        rows.append((f"d2h:{output}", "D2H", (value,), (), {"output": output}))
    return rows


def _dependencies(graph: BoundGraph, rows: Sequence[_Row]) -> list[set[int]]:
    writer: dict[str, int] = {}
    for index, row in enumerate(rows):
        for value in row[3]:
            if value is not None:
                writer[value] = index
    preds = []
    for index, row in enumerate(rows):
        storages = {graph.values[v].storage for v in row[2] if v is not None}
        preds.append({writer[s] for s in storages if s in writer} - {index})
    return preds


def _cost(graph: BoundGraph, row: _Row, costs: Mapping[str, float] | None,
          seen: dict[tuple[Any, ...], float] | None = None) -> float:
    """The node's cost: given in ``costs``, else estimated (once per op and descriptors in ``seen``)."""
    if costs is not None and row[0] in costs:
        return float(costs[row[0]])
    values = graph.values
    descs = tuple([values[v].desc if v is not None else None for v in row[2]])
    outs = tuple([values[v].desc if v is not None else None for v in row[3]])
    if seen is None:
        return estimate_cost(row[1], descs, outs)
    # Keyed by the descriptors' identities (binding shares one per shape among values, and the
    # graph keeps them alive while ``seen`` lives): cheaper than hashing and comparing each.
    key = (row[1], tuple(map(id, descs)), tuple(map(id, outs)))
    found = seen.get(key)
    if found is None:
        found = seen[key] = estimate_cost(row[1], descs, outs)
    return found


def make_plan(graph: BoundGraph, streams: int = 4, costs: Mapping[str, float] | None = None,
              alignment: int | None = None, *, rule: ArenaRule | None = None,
              external: Collection[str] = ()) -> Plan:
    """Plan ``graph`` for at most ``streams`` compute streams.

    Parameters
    ----------
    graph:
        The bound graph.
    streams:
        At most this many compute streams (plus one H2D and one D2H copy stream).
    costs:
        Overrides the estimated cost (µs) of nodes by name (``"h2d:x"``/``"d2h:y"`` for the
        copies).
    alignment:
        Older form of ``rule``: pieces rounded up to and aligned at this power of two, unpadded.
    rule:
        How arena pieces are sized and aligned; default
        :data:`~aclpipe.plan.arena.A2_RULE` (``ALIGN_UP(len, 32) + 32`` bytes, 64-byte aligned).
    external:
        Node outputs that live outside the arena (in a caller's buffer:
        :meth:`aclpipe.Pipeline.bind_storage`); they get no arena offset.
    """
    if isinstance(streams, bool) or not isinstance(streams, int) or streams < 1:
        raise ValueError(f"streams must be an int >= 1, got {streams!r}")
    with paused_gc():  # an object or more per node and value, all kept (see aclpipe.gc_pause)
        return _make_plan(graph, streams, costs, alignment, rule, frozenset(external))


def _make_plan(graph: BoundGraph, streams: int, costs: Mapping[str, float] | None, alignment: int | None,
               rule: ArenaRule | None, external: frozenset[str] = frozenset()) -> Plan:
    rows = _draft(graph)
    estimated: dict[tuple[Any, ...], float] = {}  # graphs repeat their layers
    dag = Dag(tuple(tuple(p) for p in _dependencies(graph, rows)),
              tuple(_cost(graph, row, costs, estimated) for row in rows))
    order = topological_order(dag)
    rows = [rows[i] for i in order]
    dag = dag.renumbered(order)
    stream_of, num_streams = _stream_of(dag, rows, streams)
    events = place_events(dag, stream_of)
    nodes = tuple([unchecked(PlannedNode, {
        "index": i, "name": row[0], "op": row[1], "stream": stream_of[i], "inputs": tuple(row[2]),
        "outputs": tuple(row[3]), "attrs": MappingProxyType(row[4]) if row[4] else _NO_ATTRS,
        "waits": events.waits[i], "record": events.records[i], "cost": dag.costs[i]}) for i, row in enumerate(rows)])
    touchers = _touchers(graph, nodes)  # the buffers and the placements both need them
    buffers = [buffer for buffer in _buffers(graph, nodes, touchers) if buffer.name not in external]
    memory = plan_memory(buffers, events, alignment, rule=rule)
    placements = _placements(graph, nodes, memory.offsets, memory.sizes, touchers)
    return Plan(
        name=graph.name, nodes=nodes, values=MappingProxyType(placements),
        inputs=tuple(graph.inputs), outputs=MappingProxyType(dict(graph.outputs)),
        constants=graph.constants, input_shapes=graph.input_shapes,
        num_streams=num_streams, h2d_stream=num_streams, d2h_stream=num_streams + 1,
        arena_size=memory.arena_size, lower_bound=memory.lower_bound, naive_bytes=memory.naive_bytes,
        alignment=memory.alignment, num_events=events.num_events, num_waits=events.num_waits,
        cross_stream_edges=events.cross_stream_edges, arena_rule=memory.rule, memory_strategy=memory.strategy,
        host_values=graph.host_values,
    )


def _stream_of(dag: Dag, rows: Sequence[Any], streams: int) -> tuple[list[int], int]:
    """Every node's stream (in launch order) and the number of compute streams: compute nodes
    on at most ``streams`` chains merged by :func:`assign_streams`, H2D copies on the stream
    after them and D2H copies on the one after that."""
    compute = [i for i, row in enumerate(rows) if row[1] not in COPY_OPS]
    local = {node: k for k, node in enumerate(compute)}
    # ``local`` keeps the order of nodes, so each renumbered tuple stays sorted and checked.
    sub = Dag._trusted(tuple([tuple([local[p] for p in dag.preds[n] if p in local]) for n in compute]),
                       tuple([dag.costs[n] for n in compute]))
    compute_streams = assign_streams(sub, streams)
    num_streams = max(compute_streams, default=0) + 1
    stream_of = [num_streams if row[1] == "H2D" else num_streams + 1 for row in rows]
    for node, stream in zip(compute, compute_streams):
        stream_of[node] = stream
    return stream_of, num_streams


_Touchers = tuple[dict[str, int], dict[str, list[int]]]  # value -> its writer; value -> its readers


def _touchers(graph: BoundGraph, nodes: Sequence[PlannedNode]) -> _Touchers:
    writers: dict[str, int] = {}
    readers: dict[str, list[int]] = {name: [] for name in graph.values}
    for node in nodes:
        for value in node.outputs:
            if value is not None:
                writers[value] = node.index
        for value in dict.fromkeys(v for v in node.inputs if v is not None):
            readers[value].append(node.index)
    return writers, readers


def _buffers(graph: BoundGraph, nodes: Sequence[PlannedNode], touchers: _Touchers | None = None) -> list[Buffer]:
    writers, readers = touchers if touchers is not None else _touchers(graph, nodes)
    touched: dict[str, set[int]] = {name: set(readers[name]) for name in writers}
    for value in graph.values.values():
        if value.kind == "view" and value.storage in touched:
            touched[value.storage].update(readers[value.name])  # a view's reads keep its base alive
    copied_out = {n.index for n in nodes if n.op == "D2H"}
    values = graph.values
    # Every reader comes after its value's writer in launch order (the plan's order is
    # topological), so the writer joins its accessors first, as Buffer's checks would have it.
    return [unchecked(Buffer, {"name": name, "nbytes": values[name].desc.extent_bytes, "writer": writer,
                              "accessors": (writer, *sorted(touched[name] - {writer})),
                              "held": not copied_out.isdisjoint(touched[name])})
            for name, writer in writers.items()]


def _placements(graph: BoundGraph, nodes: Sequence[PlannedNode], offsets: Mapping[str, int],
                sizes: Mapping[str, int], touchers: _Touchers | None = None) -> dict[str, ValuePlacement]:
    writers, readers = touchers if touchers is not None else _touchers(graph, nodes)
    outputs = set(graph.outputs.values())
    result: dict[str, ValuePlacement] = {}
    for name, value in graph.values.items():
        if value.kind == "view":
            kind, nbytes = "view", 0
        elif value.kind == "constant":
            kind, nbytes = "constant", value.desc.extent_bytes
        elif value.kind == "input":
            kind, nbytes = "input", sizes[name]
        else:
            kind, nbytes = ("output" if name in outputs else "activation"), sizes.get(name, 0)
        result[name] = unchecked(ValuePlacement, {
            "name": name, "desc": value.desc, "kind": kind, "arena_offset": offsets.get(name), "nbytes": nbytes,
            "base": value.base, "writer": writers.get(name), "readers": tuple(readers[name])})
    return result
