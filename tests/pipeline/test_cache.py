"""The program cache: at most max_programs idle programs, least recently used evicted, never one in flight."""

from __future__ import annotations

import anyio
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pipeline_graphs import assert_outputs, live_device_state, mlp, reference

import aclpipe
from aclpipe import Pipeline
from aclpipe.pipeline import LruDict

pytestmark = pytest.mark.anyio


def batch(rows: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed + rows).standard_normal((rows, 32)).astype(np.float32)


async def test_many_batch_sizes_keep_at_most_max_programs(device):
    graph = mlp()
    async with Pipeline(graph, device, max_programs=4) as pipe:
        for rows in range(1, 5):
            await pipe.run(x=batch(rows))
        held_after_four = len(live_device_state(device)[1]), len(live_device_state(device)[2])
        for rows in range(5, 41):
            x = batch(rows)
            assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
        stats = pipe.stats()
        assert stats.signatures == 4 and stats.prepared == 40 and stats.evicted == 36
        assert stats.executors == 4 * 2 * 4  # 4 programs x 2 slots x 4 compute nodes
        # The same number of device allocations and pinned buffers as with four programs.
        assert (len(live_device_state(device)[1]), len(live_device_state(device)[2])) == held_after_four
    assert device.mem_info().used == 0


async def test_the_least_recently_used_program_goes_first(device):
    async with Pipeline(mlp(), device, max_programs=2) as pipe:
        for rows in (1, 2, 1, 3):  # 1 was used after 2: 2 is the one evicted for 3
            await pipe.run(x=batch(rows))
        assert pipe.stats().evicted == 1
        hits = pipe.stats().prepare_hits
        await pipe.run(x=batch(1))
        assert pipe.stats().prepare_hits == hits + 1 and pipe.stats().prepared == 3
        await pipe.run(x=batch(2))
        assert pipe.stats().prepared == 4  # 2 had been evicted: prepared again


async def test_a_program_with_a_run_in_flight_is_never_evicted(device, anyio_backend):
    graph = mlp()
    async with Pipeline(graph, device, max_programs=1, depth=2) as pipe:
        held = pipe.stream([{"x": batch(7, seed)} for seed in range(3)])
        first = await held.__anext__()  # the second batch is in flight: its slot is not back
        for rows in (1, 2, 3):  # each new signature would evict the stream's program
            x = batch(rows)
            assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
            # The stream's program stays (its slot is not back); the new ones come and go.
            assert next(entry.key for entry in pipe._res.cache).shapes == (("x", (7, 32)),)
        rest = [out async for out in held]
        for seed, out in enumerate([first, *rest]):
            assert_outputs(out, reference(graph, {"x": batch(7, seed)}))
        await pipe.run(x=batch(4))
        assert pipe.stats().signatures == 1


async def test_prepare_counts_as_use_and_respects_the_bound(device):
    async with Pipeline(mlp(), device, max_programs=2) as pipe:
        for rows in (1, 2, 3, 4):
            pipe.prepare(x=(rows, 32))
        assert pipe.stats().signatures == 2 and pipe.stats().evicted == 2


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "4"])
def test_max_programs_must_be_a_positive_int(device, bad):
    with pytest.raises(ValueError, match="max_programs must be a positive int"):
        Pipeline(mlp(), device, max_programs=bad)


def test_lru_dict_keeps_the_newest():
    cache: LruDict[str, int] = LruDict(2)
    cache["a"], cache["b"] = 1, 2
    assert cache.get("a") == 1  # a is now newer than b
    cache["c"] = 3
    assert cache.get("b") is None and cache.get("a") == 1 and len(cache) == 2


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(1, 9), min_size=1, max_size=14), capacity=st.integers(1, 4),
       concurrent=st.integers(1, 3))
def test_any_sequence_of_sizes_gives_right_results_within_the_bound(sizes, capacity, concurrent):
    graph = mlp()

    async def main() -> None:
        device = aclpipe.open_device("sim", sanitizer=True)
        async with Pipeline(graph, device, max_programs=capacity, depth=2) as pipe:
            for start in range(0, len(sizes), concurrent):
                async with anyio.create_task_group() as group:
                    for rows in sizes[start:start + concurrent]:
                        group.start_soon(check, pipe, rows)
                assert pipe.stats().signatures <= capacity  # nothing in flight between groups
        assert device.mem_info().used == 0
        device.close()

    async def check(pipe: Pipeline, rows: int) -> None:
        x = batch(rows)
        assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))

    anyio.run(main)


def wide(width: int = 1024) -> aclpipe.Graph:
    """Activations large enough that a few programs fill a small device."""
    g = aclpipe.Graph("wide")
    x = g.input("x", shape=(None, width))
    g.output("y", g.relu(g.neg(x)))
    return g


def rows(count: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, 1024)).astype(np.float32)


async def _one_program_bytes() -> int:
    with aclpipe.open_device("sim") as probe:
        async with Pipeline(wide(), probe) as pipe:
            await pipe.run(x=rows(256))
            return probe.mem_info().used


async def test_a_program_that_does_not_fit_beside_idle_ones_evicts_them_first():
    graph = wide()
    with aclpipe.open_device("sim", capacity=int(await _one_program_bytes() * 1.5)) as device:  # one, not two
        async with Pipeline(graph, device) as pipe:
            await pipe.run(x=rows(256))
            for count in (255, 254, 255):  # each a new signature that fits only alone
                x = rows(count, seed=count)
                assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
            stats = pipe.stats()
            assert stats.evicted == 3 and stats.signatures == 1 and stats.prepared == 4
        assert device.mem_info().used == 0


async def test_a_program_that_does_not_fit_beside_busy_ones_is_refused_and_leaks_nothing(anyio_backend):
    graph = wide()
    with aclpipe.open_device("sim", capacity=int(await _one_program_bytes() * 1.5)) as device:
        async with Pipeline(graph, device, depth=2) as pipe:
            held = pipe.stream([{"x": rows(256, seed)} for seed in range(3)])
            first = await held.__anext__()  # the second batch is in flight: that program is busy
            before = live_device_state(device)
            with pytest.raises(aclpipe.DeviceOutOfMemory, match="requested .* bytes"):
                await pipe.run(x=rows(255))
            assert live_device_state(device) == before and pipe.stats().evicted == 0
            rest = [out async for out in held]
            for seed, out in enumerate([first, *rest]):
                assert_outputs(out, reference(graph, {"x": rows(256, seed)}))
            x = rows(255)  # the stream's program is idle now: evicted for this one
            assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
            assert pipe.stats().evicted == 1
