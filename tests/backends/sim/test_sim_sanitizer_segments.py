"""The sanitizer keeps each byte's history: bytes rewritten in pieces are as rewritten as bytes
rewritten at once, and many live ranges on one allocation are each checked against their own."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from aclpipe import HazardError
from aclpipe.backends.sim.memory import Allocation
from aclpipe.backends.sim.sanitizer import Sanitizer

_names = itertools.count()


@pytest.fixture
def arena() -> Allocation:
    return Allocation(0x10000, 1 << 16, np.zeros(16, np.uint8), label="arena")


def _stream(sanitizer: Sanitizer) -> str:
    name = f"segments{next(_names)}"
    sanitizer.add_stream(name)
    return name


def _task(sanitizer: Sanitizer, stream: str, what: str, regions: list[tuple[Allocation, int, int, bool]],
          padding: list[tuple[Allocation, int, int]] | None = None) -> None:
    sanitizer.access_all(regions, actor=stream, clock=sanitizer.enqueue(stream), what=what, padding=padding or [])


def test_padding_rewritten_in_two_pieces_is_real_data_again(arena: Allocation) -> None:
    sanitizer = Sanitizer()
    stream, base = _stream(sanitizer), arena.start
    _task(sanitizer, stream, "left", [(arena, base, 64, True)], [(arena, base + 64, 32)])
    _task(sanitizer, stream, "piece one", [(arena, base + 64, 16, True)])
    _task(sanitizer, stream, "piece two", [(arena, base + 80, 16, True)])
    _task(sanitizer, stream, "reader", [(arena, base + 64, 32, False)])  # every byte rewritten: no garbage


def test_padding_rewritten_in_part_is_still_garbage_where_it_was_not(arena: Allocation) -> None:
    sanitizer = Sanitizer()
    stream, base = _stream(sanitizer), arena.start
    _task(sanitizer, stream, "left", [(arena, base, 64, True)], [(arena, base + 64, 32)])
    _task(sanitizer, stream, "piece one", [(arena, base + 64, 16, True)])
    with pytest.raises(HazardError, match="that left on .* may have overwritten") as caught:
        _task(sanitizer, stream, "reader", [(arena, base + 64, 32, False)])
    assert "padding write" in caught.value.first and "reader" in caught.value.second


def test_each_of_many_live_ranges_is_checked_against_its_own_history(arena: Allocation) -> None:
    sanitizer = Sanitizer()
    writer, reader = _stream(sanitizer), _stream(sanitizer)
    for index in range(500):
        _task(sanitizer, writer, f"producer {index}", [(arena, arena.start + 64 * index, 64, True)])
    sanitizer.wait(reader, sanitizer.snapshot(writer))
    for index in range(500):  # ordered after every producer: no hazard
        _task(sanitizer, reader, f"consumer {index}", [(arena, arena.start + 64 * index, 64, False)])
    _task(sanitizer, writer, "late producer", [(arena, arena.start + 64 * 600, 64, True)])
    with pytest.raises(HazardError, match="late producer") as caught:
        _task(sanitizer, reader, "late consumer", [(arena, arena.start + 64 * 600 + 8, 16, False)])
    assert "late producer" in caught.value.first and "late consumer" in caught.value.second
