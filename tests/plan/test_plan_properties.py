"""Planner invariants on random DAGs (hypothesis), checked with independent code.

Orderings are checked by plain graph search over the plan's own launch data (previous node on
the same stream, and waits), not with the planner's vector clocks.
"""

from __future__ import annotations

from itertools import combinations
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st
from plan_dags import chain, dependencies, happens_before, make_bound, touchers, tree

from aclpipe.graph.bound import BoundGraph
from aclpipe.plan import Plan, make_plan, memory

SIZES = st.sampled_from([0, 4, 100, 512, 1000, 4096, 6000, 20000, 100000])


@st.composite
def random_dags(draw: st.DrawFn) -> BoundGraph:
    count = draw(st.integers(1, 14))
    inputs = [f"x{i}" for i in range(draw(st.integers(1, 3)))]
    nodes: dict[str, list[str]] = {}
    views: dict[str, str] = {}
    for index in range(count):
        candidates = inputs + list(nodes) + list(views)
        reads = draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=3, unique=True))
        nodes[f"n{index}"] = reads
        if draw(st.booleans()) and draw(st.booleans()):
            views[f"n{index}.v"] = f"n{index}"
    used = {v for reads in nodes.values() for v in reads}
    views = {view: base for view, base in views.items() if view in used}
    values = [*inputs, *nodes]
    sizes = {name: draw(SIZES) // 4 * 4 for name in values}
    extra = draw(st.lists(st.sampled_from(list(nodes)), max_size=2, unique=True))
    sinks = [n for n in nodes if n not in used and not any(views.get(v) == n for v in used)]
    return make_bound(nodes, sizes=sizes, views=views, outputs=list(dict.fromkeys(sinks + extra)))


def check_order(plan: Plan) -> None:
    deps = dependencies(plan)
    assert all(producer < consumer for producer, consumer in deps)
    assert all(w < node.index for node in plan.nodes for w in node.waits)
    assert [n.index for n in plan.nodes] == list(range(len(plan.nodes)))


def check_streams(plan: Plan, max_streams: int) -> None:
    assert 1 <= plan.num_streams <= max_streams
    for node in plan.nodes:
        expected = {"H2D": plan.h2d_stream, "D2H": plan.d2h_stream}.get(node.op)
        if expected is None:
            assert 0 <= node.stream < plan.num_streams
        else:
            assert node.stream == expected


def check_events(plan: Plan) -> None:
    deps = dependencies(plan)
    closure = happens_before(plan)
    assert all(producer in closure[consumer] for producer, consumer in deps)
    waited = {w for node in plan.nodes for w in node.waits}
    assert {node.index for node in plan.nodes if node.record} == waited
    assert plan.num_events == len(waited) and plan.num_waits == sum(len(n.waits) for n in plan.nodes)
    assert plan.num_waits <= plan.cross_stream_edges
    # Minimal: dropping any single wait leaves some dependency unordered.
    for node in plan.nodes:
        for producer in node.waits:
            weaker = happens_before(plan, skip=(producer, node.index))
            assert any(p not in weaker[c] for p, c in deps), f"wait {producer} -> {node.index} is redundant"


def check_memory(plan: Plan) -> None:
    closure = happens_before(plan)
    arena = {name: v for name, v in plan.values.items() if v.arena_offset is not None}
    assert all(v.kind in ("input", "activation", "output") for v in arena.values())
    for value in arena.values():
        assert value.arena_offset is not None and value.arena_offset % plan.alignment == 0
        assert value.nbytes >= value.desc.extent_bytes
        assert value.arena_offset + value.nbytes <= plan.arena_size
    touched = {name: touchers(plan, name) for name in arena}
    for (a, first), (b, second) in combinations(arena.items(), 2):
        assert first.arena_offset is not None and second.arena_offset is not None
        overlap = (first.nbytes and second.nbytes and first.arena_offset < second.arena_offset + second.nbytes
                   and second.arena_offset < first.arena_offset + first.nbytes)
        if not overlap:
            continue
        assert first.writer is not None and second.writer is not None
        a_then_b = all(t in closure[second.writer] for t in touched[a])
        b_then_a = all(t in closure[first.writer] for t in touched[b])
        assert a_then_b or b_then_a, f"{a} and {b} share bytes without a proven order"
    assert plan.lower_bound <= plan.arena_size <= plan.naive_bytes


@settings(deadline=None, max_examples=100)
@given(random_dags(), st.integers(1, 5))
def test_random_dag_plans_hold_every_invariant(bound: BoundGraph, max_streams: int) -> None:
    plan = make_plan(bound, streams=max_streams)
    check_order(plan)
    check_streams(plan, max_streams)
    check_events(plan)
    check_memory(plan)


@settings(deadline=None, max_examples=60)
@given(random_dags(), st.integers(1, 5))
def test_plans_placed_by_the_sweep_alone_hold_every_invariant(bound: BoundGraph, max_streams: int) -> None:
    """What graphs too large for conflict lists get: the launch-order sweep."""
    with mock.patch.object(memory, "PAIR_BUDGET", 0):
        plan = make_plan(bound, streams=max_streams)
    assert plan.memory_strategy == "launch-order sweep, best fit"
    check_memory(plan)


@settings(deadline=None, max_examples=40)
@given(st.lists(SIZES, min_size=1, max_size=25), st.integers(1, 4))
def test_chains_pack_within_ten_percent_of_the_bound(sizes: list[int], max_streams: int) -> None:
    bound = chain(len(sizes), sizes={f"n{i}": size // 4 * 4 for i, size in enumerate(sizes)})
    plan = make_plan(bound, streams=max_streams)
    check_memory(plan)
    assert plan.arena_size <= 1.10 * plan.lower_bound


@settings(deadline=None, max_examples=40)
@given(st.lists(st.integers(1, 3), min_size=1, max_size=4), st.sampled_from([512, 4096, 20000]))
def test_trees_on_one_stream_pack_within_ten_percent_of_the_bound(branching: list[int], size: int) -> None:
    shape = tree(branching)
    bound = tree(branching, sizes=dict.fromkeys(shape.values, size))
    plan = make_plan(bound, streams=1)
    check_memory(plan)
    assert plan.arena_size <= 1.10 * plan.lower_bound
