"""SegmentMap against a per-byte table: the same history for every byte after any reads and writes."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from aclpipe.backends.sim.intervals import SegmentMap

SIZE = 48

operations = st.lists(st.tuples(st.booleans(), st.integers(0, SIZE - 1), st.integers(1, 12),
                                st.sampled_from(["s0", "s1", "host"])), max_size=40)


def per_byte(history: list[tuple[bool, int, int, str]]) -> list[tuple[Any, list[tuple[str, Any]]]]:
    """The reference: each byte's last write and its readers since, in first-read order."""
    table: list[tuple[Any, dict[str, Any]]] = [(None, {}) for _ in range(SIZE)]
    for number, (write, start, length, actor) in enumerate(history):
        for byte in range(start, min(start + length, SIZE)):
            if write:
                table[byte] = (number, {})
            else:
                table[byte][1][actor] = number
    return [(last, list(reads.items())) for last, reads in table]


def mapped(segments: SegmentMap[int]) -> list[tuple[Any, list[tuple[str, Any]]]]:
    table: list[tuple[Any, list[tuple[str, Any]]]] = [(None, []) for _ in range(SIZE)]
    for start, end, segment in segments.segments():
        for byte in range(start, end):
            table[byte] = (segment.last_write, list(segment.reads.items()))
    return table


@settings(max_examples=300, deadline=None)
@given(operations)
def test_every_byte_keeps_the_history_a_per_byte_table_keeps(history: list[tuple[bool, int, int, str]]) -> None:
    segments: SegmentMap[int] = SegmentMap()
    for number, (write, start, length, actor) in enumerate(history):
        end = min(start + length, SIZE)
        if write:
            segments.write(start, end, number)
        else:
            segments.read(start, end, actor, number)
    assert mapped(segments) == per_byte(history)


@settings(max_examples=200, deadline=None)
@given(operations, st.integers(0, SIZE - 1), st.integers(1, 16))
def test_overlapping_yields_exactly_the_segments_meeting_the_range(history: list[tuple[bool, int, int, str]],
                                                                   start: int, length: int) -> None:
    segments: SegmentMap[int] = SegmentMap()
    for number, (write, first, count, actor) in enumerate(history):
        (segments.write(first, min(first + count, SIZE), number) if write
         else segments.read(first, min(first + count, SIZE), actor, number))
    every = list(segments.segments())
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(every)), "segments are sorted and disjoint"
    expected = [segment for lo, hi, segment in every if lo < start + length and start < hi]
    assert segments.overlapping(start, start + length) == expected


def test_a_write_merges_the_segments_it_covers() -> None:
    segments: SegmentMap[str] = SegmentMap()
    for start in range(0, 40, 8):
        segments.read(start, start + 8, "s0", f"read {start}")
    assert len(segments) == 5
    segments.write(4, 36, "write")
    assert [(lo, hi, s.last_write) for lo, hi, s in segments.segments()] == [
        (0, 4, None), (4, 36, "write"), (36, 40, None)]


@settings(max_examples=200, deadline=None)
@given(operations)
def test_a_range_that_is_one_segment_overlaps_only_that_segment(history: list[tuple[bool, int, int, str]]) -> None:
    segments: SegmentMap[int] = SegmentMap()
    for number, (write, start, length, actor) in enumerate(history):
        (segments.write(start, min(start + length, SIZE), number) if write
         else segments.read(start, min(start + length, SIZE), actor, number))
    for lo, hi, segment in list(segments.segments()):
        assert segments.overlapping(lo, hi) == [segment]
