"""When two arena buffers may share bytes, read off the plan's vector clocks.

Buffer ``i`` *precedes* buffer ``j`` when every node touching ``i`` is complete before ``j``'s
writer starts, in every execution: for each stream ``t``, the writer's clock counts at least
``done_i[t]`` nodes of ``t``, where ``done_i[t]`` is one past the position of ``i``'s last
toucher on ``t``.  Two buffers may share bytes only if one precedes the other (ordering is
proven, never assumed: ONNX Runtime's rule for reuse across streams).

Nothing here builds an ``n x n`` matrix.  :class:`Lifetimes` keeps, per buffer, its writer,
its last toucher in launch order, ``done`` and the writer's clock (``O(n x streams)``), which
answers "does ``i`` precede ``j``" in ``O(streams)``.  :func:`conflict_lists` lists every
conflicting pair, but only up to a budget: a buffer written at node ``w`` conflicts with the
buffers alive at ``w`` in launch order (written before, touched at or after ``w``: nothing
launched later can happen-before ``w``) and with buffers touched by nodes that ``w``'s clock
does not count yet (per stream, the nodes from the clock's count up to ``w``).  That costs time
in proportion to the pairs found, which is what placement would walk anyway; past the budget
the caller places buffers without lists (:mod:`.sweep`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .events import EventPlacement
    from .memory import Buffer

__all__ = ["Lifetimes", "conflict_lists", "overlap_pairs"]


@dataclass(frozen=True)
class Lifetimes:
    """Per buffer: ``writer`` and ``last`` (node indices in launch order), ``done`` (per stream,
    one past its last toucher's position there, 0 when none) and ``known`` (the writer's clock)."""

    writer: tuple[int, ...]
    last: tuple[int, ...]
    done: tuple[tuple[int, ...], ...]
    known: tuple[tuple[int, ...], ...]

    @classmethod
    def of(cls, buffers: Sequence[Buffer], events: EventPlacement) -> Lifetimes:
        width = len(events.clocks[0]) if events.clocks else 0
        done: list[tuple[int, ...]] = []
        for buffer in buffers:
            counts = [0] * width
            for node in buffer.accessors:
                stream = events.streams[node]
                counts[stream] = max(counts[stream], events.positions[node] + 1)
            done.append(tuple(counts))
        return cls(tuple(b.writer for b in buffers), tuple(b.accessors[-1] for b in buffers), tuple(done),
                   tuple(events.clocks[b.writer] for b in buffers))

    def precedes(self, first: int, second: int) -> bool:
        """Whether every toucher of buffer ``first`` completes before buffer ``second``'s writer starts."""
        return all(need <= have for need, have in zip(self.done[first], self.known[second]))


def overlap_pairs(lifetimes: Lifetimes, sizes: Sequence[int]) -> int:
    """How many pairs of non-empty buffers are alive together in launch order (every one of
    them conflicts): a lower bound on the pairs :func:`conflict_lists` would list, in
    ``O(n log n)``."""
    starts = sorted(w for w, size in zip(lifetimes.writer, sizes) if size)
    ends = sorted(last for last, size in zip(lifetimes.last, sizes) if size)
    pairs = ended = 0
    for born, writer in enumerate(starts):
        while ended < len(ends) and ends[ended] < writer:
            ended += 1
        pairs += born - ended  # alive when this one is written
    return pairs


def conflict_lists(buffers: Sequence[Buffer], events: EventPlacement, sizes: Sequence[int], lifetimes: Lifetimes,
                   budget: int) -> list[list[int]] | None:
    """Per buffer, the buffers it may not share bytes with; None past ``budget`` pairs.

    Buffers of 0 bytes share with everything and are left out.
    """
    touched_by: dict[int, list[int]] = {}
    written_at: dict[int, list[int]] = {}
    for index, buffer in enumerate(buffers):
        if sizes[index]:
            written_at.setdefault(buffer.writer, []).append(index)
            for node in buffer.accessors:
                touched_by.setdefault(node, []).append(index)
    on_stream: list[list[int]] = [[] for _ in range(len(events.clocks[0]) if events.clocks else 0)]
    for node, stream in enumerate(events.streams):
        on_stream[stream].append(node)
    lists: list[list[int]] = [[] for _ in buffers]
    stamp = [-1] * len(buffers)
    alive: dict[int, None] = {}  # insertion-ordered set of buffers written and not yet past their last toucher
    ending = sorted((index for nodes in written_at.values() for index in nodes), key=lifetimes.last.__getitem__)
    cursor = pairs = 0
    for node in sorted(written_at):
        while cursor < len(ending) and lifetimes.last[ending[cursor]] < node:
            alive.pop(ending[cursor], None)
            cursor += 1
        for new in written_at[node]:
            stamp[new] = new
            found = [old for old in alive if stamp[old] != new]
            for old in found:
                stamp[old] = new
            found += _unknown(node, new, events, on_stream, touched_by, lifetimes, stamp)
            for old in found:
                lists[old].append(new)
                lists[new].append(old)
            pairs += len(found)
            if pairs > budget:
                return None
            alive[new] = None
    return lists


def _unknown(node: int, new: int, events: EventPlacement, on_stream: Sequence[Sequence[int]],
             touched_by: dict[int, list[int]], lifetimes: Lifetimes, stamp: list[int]) -> list[int]:
    """Buffers, already dead in launch order, touched by nodes launched before ``node`` that
    ``node``'s clock does not count (they may still run when ``node`` starts)."""
    found: list[int] = []
    clock = events.clocks[node]
    own = events.streams[node]
    for stream, nodes in enumerate(on_stream):
        if stream == own:
            continue  # a stream's own earlier nodes are always counted
        for position in range(clock[stream], len(nodes)):
            other = nodes[position]
            if other >= node:
                break
            for old in touched_by.get(other, ()):
                if stamp[old] != new and lifetimes.writer[old] < node:
                    stamp[old] = new
                    found.append(old)
    return found
