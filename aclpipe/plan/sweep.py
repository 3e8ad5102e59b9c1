"""Offset placement in one pass over launch order, like an allocator running the plan.

Buffers are taken in launch order of their writers.  Once the last node touching a buffer
has launched, its bytes become a *hole* tagged with the buffer's ``done`` counts
(:class:`~aclpipe.plan.conflicts.Lifetimes`).  A later buffer may take a hole only when its
writer's clock covers the tag (its writer provably starts after every earlier user of those
bytes: the rule of the conflict lists, checked per hole instead of per pair).  Buffers still
touched by a device-to-host copy never become holes: no stream waits for those copies.

Every later writer on a stream has a clock at least that of the stream's next writer (clocks
only grow along a stream), so the componentwise minimum of those next writers' clocks, the
*floor*, covers a tag for every writer still to come.  Holes the floor covers are *settled*:
they are merged with settled neighbours and kept sorted by size, so that the tightest one
that fits is a binary search away.  Holes the floor does not cover yet are *fresh*; a writer
looks at the most recent :data:`FRESH_LOOKS` of them (the bytes its own stream just freed are
among them) and takes one its clock covers.  Each buffer goes to the tightest hole that fits
(best fit), else grows a hole that ends at the arena's top, else goes on top.

The cost per buffer is ``O(log holes + FRESH_LOOKS + streams**2)``, whatever the number of
buffers alive at once, so this scales to graphs whose conflict lists would not fit.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Sequence

from .conflicts import Lifetimes

__all__ = ["FRESH_LOOKS", "place_sweep"]

#: Fresh holes a writer examines, newest first.
FRESH_LOOKS = 32
_UNBOUNDED = 1 << 62  # wider than any arena


def _clears(blockers: Sequence[tuple[int, int]], clock: Sequence[int]) -> bool:
    """Whether ``clock`` covers a hole with these blockers (none: a settled hole)."""
    for stream, need in blockers:
        if clock[stream] < need:
            return False
    return True


class _Holes:
    """The free bytes below the arena top.

    Every hole is in ``starts`` (sorted) and ``holes`` (start -> end and tag, ``None`` for a
    settled hole); settled holes are also in ``by_size`` and never touch each other (they are
    merged); fresh ones wait in a heap per stream for the floor to reach their tag.

    A fresh hole also keeps its *blockers* in ``fresh``: the ``(stream, count)`` parts of its
    tag the floor did not cover when it was freed.  The floor only grows and every clock still
    to come covers it, so a later clock covers the tag exactly when it covers the blockers
    (mostly one pair: one comparison instead of one per stream).
    """

    def __init__(self, width: int) -> None:
        self.starts: list[int] = []
        self.holes: dict[int, tuple[int, tuple[int, ...] | None]] = {}
        self.by_size: list[tuple[int, int]] = []
        self.fresh: dict[int, tuple[tuple[int, int], ...]] = {}  # fresh start -> its blockers, oldest first
        self.waiting: list[list[tuple[int, int]]] = [[] for _ in range(width)]  # per stream: (count, start)
        self.top = 0

    def _add(self, start: int, end: int, tag: tuple[int, ...] | None,
             blockers: tuple[tuple[int, int], ...] = ()) -> None:
        bisect.insort(self.starts, start)
        self.holes[start] = (end, tag)
        if tag is None:
            bisect.insort(self.by_size, (end - start, start))
        else:
            self.fresh[start] = blockers

    def _remove(self, start: int) -> tuple[int, tuple[int, ...] | None]:
        end, tag = self.holes.pop(start)
        del self.starts[bisect.bisect_left(self.starts, start)]
        if tag is None:
            del self.by_size[bisect.bisect_left(self.by_size, (end - start, start))]
        else:
            del self.fresh[start]
        return end, tag

    def _settle(self, start: int, end: int) -> None:
        """Add ``[start, end)`` as settled, merged with settled holes on either side."""
        at = bisect.bisect_left(self.starts, start)
        if at and self.holes[self.starts[at - 1]] == (start, None):
            start = self.starts[at - 1]
            self._remove(start)
        if end in self.holes and self.holes[end][1] is None:
            end = self._remove(end)[0]
        self._add(start, end, None)

    def free(self, start: int, end: int, tag: tuple[int, ...], floor: Sequence[int]) -> None:
        """Add ``[start, end)``, last used under ``tag``: settled at once if ``floor`` covers it."""
        blockers = tuple([(stream, need) for stream, need in enumerate(tag) if need > floor[stream]])
        if blockers:
            self._add(start, end, tag, blockers)
            blocking, need = blockers[0]
            heapq.heappush(self.waiting[blocking], (need, start))
            return
        self._settle(start, end)

    def promote(self, floor: Sequence[int]) -> None:
        """Settle the fresh holes ``floor`` now covers."""
        for stream, heap in enumerate(self.waiting):
            while heap and heap[0][0] <= floor[stream]:
                _, start = heapq.heappop(heap)
                hole = self.holes.get(start)
                if hole is not None and hole[1] is not None:
                    end, tag = self._remove(start)
                    assert tag is not None
                    self.free(start, end, tag, floor)

    def _run(self, start: int, clock: Sequence[int]) -> tuple[int, int]:
        """The widest span of adjacent holes around ``start`` that ``clock`` may use."""
        starts, holes, fresh = self.starts, self.holes, self.fresh  # locals: this runs for every hole looked at
        at = bisect.bisect_left(starts, start)
        low, high = at, at
        while low:
            neighbour = starts[low - 1]
            if holes[neighbour][0] != starts[low] or not _clears(fresh.get(neighbour, ()), clock):
                break
            low -= 1
        last = len(starts) - 1
        while high < last:
            neighbour = starts[high + 1]
            if holes[starts[high]][0] != neighbour or not _clears(fresh.get(neighbour, ()), clock):
                break
            high += 1
        return starts[low], holes[starts[high]][0]

    def take(self, size: int, clock: Sequence[int], floor: Sequence[int]) -> int:
        """Offset for ``size`` bytes under ``clock``: the tightest usable span, else the top."""
        best: tuple[int, int] | None = None  # (room, start)
        by_size, holes = self.by_size, self.holes
        at = bisect.bisect_left(by_size, (size, -1))
        if at < len(by_size):
            best = by_size[at]
        room = best[0] if best is not None else _UNBOUNDED  # what a fresh run must beat
        if room > size:  # else nothing fits tighter
            for start, blockers in itertools.islice(reversed(self.fresh.items()), FRESH_LOOKS):
                # A run holds its hole, so a hole as wide as ``room`` cannot give a tighter one.
                if holes[start][0] - start >= room:
                    continue
                for stream, need in blockers:  # _clears, inline: this runs for every hole looked at
                    if clock[stream] < need:
                        break
                else:
                    low, high = self._run(start, clock)
                    if size <= high - low < room:
                        best, room = (high - low, low), high - low
                        if room == size:
                            break  # out of the walk over the fresh holes: nothing fits tighter
        if best is None:
            start = self.top
            if (self.starts and self.holes[self.starts[-1]][0] == self.top
                    and _clears(self.fresh.get(self.starts[-1], ()), clock)):
                start = self._run(self.starts[-1], clock)[0]  # grow the arena by only what it lacks
            self._carve(start, min(start + size, self.top), floor)
            self.top = max(self.top, start + size)
            return start
        self._carve(best[1], best[1] + size, floor)
        return best[1]

    def _carve(self, start: int, end: int, floor: Sequence[int]) -> None:
        """Remove ``[start, end)``, a span of whole holes but perhaps the last, whose rest stays."""
        while start < end:
            hole_end, tag = self._remove(start)
            if hole_end > end:
                if tag is None:
                    self._add(end, hole_end, None)
                else:
                    self.free(end, hole_end, tag, floor)
            start = hole_end


def place_sweep(lifetimes: Lifetimes, sizes: Sequence[int], held: Sequence[bool], streams: Sequence[int],
                clocks: Sequence[tuple[int, ...]]) -> list[int]:
    """Offsets for every buffer (0 for empty ones), placed in launch order (see the module).

    ``streams`` and ``clocks`` are per node, as in :class:`~aclpipe.plan.events.EventPlacement`.
    """
    offsets = [0] * len(sizes)
    width = len(clocks[0]) if clocks else 0
    by_writer = sorted((i for i in range(len(sizes)) if sizes[i]), key=lambda i: (lifetimes.writer[i], i))
    by_end = sorted((i for i in by_writer if not held[i]), key=lambda i: (lifetimes.last[i], i))
    upcoming: list[list[int]] = [[] for _ in range(width)]  # per stream: its writers, last first
    for node in sorted({lifetimes.writer[i] for i in by_writer}, reverse=True):
        upcoming[streams[node]].append(node)
    holes = _Holes(width)
    cursor = 0
    writer = -1
    floor: list[int] = []
    for index in by_writer:
        if lifetimes.writer[index] != writer:
            writer = lifetimes.writer[index]
            floor = _floor(upcoming, clocks, width, writer)
            holes.promote(floor)
            while cursor < len(by_end) and lifetimes.last[by_end[cursor]] < writer:
                ended = by_end[cursor]
                holes.free(offsets[ended], offsets[ended] + sizes[ended], lifetimes.done[ended], floor)
                cursor += 1
        offsets[index] = holes.take(sizes[index], lifetimes.known[index], floor)
    return offsets


def _floor(upcoming: list[list[int]], clocks: Sequence[tuple[int, ...]], width: int, writer: int) -> list[int]:
    """Componentwise minimum of the clocks of every stream's next writer at or after ``writer``."""
    nexts = []
    for writers in upcoming:
        while writers and writers[-1] < writer:
            writers.pop()
        if writers:
            nexts.append(clocks[writers[-1]])
    return list(map(min, *nexts)) if len(nexts) > 1 else list(nexts[0]) if nexts else [0] * width
