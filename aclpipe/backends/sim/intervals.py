"""What the sanitizer remembers of one allocation: disjoint byte segments, each with its accesses.

An allocation's accessed bytes are cut into disjoint segments ``[start, end)``, kept sorted
by start, so that the segments an access overlaps are found by bisection and then walked:
an access costs O(log n + k) for n segments, k of them overlapped, instead of a scan of
every range ever recorded (issue 25); only an access that changes the segments' shape also
shifts the lists behind it, one memmove of n pointers.  Every byte of one segment has the same history: the
last write to it, and per actor the last read since that write (a later read by the same
actor is ordered after an earlier one, so only the latest is kept, as before).

A write gives its bytes one new history, so it replaces the segments it covers by a single
one (merging); a read keeps the boundaries it finds and adds itself to every segment it
overlaps, splitting the two at its ends and filling the gaps nobody accessed yet.  A segment
boundary therefore exists only where some access began or ended and no later write covered
it: the map stays as small as the set of live ranges.  Segments are also indexed by their
exact range, so an access that is exactly one segment (most of them, in a pipeline replaying
the same offsets run after run) costs one dict lookup to check and one to remember.

Two counters tell whoever remembered the map's state whether it changed since: ``version``
counts every access remembered, ``writes`` the writes.  A sanitized replay of a captured model
(:mod:`.replay_summary`) skips an allocation nothing else touched since its previous replay.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from typing import Generic, TypeVar

__all__ = ["Segment", "SegmentMap"]

A = TypeVar("A")


class Segment(Generic[A]):
    """The history shared by every byte of one segment."""

    __slots__ = ("last_write", "reads")

    def __init__(self, last_write: A | None = None, reads: dict[str, A] | None = None) -> None:
        self.last_write = last_write
        self.reads: dict[str, A] = reads if reads is not None else {}

    def copy(self) -> Segment[A]:
        # The dict is copied with its order: the sanitizer reports the first unordered read
        # it meets, so both halves of a split must list their readers alike.
        return Segment(self.last_write, dict(self.reads))


class SegmentMap(Generic[A]):
    """Sorted disjoint segments of one allocation (see the module docstring).

    ``A`` is what an access is recorded as (the sanitizer's ``Access``); the map only stores it.
    """

    __slots__ = ("_ends", "_exact", "_segments", "_starts", "version", "writes")

    def __init__(self) -> None:
        #: Accesses remembered so far, and writes among them (see the module docstring).
        self.version = 0
        self.writes = 0
        # Three parallel lists rather than a list of tuples: bisection runs on the starts alone.
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._segments: list[Segment[A]] = []
        # Every segment by its exact range.  An access whose range is one segment, the common
        # case of a plan whose tensors keep their offsets run after run, is then one dict
        # lookup: disjoint segments mean no other segment can meet it.
        self._exact: dict[tuple[int, int], Segment[A]] = {}

    def __len__(self) -> int:
        return len(self._starts)

    def _first(self, start: int) -> int:
        """Index of the first segment ending after ``start``."""
        index = bisect_right(self._starts, start) - 1
        if index < 0 or self._ends[index] <= start:
            index += 1
        return index

    def overlapping(self, start: int, end: int) -> list[Segment[A]]:
        """The segments meeting ``[start, end)``, in address order."""
        segment = self._exact.get((start, end))
        if segment is not None:
            return [segment]
        starts = self._starts
        first = bisect_right(starts, start) - 1
        if first < 0 or self._ends[first] <= start:
            first += 1
        last = first
        while last < len(starts) and starts[last] < end:
            last += 1
        return self._segments[first:last]

    def _cut(self, at: int) -> None:
        """Make ``at`` a boundary if a segment straddles it (both halves keep its history)."""
        index = bisect_right(self._starts, at) - 1
        if index < 0 or not self._starts[index] < at < self._ends[index]:
            return
        start, end, left = self._starts[index], self._ends[index], self._segments[index]
        right = left.copy()
        self._starts.insert(index + 1, at)
        self._ends.insert(index + 1, end)
        self._segments.insert(index + 1, right)
        self._ends[index] = at
        del self._exact[start, end]
        self._exact[start, at] = left
        self._exact[at, end] = right

    def _span(self, start: int, end: int) -> tuple[int, int]:
        """Cut at ``start`` and ``end``; the index range of the segments inside ``[start, end)``."""
        self._cut(start)
        self._cut(end)
        first = self._first(start)
        last = first
        while last < len(self._starts) and self._starts[last] < end:
            last += 1
        return first, last

    def write(self, start: int, end: int, access: A) -> None:
        """``access`` wrote ``[start, end)``: those bytes now share one history, this write alone."""
        self.version += 1
        self.writes += 1
        segment = self._exact.get((start, end))
        if segment is not None:
            segment.last_write = access
            segment.reads = {}
            return
        first, last = self._span(start, end)
        for index in range(first, last):
            del self._exact[self._starts[index], self._ends[index]]
        segment = self._exact[start, end] = Segment(access)
        # A slice assignment of equal length moves nothing: only a write merging several
        # segments, or filling a gap, shifts the lists behind it.
        self._starts[first:last] = [start]
        self._ends[first:last] = [end]
        self._segments[first:last] = [segment]

    def read(self, start: int, end: int, actor: str, access: A) -> None:
        """``access`` by ``actor`` read ``[start, end)``: it becomes that actor's last read of
        every byte, and bytes nobody accessed before get a segment of their own."""
        self.version += 1
        segment = self._exact.get((start, end))
        if segment is not None:
            segment.reads[actor] = access
            return
        first, last = self._span(start, end)
        starts, ends, segments = [], [], []
        cursor = start
        for index in range(first, last):
            if cursor < self._starts[index]:  # a gap: bytes never accessed
                starts.append(cursor)
                ends.append(self._starts[index])
                segments.append(self._gap(cursor, self._starts[index], actor, access))
            segment = self._segments[index]
            segment.reads[actor] = access
            starts.append(self._starts[index])
            ends.append(self._ends[index])
            segments.append(segment)
            cursor = self._ends[index]
        if cursor < end:
            starts.append(cursor)
            ends.append(end)
            segments.append(self._gap(cursor, end, actor, access))
        if len(starts) != last - first:  # only gaps change the lists' shape
            self._starts[first:last] = starts
            self._ends[first:last] = ends
            self._segments[first:last] = segments

    def _gap(self, start: int, end: int, actor: str, access: A) -> Segment[A]:
        """A new segment for bytes never accessed before, read by ``access``."""
        segment = self._exact[start, end] = Segment(reads={actor: access})
        return segment

    def overlapping_ranges(self, start: int, end: int) -> list[tuple[int, int, Segment[A]]]:
        """The segments meeting ``[start, end)`` with their own ranges, in address order."""
        first = self._first(start)
        last = first
        while last < len(self._starts) and self._starts[last] < end:
            last += 1
        return list(zip(self._starts[first:last], self._ends[first:last], self._segments[first:last]))

    def segments(self) -> Iterator[tuple[int, int, Segment[A]]]:
        """Every segment in address order (for tests and debugging)."""
        return zip(self._starts, self._ends, self._segments)
