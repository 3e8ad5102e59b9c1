"""Conflict lists: every pair the vector clocks cannot order, and only those."""

from __future__ import annotations

from dag_strategies import dags
from hypothesis import given, settings
from hypothesis import strategies as st

from aclpipe.plan import Buffer, Dag, place_events
from aclpipe.plan.conflicts import Lifetimes, conflict_lists, overlap_pairs


@st.composite
def placed_buffers(draw: st.DrawFn) -> tuple[list[Buffer], object, list[int]]:
    dag = draw(dags(max_size=30))
    streams = draw(st.lists(st.integers(0, 3), min_size=len(dag), max_size=len(dag)))
    events = place_events(dag, streams)
    buffers = [Buffer(f"v{node}", 1, node, tuple(draw(st.sets(st.sampled_from(dag.succs[node])))) if dag.succs[node]
                      else ()) for node in range(len(dag))]
    sizes = draw(st.lists(st.sampled_from([0, 64, 128]), min_size=len(dag), max_size=len(dag)))
    return buffers, events, sizes


@settings(deadline=None, max_examples=80)
@given(placed_buffers())
def test_lists_hold_exactly_the_unordered_pairs(case: tuple[list[Buffer], object, list[int]]) -> None:
    buffers, events, sizes = case
    lifetimes = Lifetimes.of(buffers, events)  # type: ignore[arg-type]
    lists = conflict_lists(buffers, events, sizes, lifetimes, budget=10**9)  # type: ignore[arg-type]
    assert lists is not None
    for i, first in enumerate(buffers):
        expected = set()
        for j, second in enumerate(buffers):
            if i == j or not sizes[i] or not sizes[j]:
                continue
            # Brute force from the definition: every toucher of one happens-before the other's writer.
            ordered = (all(events.happens_before(n, second.writer) for n in first.accessors)  # type: ignore[attr-defined]
                       or all(events.happens_before(n, first.writer) for n in second.accessors))  # type: ignore[attr-defined]
            assert ordered == (lifetimes.precedes(i, j) or lifetimes.precedes(j, i))
            if not ordered:
                expected.add(j)
        assert sorted(lists[i]) == sorted(expected)
    pairs = sum(len(found) for found in lists) // 2
    assert overlap_pairs(lifetimes, sizes) <= pairs
    if pairs:
        assert conflict_lists(buffers, events, sizes, lifetimes, budget=pairs - 1) is None  # type: ignore[arg-type]


def test_a_reader_on_an_unsynchronized_stream_keeps_its_buffer_busy() -> None:
    # 0 writes a (stream 0); 1 reads it on stream 1; 2 and 3 follow on stream 0 without waiting for 1.
    dag = Dag.from_edges(4, [(0, 1), (0, 2), (2, 3)])
    events = place_events(dag, [0, 1, 0, 0])
    buffers = [Buffer("a", 64, 0, (1,)), Buffer("b", 64, 2, (3,)), Buffer("c", 64, 3, ())]
    lifetimes = Lifetimes.of(buffers, events)
    lists = conflict_lists(buffers, events, [64] * 3, lifetimes, budget=100)
    assert lists is not None
    # a's last reader launched before c's writer, but nothing orders them: c may not take a's bytes.
    assert sorted(lists[0]) == [1, 2] and sorted(lists[2]) == [0, 1]
    assert overlap_pairs(lifetimes, [64] * 3) == 1  # only b and c are alive together in launch order
