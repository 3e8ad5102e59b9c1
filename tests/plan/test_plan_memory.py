"""Arena placement on hand-written buffers and event placements, and CANN's sub-allocation rule."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aclpipe.plan import A2_RULE, ASCEND_950_RULE, ArenaRule, Buffer, Dag, place_events, plan_memory
from aclpipe.plan.memory import aligned, live_set_lower_bound

PIECE_4096 = 4096 + 64  # ALIGN_UP(4096, 32) + 32 = 4128, and the next piece starts 64-byte aligned


def _chain_events(length: int, streams: list[int] | None = None):
    dag = Dag.from_edges(length, [(i, i + 1) for i in range(length - 1)])
    return place_events(dag, streams or [0] * length)


def test_alignment() -> None:
    assert aligned(1, 512) == 512 and aligned(512, 512) == 512 and aligned(513, 512) == 1024 and aligned(0, 64) == 0
    assert aligned(33, 32) == 64


@pytest.mark.parametrize(("nbytes", "a2", "ascend950"), [
    (0, 0, 0), (1, 64, 64), (32, 64, 64), (33, 128, 64), (64, 128, 64), (100, 192, 128), (4096, PIECE_4096, 4096),
])
def test_the_cann_rule_pads_each_piece_and_aligns_the_next(nbytes: int, a2: int, ascend950: int) -> None:
    # A2/A3/310P/training: ALIGN_UP(len, 32) + 32 bytes; 950: ALIGN_UP(len, 32); starts 64-byte aligned.
    assert A2_RULE.footprint(nbytes) == a2
    assert ASCEND_950_RULE.footprint(nbytes) == ascend950
    assert A2_RULE == ArenaRule() and A2_RULE.offset_alignment == 64


def test_arena_rules_refuse_bad_numbers() -> None:
    with pytest.raises(ValueError, match="power of two"):
        ArenaRule(offset_alignment=48)
    with pytest.raises(ValueError, match="power of two"):
        ArenaRule(size_alignment=0)
    with pytest.raises(ValueError, match="padding must be an int >= 0"):
        ArenaRule(padding=-32)


def test_a_chain_ping_pongs_between_two_buffers() -> None:
    events = _chain_events(5)
    buffers = [Buffer(f"v{i}", 4096, i, (i, i + 1) if i < 4 else (i,)) for i in range(5)]
    memory = plan_memory(buffers, events)
    assert memory.arena_size == memory.lower_bound == 2 * PIECE_4096
    assert memory.naive_bytes == 5 * PIECE_4096
    assert memory.rule == A2_RULE and memory.alignment == 64
    assert all(offset % 64 == 0 for offset in memory.offsets.values())
    for i in range(4):
        assert memory.offsets[f"v{i}"] != memory.offsets[f"v{i + 1}"]


def test_the_old_whole_piece_alignment_is_still_available() -> None:
    events = _chain_events(5)
    buffers = [Buffer(f"v{i}", 4096, i, (i, i + 1) if i < 4 else (i,)) for i in range(5)]
    memory = plan_memory(buffers, events, 512)
    assert memory.arena_size == memory.lower_bound == 8192
    assert memory.rule == ArenaRule(512, 0, 512)
    with pytest.raises(ValueError, match="not both"):
        plan_memory(buffers, events, 512, rule=A2_RULE)


def test_a_chain_with_uneven_sizes_packs_to_the_bound() -> None:
    sizes = [100_000, 3000, 100_000, 20_000, 20_000, 100_000, 512]
    events = _chain_events(len(sizes))
    buffers = [Buffer(f"v{i}", size, i, (i, min(i + 1, len(sizes) - 1))) for i, size in enumerate(sizes)]
    memory = plan_memory(buffers, events)
    assert memory.arena_size == memory.lower_bound


def test_no_sharing_without_proven_order_across_streams() -> None:
    # 0 (s0) writes a, read by 1 (s1); 2 on s0 writes b.  Without a wait from s1, b cannot reuse a.
    dag = Dag.from_edges(3, [(0, 1)])
    events = place_events(dag, [0, 1, 0])
    for budget in (None, 0):  # conflict lists, and the launch-order sweep alone
        memory = plan_memory([Buffer("a", 4096, 0, (0, 1)), Buffer("b", 4096, 2, (2,))], events, pair_budget=budget)
        assert memory.offsets["a"] != memory.offsets["b"]
        assert memory.arena_size == 2 * PIECE_4096
    # With 2 ordered after 1 (2 depends on 1), the bytes can be shared.
    dag = Dag.from_edges(3, [(0, 1), (1, 2)])
    events = place_events(dag, [0, 1, 0])
    for budget in (None, 0):
        memory = plan_memory([Buffer("a", 4096, 0, (0, 1)), Buffer("b", 4096, 2, (2,))], events, pair_budget=budget)
        assert memory.offsets["a"] == memory.offsets["b"]
        assert memory.arena_size == PIECE_4096


def test_a_nodes_inputs_and_outputs_never_share() -> None:
    events = _chain_events(2)
    for budget in (None, 0):
        memory = plan_memory([Buffer("in", 4096, 0, (0, 1)), Buffer("out", 4096, 1, (1,))], events, pair_budget=budget)
        assert memory.offsets["in"] != memory.offsets["out"]


def test_held_buffers_live_to_the_end_in_the_bound() -> None:
    buffers = [Buffer("a", 512, 0, (0, 1), held=True), Buffer("b", 512, 2, (2, 3))]
    assert live_set_lower_bound(buffers, [512, 512]) == 1024
    assert live_set_lower_bound([Buffer("a", 512, 0, (0, 1)), buffers[1]], [512, 512]) == 512


def test_the_sweep_never_frees_what_a_device_to_host_copy_reads() -> None:
    # Node 1 is a copy on a stream nobody waits for: a's bytes stay taken for the whole run.
    dag = Dag.from_edges(4, [(0, 1), (0, 2), (2, 3)])
    events = place_events(dag, [0, 1, 0, 0])
    buffers = [Buffer("a", 4096, 0, (0, 1, 2), held=True), Buffer("b", 4096, 2, (2, 3)), Buffer("c", 4096, 3, (3,))]
    memory = plan_memory(buffers, events, pair_budget=0)
    assert memory.strategy == "launch-order sweep, best fit"
    assert len({memory.offsets["a"], memory.offsets["b"], memory.offsets["c"]}) == 3


def test_zero_byte_values_and_bad_arguments() -> None:
    events = _chain_events(2)
    memory = plan_memory([Buffer("empty", 0, 0, (0, 1)), Buffer("b", 100, 1, (1,))], events)
    assert memory.arena_size == 192  # ALIGN_UP(100, 32) + 32 = 160, rounded up to 64
    with pytest.raises(ValueError, match="power of two"):
        plan_memory([], events, alignment=48)
    with pytest.raises(ValueError, match="before its writer"):
        Buffer("early", 16, 3, (1,))


@settings(deadline=None, max_examples=60)
@given(st.lists(st.sampled_from([0, 1, 33, 100, 4096, 5000]), min_size=1, max_size=30), st.data())
def test_the_sweep_keeps_every_piece_apart_from_what_it_may_overlap(sizes: list[int], data: st.DataObject) -> None:
    """Random chains of readers on random streams: whatever the sweep shares is ordered."""
    count = len(sizes)
    streams = data.draw(st.lists(st.integers(0, 2), min_size=count, max_size=count))
    edges = [(data.draw(st.integers(0, i - 1)), i) for i in range(1, count)]
    events = place_events(Dag.from_edges(count, edges), streams)
    buffers = []
    for writer, size in enumerate(sizes):
        readers = tuple(c for p, c in edges if p == writer)
        buffers.append(Buffer(f"v{writer}", size, writer, readers, held=data.draw(st.booleans())))
    memory = plan_memory(buffers, events, pair_budget=0)
    footprint = {b.name: A2_RULE.footprint(b.nbytes) for b in buffers}
    for first in buffers:
        for second in buffers:
            if first.writer >= second.writer or not footprint[first.name] or not footprint[second.name]:
                continue
            low, high = memory.offsets[first.name], memory.offsets[second.name]
            if low < high + footprint[second.name] and high < low + footprint[first.name]:
                assert not first.held
                assert all(events.happens_before(node, second.writer) for node in first.accessors)
    assert memory.lower_bound <= memory.arena_size <= memory.naive_bytes
