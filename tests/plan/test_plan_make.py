"""make_plan on hand-made bound graphs: nodes, streams, values, summary and DOT."""

from __future__ import annotations

import re

import pytest
from plan_dags import chain, dependencies, diamond, fan, happens_before, make_bound, towers

from aclpipe.plan import A2_RULE, ASCEND_950_RULE, ArenaRule, make_plan


def test_copies_get_their_own_streams() -> None:
    plan = make_plan(diamond(), streams=2)
    h2d = [n for n in plan.nodes if n.op == "H2D"]
    d2h = [n for n in plan.nodes if n.op == "D2H"]
    assert [n.name for n in h2d] == ["h2d:x"] and h2d[0].outputs == ("x",) and h2d[0].inputs == ()
    assert [n.name for n in d2h] == ["d2h:out_d"] and d2h[0].inputs == ("d",)
    assert {n.stream for n in h2d} == {plan.h2d_stream} == {plan.num_streams}
    assert {n.stream for n in d2h} == {plan.d2h_stream} == {plan.num_streams + 1}
    assert all(n.stream < plan.num_streams for n in plan.nodes if n.op not in ("H2D", "D2H"))
    assert plan.nodes[0].name == "h2d:x" and plan.nodes[-1].name == "d2h:out_d"
    assert [n.index for n in plan.nodes] == list(range(len(plan.nodes)))


def test_diamond_branches_run_concurrently() -> None:
    plan = make_plan(diamond(), streams=2)
    stream = {n.name: n.stream for n in plan.nodes}
    assert stream["b"] != stream["c"]
    assert plan.num_streams == 2
    assert plan.num_waits <= plan.cross_stream_edges


def test_chain_uses_one_stream_and_two_buffers() -> None:
    plan = make_plan(chain(8), streams=4)
    assert plan.num_streams == 1
    # H2D -> n0 and n7 -> D2H are the only cross-stream edges.
    assert plan.cross_stream_edges == plan.num_waits == 2
    assert plan.arena_size == plan.lower_bound
    assert plan.naive_bytes == 9 * (4096 + 64)  # ALIGN_UP(4096, 32) + 32, rounded up to 64


def test_four_towers_events_versus_edges() -> None:
    plan = make_plan(towers(4, 3), streams=4)
    assert plan.num_streams == 4
    # x -> 4 tower heads, 3 tower tails -> join (one tower shares the join's stream), join -> D2H.
    assert plan.cross_stream_edges == 8
    assert plan.num_waits == 8 and plan.num_events == 5


def test_fan_out_prunes_waits() -> None:
    plan = make_plan(fan(8), streams=2)
    assert plan.num_waits < plan.cross_stream_edges
    hb = happens_before(plan)
    assert all(p in hb[c] for p, c in dependencies(plan))


def test_value_placements() -> None:
    bound = make_bound({"a": ["x"], "b": ["v"], "c": ["b"]}, views={"v": "a"}, sizes={"a": 1000})
    plan = make_plan(bound, streams=1)
    values = plan.values
    assert values["x"].kind == "input" and values["x"].arena_offset is not None
    assert values["a"].kind == "activation" and values["a"].nbytes == 1088  # ALIGN_UP(1000, 32) + 32 -> 64
    assert values["v"].kind == "view" and values["v"].base == "a" and values["v"].arena_offset is None
    assert values["v"].nbytes == 0
    assert values["c"].kind == "output"
    # The view's reader keeps its base alive: b cannot take a's bytes.
    assert values["a"].arena_offset != values["b"].arena_offset
    names = {n.name for n in plan.nodes}
    assert "view_v" not in names  # view nodes launch nothing
    index = {n.name: n.index for n in plan.nodes}
    assert values["a"].writer == index["a"] and values["v"].readers == (index["b"],)


def test_the_arena_rule_is_a_parameter_of_the_plan() -> None:
    default = make_plan(chain(8), streams=1)
    assert default.arena_rule == A2_RULE and default.alignment == 64 and default.memory_strategy
    ascend950 = make_plan(chain(8), streams=1, rule=ASCEND_950_RULE)
    assert ascend950.naive_bytes == 9 * 4096 and ascend950.arena_size == ascend950.lower_bound == 2 * 4096
    whole = make_plan(chain(8), streams=1, alignment=512)  # the rule before CANN's padding was applied
    assert whole.arena_rule == ArenaRule(512, 0, 512) and whole.naive_bytes == 9 * 4096
    assert all(v.arena_offset % 512 == 0 for v in whole.values.values() if v.arena_offset is not None)


def test_costs_can_be_given() -> None:
    bound = make_bound({"a": ["x"], "b": ["x"]})
    order = [n.name for n in make_plan(bound, costs={"a": 1.0, "b": 100.0}).nodes]
    assert order.index("b") < order.index("a")
    assert make_plan(bound, costs={"b": 100.0}).nodes[order.index("b")].cost == 100.0


def test_bad_stream_count() -> None:
    with pytest.raises(ValueError, match="streams"):
        make_plan(diamond(), streams=0)


def test_summary_lists_streams_waits_and_memory() -> None:
    plan = make_plan(towers(4, 2), streams=4)
    text = plan.summary()
    assert "4 compute stream(s)" in text and "H2D on stream 4" in text and "D2H on stream 5" in text
    assert f"{plan.num_waits} wait(s)" in text and f"would be {plan.cross_stream_edges}" in text
    assert "lower bound" in text and "waits [h2d:x]" in text and "record" in text
    assert "pieces of ALIGN_UP(len, 32) + 32 B at offsets aligned to 64 B" in text
    for name in ("x", "t0_0", "join"):
        assert re.search(rf"^\s+{re.escape(name)}\s", text, re.MULTILINE)


def test_dot_has_a_cluster_per_stream_and_dashed_waits() -> None:
    plan = make_plan(towers(3, 2), streams=3)
    dot = plan.to_dot()
    assert dot.startswith('digraph "dag" {') and dot.rstrip().endswith("}")
    assert dot.count("subgraph cluster_") == plan.stream_count
    assert dot.count("style=dashed") == plan.num_waits
    assert dot.count("{") == dot.count("}")


def test_dot_notes_add_a_last_label_line_to_the_nodes_they_name() -> None:
    plan = make_plan(towers(3, 2), streams=3)
    node = plan.nodes[1]
    dot = plan.to_dot({node.name: 'took "long"', "not a node": "ignored"})
    assert f'n{node.index} [label="{node.name}\\n{node.op}\\ntook \\"long\\"", fillcolor' in dot
    assert "ignored" not in dot
    # Only the labels of the nodes named change.
    plain = plan.to_dot()
    assert [a for a, b in zip(dot.splitlines(), plain.splitlines()) if a != b] == [
        line for line in dot.splitlines() if line.startswith(f"    n{node.index} [label=")]
