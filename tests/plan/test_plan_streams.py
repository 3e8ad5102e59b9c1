"""Transitive reduction, chain decomposition and stream packing."""

from __future__ import annotations

import itertools

import pytest
from dag_strategies import dags, descendants
from hypothesis import given, settings

from aclpipe.plan import Dag, assign_streams, chains, transitive_reduction


def test_transitive_reduction_drops_implied_edges() -> None:
    dag = Dag.from_edges(4, [(0, 1), (1, 2), (0, 2), (2, 3), (0, 3)])
    assert set(transitive_reduction(dag).edges) == {(0, 1), (1, 2), (2, 3)}


def test_a_chain_is_one_chain_on_one_stream() -> None:
    dag = Dag.from_edges(5, [(i, i + 1) for i in range(4)])
    assert chains(dag) == [[0, 1, 2, 3, 4]]
    assert assign_streams(dag, 4) == (0,) * 5


def test_four_towers_become_four_chains_on_four_streams() -> None:
    # 0 fans out to four towers of two nodes; 9 joins them.
    edges = [(0, 1), (1, 2), (0, 3), (3, 4), (0, 5), (5, 6), (0, 7), (7, 8), (2, 9), (4, 9), (6, 9), (8, 9)]
    dag = Dag.from_edges(10, edges)
    found = chains(dag)
    assert len(found) == 4
    assert sorted(n for chain in found for n in chain) == list(range(10))
    streams = assign_streams(dag, 4)
    assert len(set(streams)) == 4
    assert {streams[1], streams[3], streams[5], streams[7]} == {0, 1, 2, 3}
    # Each tower stays on one stream.
    assert all(streams[a] == streams[a + 1] for a in (1, 3, 5, 7))


def test_stream_cap_is_respected() -> None:
    edges = [(0, k) for k in range(1, 9)] + [(k, 9) for k in range(1, 9)]
    dag = Dag.from_edges(10, edges)
    assert len(chains(dag)) == 8
    for cap in (1, 2, 3, 8):
        assert max(assign_streams(dag, cap)) < cap
    assert assign_streams(dag, 1) == (0,) * 10


def test_streams_are_numbered_by_first_node() -> None:
    dag = Dag.from_edges(4, [(0, 2), (1, 3)])
    streams = assign_streams(dag, 4)
    assert streams[0] == 0
    assert streams[1] == 1


def test_matching_keeps_the_critical_path_on_one_stream() -> None:
    # 0 feeds a cheap node 1 and an expensive chain 2 -> 3: the chain continues from 0.
    dag = Dag.from_edges(4, [(0, 1), (0, 2), (2, 3)], costs=[1, 1, 10, 10])
    streams = assign_streams(dag, 2)
    assert streams[0] == streams[2] == streams[3]
    assert streams[1] != streams[0]


def test_bad_cap_and_empty_dag() -> None:
    with pytest.raises(ValueError, match="max_streams"):
        assign_streams(Dag(((),)), 0)
    assert assign_streams(Dag(()), 3) == ()


def _reference_reduction(dag: Dag) -> set[tuple[int, int]]:
    truth = descendants(dag)
    return {(p, n) for p, n in dag.edges if not any(n in truth[q] for q in dag.succs[p] if q != n)}


@settings(deadline=None, max_examples=100)
@given(dags(max_size=60))
def test_transitive_reduction_matches_the_closure(dag: Dag) -> None:
    """Edge p -> n stays exactly when no other successor of p leads to n (fan-ins over 16 included)."""
    assert set(transitive_reduction(dag).edges) == _reference_reduction(dag)


def _max_matching(succs: list[list[int]], size: int) -> int:
    """Plain Kuhn's algorithm, restarting every search from scratch."""
    owner: dict[int, int] = {}

    def augment(left: int, seen: set[int]) -> bool:
        for right in succs[left]:
            if right not in seen:
                seen.add(right)
                if right not in owner or augment(owner[right], seen):
                    owner[right] = left
                    return True
        return False

    return sum(augment(node, set()) for node in range(size))


@settings(deadline=None, max_examples=100)
@given(dags())
def test_chains_are_a_minimum_cover_along_reduced_edges(dag: Dag) -> None:
    found = chains(dag)
    reduced = set(transitive_reduction(dag).edges)
    assert sorted(node for chain in found for node in chain) == list(range(len(dag)))
    assert all(edge in reduced for chain in found for edge in itertools.pairwise(chain))
    succs = [[n for p, n in sorted(reduced) if p == node] for node in range(len(dag))]
    assert len(found) == len(dag) - _max_matching(succs, len(dag))
