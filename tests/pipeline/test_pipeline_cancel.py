"""Cancellation and timeouts at random points while the device is held: nothing is lost or raced.

A hang fault holds the device at a random node so that cancels land while runs wait for a
slot, for the enqueue lock, for a workspace or for completion; then the hang is released.
Afterwards every slot is back, no workspace is outstanding, the sanitizer never fired (a
hazard would raise out of a run), results that did come back are right, and the pipeline
still works.
"""

from __future__ import annotations

import random
from contextlib import aclosing
from functools import partial

import anyio
import numpy as np
import pytest
from pipeline_graphs import (
    NODE_NAMES,
    assert_outputs,
    live_device_state,
    mixed40,
    reference,
)

from aclpipe import Pipeline
from aclpipe.graph import Graph

pytestmark = pytest.mark.anyio

ROUNDS = 8
RUNS_PER_ROUND = 8


def batch(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((8, 16)).astype(np.float32)


async def cancelled_somewhere(pipe: Pipeline, graph: Graph, how: str, delay: float, seed: int,
                              tally: dict[str, int]) -> None:
    """One run (or a short stream) cut off after ``delay`` by ``how``; results that arrive are checked."""
    x = batch(seed)
    if how == "move_on_after":
        with anyio.move_on_after(delay):
            assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
            tally["completed"] += 1
    elif how == "fail_after":
        try:
            with anyio.fail_after(delay):
                assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
                tally["completed"] += 1
        except TimeoutError:
            pass
    elif how == "cancel":
        async with anyio.create_task_group() as group:
            scope = anyio.CancelScope()

            async def cancel_later() -> None:
                await anyio.sleep(delay)
                scope.cancel()

            group.start_soon(cancel_later)
            with scope:
                assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
                tally["completed"] += 1
            group.cancel_scope.cancel()
    else:  # a stream cut off part way
        batches = [{"x": batch(seed + k)} for k in range(3)]
        with anyio.move_on_after(delay):
            async with aclosing(pipe.stream(batches)) as results:
                index = 0
                async for out in results:
                    assert_outputs(out, reference(graph, batches[index]))
                    index += 1
                    tally["completed"] += 1


@pytest.mark.parametrize(("streams", "depth", "workspace"), [
    (1, 1, "static"), (4, 3, "pool"), (2, 2, "per-call"),
])
async def test_cancellation_at_random_points_leaves_a_working_pipeline(device, streams, depth, workspace):
    graph = mixed40()
    rng = random.Random(f"{streams}-{depth}-{workspace}")
    baseline = live_device_state(device)
    tally = {"completed": 0}
    # A small pool, so that runs also wait (and get cancelled) for workspace blocks.
    async with Pipeline(graph, device, streams=streams, depth=depth, workspace=workspace, pool_bytes=1024) as pipe:
        for round_index in range(ROUNDS):
            hold = rng.random() < 0.7
            if hold:
                device.inject_fault("kernel", match=rng.choice(NODE_NAMES), hang=True)
            with anyio.fail_after(60):
                async with anyio.create_task_group() as group:
                    for k in range(RUNS_PER_ROUND):
                        how = rng.choice(["move_on_after", "fail_after", "cancel", "stream"])
                        # A run takes ~10 ms here: cut some off at once, some mid-way, some late.
                        delay = rng.choice([rng.uniform(0, 0.002), rng.uniform(0, 0.03), rng.uniform(0, 0.15)])
                        group.start_soon(cancelled_somewhere, pipe, graph, how, delay, round_index * 100 + k * 5,
                                         tally)
                    if hold:
                        await anyio.sleep(rng.uniform(0, 0.03))
                        device.release_hangs()
            stats = pipe.stats()
            assert stats.in_flight == 0 and stats.lost_slots == 0
            assert stats.workspace.get("outstanding", 0) == 0
        # Both outcomes happened, and some runs were cancelled after they were enqueued.
        assert 0 < tally["completed"] < pipe.stats().runs
        for seed in range(3):
            x = batch(10_000 + seed)
            assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
        assert pipe.stats().in_flight == 0
    assert live_device_state(device) == baseline


async def test_a_run_cancelled_before_it_gets_a_slot_leaves_no_trace(device):
    graph = mixed40()
    async with Pipeline(graph, device, streams=2, depth=1) as pipe:
        device.inject_fault("kernel", match="n05", hang=True)
        async with anyio.create_task_group() as group:
            group.start_soon(partial(pipe.run, x=batch(0)))  # holds the only slot
            await anyio.sleep(0.01)
            with anyio.move_on_after(0.01) as scope:
                await pipe.run(x=batch(1))  # waits for the slot, then is cancelled
            assert scope.cancelled_caught
            runs = pipe.stats().runs
            device.release_hangs()
        assert runs == 1 and pipe.stats().in_flight == 0
        x = batch(2)
        assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))


async def test_a_run_cancelled_in_flight_returns_its_slot_once_the_device_passed_it(device):
    graph = mixed40()
    async with Pipeline(graph, device, streams=2, depth=1) as pipe:
        device.inject_fault("kernel", match="n20", hang=True)
        async with anyio.create_task_group() as group:
            async def cut_off() -> None:
                with anyio.move_on_after(0.02):
                    await pipe.run(x=batch(0))

            group.start_soon(cut_off)
            await anyio.sleep(0.05)
            assert pipe.stats().in_flight == 1  # the cancelled run waits, shielded, for the device
            device.release_hangs()
        assert pipe.stats().in_flight == 0
        x = batch(1)
        assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))


async def test_a_slot_the_device_does_not_pass_within_the_grace_is_never_reused(device):
    graph = mixed40()
    baseline = live_device_state(device)
    async with Pipeline(graph, device, streams=2, depth=2, cancel_grace=0.02) as pipe:
        device.inject_fault("kernel", match="n30", hang=True)
        with anyio.move_on_after(0.01):
            await pipe.run(x=batch(0))
        stats = pipe.stats()
        assert stats.lost_slots == 1 and stats.in_flight == 0
        device.release_hangs()
        for seed in range(3):  # the other slot carries on
            x = batch(seed + 1)
            assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
    assert live_device_state(device) == baseline  # the lost slot is freed once the device drained
