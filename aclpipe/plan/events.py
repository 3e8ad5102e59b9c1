"""Events between streams: which producers record one, and which consumers wait.

Nodes are taken in launch order (node ``i`` is the ``i``-th launched; every predecessor has a
smaller index).  Each stream keeps a vector clock: entry ``t`` is how many of stream ``t``'s
nodes it already knows are complete.  A node on stream ``s`` needs a wait for a producer on
another stream only if ``s``'s clock does not cover it yet, and then only if no other producer
it waits for already covers it (waiting on a later node of the same stream, or on a node that
itself waited, implies the earlier one).  A wait merges the producer's clock at its record
into the consumer stream's clock; a producer records (once) only if someone waits on it.
This is tinygrad's "already waited up to" table generalized across streams.

The resulting :class:`EventPlacement` also answers *happens-before* for the memory planner:
node ``a`` completes before node ``b`` starts exactly when ``b``'s clock counts ``a``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .order import Dag

__all__ = ["EventPlacement", "cross_stream_edges", "place_events"]


@dataclass(frozen=True)
class EventPlacement:
    """Waits and records for a DAG in launch order, and the vector clocks they imply.

    Attributes
    ----------
    waits:
        Per node, the producers whose recorded event it waits on before launch.
    records:
        Per node, whether an event is recorded right after it.
    positions:
        Per node, its index within its stream.
    clocks:
        Per node, the clock before it starts: entry ``t`` counts stream ``t``'s nodes known complete.
    cross_stream_edges:
        Dependencies between nodes on different streams (what one wait per edge would cost).
    """

    streams: tuple[int, ...]
    waits: tuple[tuple[int, ...], ...]
    records: tuple[bool, ...]
    positions: tuple[int, ...]
    clocks: tuple[tuple[int, ...], ...]
    cross_stream_edges: int

    @property
    def num_events(self) -> int:
        return sum(self.records)

    @property
    def num_waits(self) -> int:
        return sum(len(w) for w in self.waits)

    def happens_before(self, first: int, second: int) -> bool:
        """Whether node ``first`` is complete before node ``second`` starts, in every execution."""
        return first != second and self.clocks[second][self.streams[first]] > self.positions[first]


def cross_stream_edges(dag: Dag, streams: Sequence[int]) -> int:
    """How many data edges cross streams: the waits a plan without pruning would enqueue."""
    return sum(1 for pred, node in dag.edges if streams[pred] != streams[node])


def place_events(dag: Dag, streams: Sequence[int]) -> EventPlacement:
    """Minimal waits for ``dag`` (in launch order) run on ``streams`` (one per node)."""
    for node, preds in enumerate(dag.preds):
        if preds and max(preds) >= node:
            raise ValueError(f"place_events: node {node} depends on {max(preds)}, which launches later")
    width = max(streams, default=-1) + 1
    known = [[0] * width for _ in range(width)]  # per stream: what its tail knows
    after: list[tuple[int, ...]] = []  # per node: its clock once complete (what its event carries)
    positions: list[int] = []
    clocks: list[tuple[int, ...]] = []
    waits: list[tuple[int, ...]] = []
    records = [False] * len(dag)
    launched = [0] * width
    for node, preds in enumerate(dag.preds):
        stream = streams[node]
        clock = known[stream]
        pending = [p for p in preds if clock[streams[p]] <= positions[p]]
        needed = _uncovered(pending, streams, positions, after) if len(pending) > 1 else tuple(pending)
        for producer in needed:
            clock = list(map(max, clock, after[producer]))
            records[producer] = True
        position = launched[stream]
        launched[stream] += 1
        clocks.append(tuple(clock))
        positions.append(position)
        waits.append(needed)
        done = list(clock)
        done[stream] = position + 1
        after.append(tuple(done))
        known[stream] = done
    return EventPlacement(tuple(streams), tuple(waits), tuple(records), tuple(positions), tuple(clocks),
                          cross_stream_edges(dag, streams))


def _uncovered(pending: Sequence[int], streams: Sequence[int], positions: Sequence[int],
               after: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    """The producers no *other* pending producer's clock already counts.

    Per stream, the two largest counts among the pending producers' clocks (and whose the
    largest is) answer "the best count excluding ``p``" at once, so a node with many
    producers costs linear, not quadratic, time.
    """
    width = len(after[pending[0]])
    best = [-1] * width
    owner = [-1] * width
    second = [-1] * width
    for producer in pending:
        for stream, count in enumerate(after[producer]):
            if count > best[stream]:
                best[stream], second[stream], owner[stream] = count, best[stream], producer
            elif count > second[stream]:
                second[stream] = count
    result = []
    for producer in pending:
        stream = streams[producer]
        others = second[stream] if owner[stream] == producer else best[stream]
        if others <= positions[producer]:
            result.append(producer)
    return tuple(result)
