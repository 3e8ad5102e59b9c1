"""Arena placement on hand-written buffers and event placements."""

from __future__ import annotations

import pytest

from aclpipe.plan import Buffer, Dag, place_events, plan_memory
from aclpipe.plan.memory import aligned, live_set_lower_bound


def _chain_events(length: int, streams: list[int] | None = None):
    dag = Dag.from_edges(length, [(i, i + 1) for i in range(length - 1)])
    return place_events(dag, streams or [0] * length)


def test_alignment() -> None:
    assert aligned(1) == 512 and aligned(512) == 512 and aligned(513) == 1024 and aligned(0) == 0
    assert aligned(33, 32) == 64


def test_a_chain_ping_pongs_between_two_buffers() -> None:
    events = _chain_events(5)
    buffers = [Buffer(f"v{i}", 4096, i, (i, i + 1) if i < 4 else (i,)) for i in range(5)]
    memory = plan_memory(buffers, events)
    assert memory.arena_size == memory.lower_bound == 2 * 4608  # pieces of 4096 + 32, to 512
    assert memory.naive_bytes == 5 * 4608
    for i in range(4):
        assert memory.offsets[f"v{i}"] != memory.offsets[f"v{i + 1}"]


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
    memory = plan_memory([Buffer("a", 4096, 0, (0, 1)), Buffer("b", 4096, 2, (2,))], events)
    assert memory.offsets["a"] != memory.offsets["b"]
    assert memory.arena_size == 2 * 4608
    # With 2 ordered after 1 (2 depends on 1), the bytes can be shared.
    dag = Dag.from_edges(3, [(0, 1), (1, 2)])
    events = place_events(dag, [0, 1, 0])
    memory = plan_memory([Buffer("a", 4096, 0, (0, 1)), Buffer("b", 4096, 2, (2,))], events)
    assert memory.offsets["a"] == memory.offsets["b"]
    assert memory.arena_size == 4608


def test_a_nodes_inputs_and_outputs_never_share() -> None:
    events = _chain_events(2)
    memory = plan_memory([Buffer("in", 4096, 0, (0, 1)), Buffer("out", 4096, 1, (1,))], events)
    assert memory.offsets["in"] != memory.offsets["out"]


def test_held_buffers_live_to_the_end_in_the_bound() -> None:
    buffers = [Buffer("a", 512, 0, (0, 1), held=True), Buffer("b", 512, 2, (2, 3))]
    assert live_set_lower_bound(buffers, [512, 512]) == 1024
    assert live_set_lower_bound([Buffer("a", 512, 0, (0, 1)), buffers[1]], [512, 512]) == 512


def test_zero_byte_values_and_bad_arguments() -> None:
    events = _chain_events(2)
    memory = plan_memory([Buffer("empty", 0, 0, (0, 1)), Buffer("b", 100, 1, (1,))], events)
    assert memory.arena_size == 512
    with pytest.raises(ValueError, match="power of two"):
        plan_memory([], events, alignment=48)
    with pytest.raises(ValueError, match="before its writer"):
        Buffer("early", 16, 3, (1,))
