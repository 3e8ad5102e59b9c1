"""Streams are a budget of the device (pipeline.budget): a capture's model streams are booked
in it, idle programs (of any pipeline on the device) are freed for them, and when nothing idle
is left a program runs uncaptured instead of failing.  No run ever fails for lack of streams
while an idle program holds some or an uncaptured run is possible (issue 29)."""

from __future__ import annotations

import warnings

import anyio
import numpy as np
import pytest
from pipeline_graphs import assert_outputs, live_device_state, mlp, reference

import aclpipe
from aclpipe.pipeline.budget import StreamBudget, StreamBudgetWarning

pytestmark = pytest.mark.anyio


def _x(rows: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed + rows).standard_normal((rows, 32)).astype(np.float32)


async def _check(pipe: aclpipe.Pipeline, rows: int, seed: int = 0) -> None:
    x = _x(rows, seed)
    assert_outputs(await pipe.run(x=x), reference(pipe.graph, {"x": x}))


async def test_a_pipeline_books_its_streams_and_its_captures_and_gives_them_back():
    with aclpipe.open_device("sim") as device:
        budget = StreamBudget.of(device)
        async with aclpipe.Pipeline(mlp(), device, streams=2, depth=2) as pipe:
            own = 2 + 2 + 2  # compute, one replay stream per slot, H2D and D2H
            assert budget.held == own and pipe.stats().streams == own
            await _check(pipe, 4)
            stats = pipe.stats()
            assert stats.captured == 1 and stats.streams > own and budget.held == stats.streams
            assert stats.device_streams == {"held": budget.held, "in_use": budget.in_use,
                                            "limit": device.capabilities.max_streams}
            assert stats.events == sum(entry.program.event_count for entry in pipe._res.cache)
        assert budget.held == 0


async def test_idle_programs_are_freed_for_a_new_capture_least_recently_used_first():
    with aclpipe.open_device("sim", max_streams=30) as device:
        async with aclpipe.Pipeline(mlp(), device, streams=1, depth=2, max_programs=100) as pipe:
            for rows in range(1, 8):  # each captured program holds 8 model streams: 3 fit beside 5 own
                await _check(pipe, rows)
            stats = pipe.stats()
            assert stats.starved == 0 and stats.evicted >= 4 and stats.captured == stats.signatures
            assert stats.streams <= 30
            held = {entry.key.shapes[0][1][0] for entry in pipe._res.cache}
            assert held == {5, 6, 7}  # the most recently used
            for rows in range(1, 8):  # and every size still runs right
                await _check(pipe, rows, seed=1)


async def test_with_nothing_idle_a_program_runs_uncaptured_and_says_so_once():
    with aclpipe.open_device("sim", max_streams=16) as device:
        async with aclpipe.Pipeline(mlp(), device, streams=1, depth=2, max_programs=100) as pipe:
            first = pipe._entry_for(pipe._res.preparer.signature({"x": (2, 32)}))
            pipe._res.cache.pin(first)  # a run of it in flight: it may not be freed
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                for rows in (3, 4):
                    await _check(pipe, rows)
            assert [w.category for w in caught] == [StreamBudgetWarning]  # once per pipeline
            assert "runs uncaptured" in str(caught[0].message) and "x=(3, 32)" in str(caught[0].message)
            pipe._res.cache.unpin(first)
            stats = pipe.stats()
            assert stats.starved == 2 and stats.captured == 1
            await _check(pipe, 2)


async def test_pipelines_on_one_device_share_its_budget_and_free_each_others_idle_programs():
    # 43: the pipelines' 10 own streams, the device's transfer stream (constants are uploaded
    # on it) and 4 programs of 8 model streams each.
    with aclpipe.open_device("sim", max_streams=43) as device:
        budget = StreamBudget.of(device)
        async with aclpipe.Pipeline(mlp(), device, streams=1, depth=2, max_programs=100) as first, \
                aclpipe.Pipeline(mlp(seed=1), device, streams=1, depth=2, max_programs=100) as second:
            for rows in range(1, 5):  # fills the device
                await _check(first, rows)
            assert budget.held == 42 and budget.in_use == 43 and first.stats().captured == 4
            for rows in range(1, 4):  # the second needs room: the first's idle programs go
                await _check(second, rows)
            assert second.stats().captured == 3 and second.stats().starved == 0
            assert first.stats().captured == 1 and first.stats().evicted == 3 and budget.in_use == 43
            for rows in range(1, 6):
                await _check(first, rows, seed=2)
                await _check(second, rows, seed=2)
        assert budget.held == 0


async def test_a_pipeline_made_on_a_full_device_runs_uncaptured():
    """No room for the replay streams: programs run from launch tables, never capture."""
    with aclpipe.open_device("sim", max_streams=14) as device:  # and the device's transfer stream
        async with aclpipe.Pipeline(mlp(), device, streams=4, depth=4) as first:  # 6 own, 4 replay streams
            with pytest.warns(StreamBudgetWarning, match="runs uncaptured"):
                await _check(first, 4)  # its capture does not fit: it runs uncaptured
            assert first.stats().streams == 10 and first.stats().starved == 1
            async with aclpipe.Pipeline(mlp(), device, streams=1, depth=2) as second:  # 3 own fit; replays do not
                assert len(second._res.streams) == 3 and not second._res.preparer.replay_lanes
                for rows in (1, 2):
                    await _check(second, rows)
                assert second.stats().captured == 0


async def test_filling_the_budget_with_pipelines_and_programs_every_run_completes_right():
    """Many pipelines, shapes and runs in flight on a device of few streams: every result right,
    no 207008, and everything given back."""
    with aclpipe.open_device("sim", max_streams=64) as device:
        before = live_device_state(device)
        pipes = [aclpipe.Pipeline(mlp(seed=k), device, streams=2, depth=3, max_programs=50) for k in range(4)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", StreamBudgetWarning)

            async def serve(pipe: aclpipe.Pipeline, offset: int) -> None:
                batches = [{"x": _x(1 + (offset + k) % 9, k)} for k in range(30)]
                outs = [out async for out in pipe.stream(batches)]
                for batch, out in zip(batches, outs, strict=True):
                    assert_outputs(out, reference(pipe.graph, batch))

            async with anyio.create_task_group() as group:
                for offset, pipe in enumerate(pipes):
                    group.start_soon(serve, pipe, offset)
        stats = [pipe.stats() for pipe in pipes]
        assert sum(s.streams for s in stats) == StreamBudget.of(device).held <= 64
        assert sum(s.evicted + s.starved for s in stats) > 0  # the budget was really in play
        for pipe in pipes:
            await pipe.aclose()
        assert StreamBudget.of(device).held == 0 and live_device_state(device) == before


async def test_replicas_keep_to_each_devices_budget():
    devices = [aclpipe.open_device(f"sim:{k}", max_streams=24) for k in range(2)]
    try:
        async with aclpipe.Pipeline(mlp(), devices, streams=1, depth=2, max_programs=100) as pipe:
            for rows in range(1, 9):
                await _check(pipe, rows)
        assert all(StreamBudget.of(device).held == 0 for device in devices)
    finally:
        for device in devices:
            device.close()


class _Holder:
    """A pipeline as the budget sees it: idle captured programs by last use, each holding streams."""

    def __init__(self, budget: StreamBudget, programs: dict[str, tuple[int, int]], busy: bool = False):
        self.budget, self.programs, self.busy, self.freed = budget, dict(programs), busy, []

    def oldest_idle_capture(self) -> int | None:
        return min((used for used, _ in self.programs.values()), default=None)

    def evict_oldest_capture(self) -> bool:
        if self.busy or not self.programs:
            return False
        name = min(self.programs, key=lambda key: self.programs[key][0])
        self.freed.append(name)
        self.budget.release(self.programs.pop(name)[1])
        return True


def test_the_budget_frees_the_least_recently_used_idle_capture_on_the_device_first():
    budget = StreamBudget(20)
    budget.book(16)
    first = _Holder(budget, {"a": (5, 4), "b": (1, 4)})
    second = _Holder(budget, {"c": (3, 4), "d": (9, 4)})
    budget.register(first)
    budget.register(second)
    assert budget.reserve(4) and budget.held == 20 and not first.freed  # it fit
    assert budget.reserve(8)  # b (used at 1), then c (used at 3)
    assert (first.freed, second.freed) == (["b"], ["c"]) and budget.held == 20
    second.busy = True  # in use by another thread: its programs are its own
    assert budget.reserve(4) and first.freed == ["b", "a"]
    assert not budget.reserve(4)  # d is busy, nothing else holds streams
    assert budget.held == 20


def test_the_budget_counts_streams_made_outside_pipelines_where_the_backend_says():
    live = [0]
    budget = StreamBudget(10, lambda: live[0])
    budget.book(4)
    live[0] = 7  # three streams nobody booked
    assert budget.in_use == 7 and budget.left == 3
    assert not budget.reserve(4) and budget.reserve(3)


async def test_a_new_pipeline_frees_idle_captures_of_others_for_its_own_streams():
    with aclpipe.open_device("sim", max_streams=24) as device:  # the transfer stream, 5 + 2 x 8, then 1 left
        async with aclpipe.Pipeline(mlp(), device, streams=1, depth=2, max_programs=100) as first:
            for rows in (1, 2):
                await _check(first, rows)
            assert StreamBudget.of(device).in_use == 22 and first.stats().captured == 2
            async with aclpipe.Pipeline(mlp(), device, streams=1, depth=2) as second:  # 3 own + 2 replay
                assert first.stats().captured == 1 and first.stats().evicted == 1
                await _check(second, 3)
                await _check(first, 1, seed=5)


async def test_a_stage_pipeline_books_its_streams_and_makes_room_for_them():
    devices = [aclpipe.open_device(f"sim:{k}", max_streams=24) for k in range(2)]
    try:
        async with aclpipe.Pipeline(mlp(), devices[0], streams=1, depth=2, max_programs=100) as first:
            for rows in (1, 2):  # device 0: the transfer stream, 5 own, 2 x 8 model streams: 22 of 24
                await _check(first, rows)
            async with aclpipe.Pipeline(mlp(), devices, streams=1, split="stages") as stages:  # 3 per device
                assert first.stats().evicted == 1  # an idle capture made room on device 0
                assert StreamBudget.of(devices[1]).held == 3
                await _check(stages, 4)
            assert StreamBudget.of(devices[1]).held == 0
    finally:
        for device in devices:
            device.close()


def test_optional_streams_the_device_refuses_part_way_leave_the_budget_as_it_was():
    """Streams made outside any pipeline on a backend that cannot count them: the budget thinks
    there is room, the device refuses part way; nothing is made and nothing stays booked."""
    from aclpipe.pipeline.budget import make_streams

    with aclpipe.open_device("sim", max_streams=6) as device:
        budget = StreamBudget.of(device)
        budget._live = None  # as a backend without a stream count
        outside = [device.create_stream() for _ in range(4)]
        assert make_streams(device, 3, optional=True) == [] and budget.held == 0
        with pytest.raises(aclpipe.BackendError) as refused:
            make_streams(device, 3)
        assert refused.value.code == 207008 and budget.held == 0
        for stream in outside:
            stream.close()
