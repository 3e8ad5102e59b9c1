"""Event placement: one record per waited producer, waits pruned by vector clocks."""

from __future__ import annotations

import pytest
from dag_strategies import dags
from hypothesis import given, settings
from hypothesis import strategies as st

from aclpipe.plan import Dag, place_events


def test_same_stream_needs_no_events() -> None:
    dag = Dag.from_edges(3, [(0, 1), (1, 2), (0, 2)])
    events = place_events(dag, [0, 0, 0])
    assert events.num_events == events.num_waits == events.cross_stream_edges == 0


def test_diamond_on_two_streams() -> None:
    # 0 -> {1, 2} -> 3 with 2 on another stream: 2 waits for 0, 3 waits for 2.
    dag = Dag.from_edges(4, [(0, 1), (0, 2), (1, 3), (2, 3)])
    events = place_events(dag, [0, 0, 1, 0])
    assert events.waits == ((), (), (0,), (2,))
    assert events.records == (True, False, True, False)
    assert events.cross_stream_edges == 2
    assert events.happens_before(0, 3) and events.happens_before(2, 3)
    assert not events.happens_before(1, 2) and not events.happens_before(2, 1)


def test_a_known_producer_is_not_waited_for_again() -> None:
    # 1 and 2 on stream 1 both read 0 (stream 0): only the first waits.
    dag = Dag.from_edges(3, [(0, 1), (0, 2)])
    events = place_events(dag, [0, 1, 1])
    assert events.waits == ((), (0,), ())
    assert events.num_waits == 1 and events.cross_stream_edges == 2


def test_waiting_on_a_later_node_covers_earlier_ones() -> None:
    # 0 -> 1 on stream 0; 2 (stream 1) reads both: one wait, on 1.
    dag = Dag.from_edges(3, [(0, 1), (0, 2), (1, 2)])
    events = place_events(dag, [0, 0, 1])
    assert events.waits == ((), (), (1,))
    assert events.records == (False, True, False)


def test_transitive_knowledge_across_three_streams() -> None:
    # 0 (s0) -> 1 (s1) -> 2 (s2), and 2 also reads 0: waiting on 1 already covers 0.
    dag = Dag.from_edges(3, [(0, 1), (1, 2), (0, 2)])
    events = place_events(dag, [0, 1, 2])
    assert events.waits == ((), (0,), (1,))
    assert events.num_waits == 2 and events.cross_stream_edges == 3


def test_producers_must_launch_first() -> None:
    with pytest.raises(ValueError, match="launches later"):
        place_events(Dag.from_edges(2, [(1, 0)]), [0, 1])


def _reference_waits(dag: Dag, streams: list[int]) -> list[tuple[int, ...]]:
    """The rule written out pairwise: a pending producer is dropped when another pending
    producer's clock already counts it."""
    width = max(streams) + 1
    known = [[0] * width for _ in range(width)]
    after: list[list[int]] = []
    positions: list[int] = []
    launched = [0] * width
    waits = []
    for node, preds in enumerate(dag.preds):
        stream = streams[node]
        clock = known[stream]
        pending = [p for p in preds if clock[streams[p]] <= positions[p]]
        needed = tuple(p for p in pending
                       if not any(q != p and after[q][streams[p]] > positions[p] for q in pending))
        for producer in needed:
            clock = [max(a, b) for a, b in zip(clock, after[producer])]
        positions.append(launched[stream])
        launched[stream] += 1
        done = list(clock)
        done[stream] = positions[-1] + 1
        after.append(done)
        known[stream] = done
        waits.append(needed)
    return waits


@settings(deadline=None, max_examples=100)
@given(dags(max_size=50), st.data())
def test_waits_follow_the_pairwise_rule(dag: Dag, data: st.DataObject) -> None:
    streams = data.draw(st.lists(st.integers(0, 3), min_size=len(dag), max_size=len(dag)))
    assert list(place_events(dag, streams).waits) == _reference_waits(dag, streams)
