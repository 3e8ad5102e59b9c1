"""The sanitizer against a brute-force reference that keeps every byte's history in a list.

Random programs (tasks on random streams reading, writing and padding random ranges of two
allocations, host accesses, event waits, synchronizations, retired streams) run through the
sanitizer, whose interval map finds the accesses an access overlaps, and through the rule
applied byte by byte; both must refuse the same accesses with the same message, naming the
same two accesses.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from aclpipe import HazardError
from aclpipe.backends.sim.memory import Allocation
from aclpipe.backends.sim.sanitizer import HOST, Access, Clock, Sanitizer

SIZE = 40
STREAMS = 3
_programs = itertools.count()


class Reference:
    """The sanitizer's rule, byte by byte: each byte's last write and per actor its last read since."""

    def __init__(self, allocations: Sequence[Allocation]) -> None:
        #: per allocation, per byte: its last write and, per actor, its last read since
        self.history: dict[int, list[tuple[Access | None, dict[str, Access]]]] = {
            id(a): [(None, {}) for _ in range(SIZE)] for a in allocations}
        self.retired: set[str] = set()

    def access_all(self, regions: Sequence[tuple[Allocation, int, int, bool]], actor: str, clock: Clock, what: str,
                   padding: Sequence[tuple[Allocation, int, int]] = ()) -> None:
        tick = clock.get(actor, 0)
        accesses = [(a, Access(s, s + n, w, actor, tick, what)) for a, s, n, w in regions if n > 0]
        accesses += [(a, Access(s, s + n, True, actor, tick, what, padding=True))
                     for a, s, n in padding if n > 0]
        for allocation, access in accesses:
            for byte in range(access.start - allocation.start, access.end - allocation.start):
                self._check(allocation, access, clock, *self.history[id(allocation)][byte])
        for allocation, access in accesses:
            for byte in range(access.start - allocation.start, access.end - allocation.start):
                table = self.history[id(allocation)]
                if access.write:
                    table[byte] = (access, {})
                else:
                    table[byte][1][actor] = access

    def _check(self, allocation: Allocation, access: Access, clock: Clock, last_write: Access | None,
               reads: dict[str, Access]) -> None:
        earlier = ([last_write] if last_write else []) + (list(reads.values()) if access.write else [])
        for previous in earlier:
            if previous.actor != access.actor and clock.get(previous.actor, 0) < previous.tick \
                    and previous.actor not in self.retired:
                raise HazardError(
                    f"data race on {allocation.describe()}: {access.describe()} is not ordered after "
                    f"{previous.describe()}; add an event wait between the streams or synchronize first",
                    first=previous.describe(), second=access.describe())
        if not access.write and last_write is not None and last_write.padding:
            lo, hi = max(last_write.start, access.start), min(last_write.end, access.end)
            raise HazardError(
                f"{access.describe()} reads bytes [{lo:#x}, {hi:#x}) of {allocation.describe()} that "
                f"{last_write.what} on {last_write.actor} may have overwritten: kernels touch up to "
                "ALIGN_UP(len, 32) + 32 bytes of each output (CANN 11-01, aclrtMalloc), so pieces carved from one "
                "allocation need that padding", first=last_write.describe(), second=access.describe())


def _verdict(call: Callable[[], None]) -> tuple[str, str, str] | None:
    try:
        call()
    except HazardError as error:
        return str(error), error.first, error.second
    return None


ranges = st.tuples(st.integers(0, 1), st.integers(0, SIZE - 1), st.integers(1, 12))
tasks = st.tuples(st.just("task"), st.integers(0, STREAMS - 1),
                  st.lists(st.tuples(ranges, st.booleans()), min_size=1, max_size=3),
                  st.lists(ranges, max_size=1))
steps = st.one_of(
    tasks, tasks, tasks,
    st.tuples(st.just("host"), ranges, st.booleans()),
    st.tuples(st.just("wait"), st.integers(0, STREAMS - 1), st.integers(0, STREAMS - 1)),
    st.tuples(st.just("sync"), st.integers(0, STREAMS - 1)),
    st.tuples(st.just("retire"), st.integers(0, STREAMS - 1)),
)


def _allocations() -> list[Allocation]:
    return [Allocation(0x1000 * (k + 1), SIZE, np.zeros(SIZE, np.uint8), label=f"a{k}") for k in range(2)]


def _clip(allocations: list[Allocation], spec: tuple[int, int, int]) -> tuple[Allocation, int, int]:
    which, start, length = spec
    return allocations[which], allocations[which].start + start, min(length, SIZE - start)


@settings(max_examples=300, deadline=None)
@given(st.lists(steps, max_size=30))
def test_refuses_what_the_byte_by_byte_rule_refuses(program: list[tuple[Any, ...]]) -> None:
    """Clocks made the way the simulator makes them: enqueues, event waits, host syncs."""
    sanitizer, allocations = Sanitizer(), _allocations()
    reference = Reference(allocations)
    names = [f"property{next(_programs)}" for _ in range(STREAMS)]
    for name in names:
        sanitizer.add_stream(name)
    for step in program:
        kind, live = step[0], [name for name in names if name not in reference.retired]
        if kind == "task" and names[step[1]] in live:
            stream = names[step[1]]
            regions = [(*_clip(allocations, spec), write) for spec, write in step[2]]
            padding = [_clip(allocations, spec) for spec in step[3]]
            clock = sanitizer.enqueue(stream)
            seen = _verdict(partial(sanitizer.access_all, regions, actor=stream, clock=clock, what="task",
                                    padding=padding))
            assert seen == _verdict(partial(reference.access_all, regions, stream, clock, "task", padding))
        elif kind == "host":
            allocation, start, nbytes = _clip(allocations, step[1])
            clock = sanitizer.host_tick()
            seen = _verdict(partial(sanitizer.access, allocation, start, nbytes, write=step[2], actor=HOST,
                                    clock=clock, what="host"))
            assert seen == _verdict(partial(reference.access_all, [(allocation, start, nbytes, step[2])], HOST, clock,
                                            "host"))
        elif kind == "wait" and names[step[1]] in live and names[step[2]] in live:
            sanitizer.wait(names[step[2]], sanitizer.snapshot(names[step[1]]))
        elif kind == "sync" and names[step[1]] in live:
            sanitizer.host_learns(sanitizer.snapshot(names[step[1]]))
        elif kind == "retire" and names[step[1]] in live:
            sanitizer.retire(names[step[1]])
            reference.retired.add(names[step[1]])


clocks = st.dictionaries(st.sampled_from(["x0", "x1", "x2", HOST]), st.integers(0, 6), max_size=4)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["x0", "x1", "x2", HOST]), clocks,
                          st.lists(st.tuples(ranges, st.booleans()), min_size=1, max_size=3),
                          st.lists(ranges, max_size=1)), max_size=30))
def test_refuses_what_the_rule_refuses_under_arbitrary_clocks(program: list[tuple[Any, ...]]) -> None:
    """Clocks drawn at random, consistent or not: the verdict is the rule's, whatever the clocks."""
    sanitizer, allocations = Sanitizer(), _allocations()
    reference = Reference(allocations)
    for actor, clock, region_specs, padding_specs in program:
        regions = [(*_clip(allocations, spec), write) for spec, write in region_specs]
        padding = [_clip(allocations, spec) for spec in padding_specs]
        seen = _verdict(partial(sanitizer.access_all, regions, actor=actor, clock=clock, what="task", padding=padding))
        assert seen == _verdict(partial(reference.access_all, regions, actor, clock, "task", padding))
