"""Lifecycle under faults: dropped pipelines, closed devices, cancelled aclose, stats after close, fds.

A hang fault holds a run on the device.  Whatever the Python objects do meanwhile (the pipeline
dropped without ``aclose``, ``aclose`` cancelled, the device closed), nothing the device may
still touch is freed before it passes it (the sanitizer would raise on an early free), no
finalizer waits for the device, and every caller gets a result or an error instead of waiting
for ever.
"""

from __future__ import annotations

import gc
import os
import threading

import anyio
import numpy as np
import pytest
from pipeline_graphs import assert_outputs, mlp, reference

import aclpipe
from aclpipe import ClosedResourceError, Pipeline
from aclpipe.runtime.completion import lanes

wait_all_tasks_blocked = anyio.wait_all_tasks_blocked

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


def batch(rows: int = 4, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, 32)).astype(np.float32)


@pytest.fixture
def thread_errors(monkeypatch: pytest.MonkeyPatch) -> list[BaseException]:
    """Exceptions raised on other threads (a watcher freeing too early would raise HazardError)."""
    seen: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(args.exc_value))
    return seen


def destroyed_streams(device: aclpipe.Device, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Record every stream the backend destroys from now on."""
    calls: list[object] = []
    real = device.backend.stream_destroy

    def recording(stream: object) -> None:
        calls.append(stream)
        real(stream)

    monkeypatch.setattr(device.backend, "stream_destroy", recording)
    return calls


async def until(condition, what: str) -> None:
    """Wait for a condition another thread brings about (bounded, so a bug fails instead of hanging)."""
    with anyio.fail_after(60):
        while not condition():  # noqa: ASYNC110 - a watcher thread changes it: there is nothing to await
            await anyio.sleep(0.01)


async def hang_one_run(pipe: Pipeline, device: aclpipe.Device) -> None:
    """Leave one run on the device, held at its relu, with its caller gone (its slot lost)."""
    device.inject_fault("kernel", match="relu", hang=True)
    async with anyio.create_task_group() as group:
        group.start_soon(lambda: pipe.run(x=batch()))
        await wait_all_tasks_blocked()
        group.cancel_scope.cancel()
    assert pipe.stats().lost_slots == 1


async def test_a_dropped_pipeline_frees_nothing_until_the_device_passed_its_hung_run(
        device, monkeypatch, thread_errors, anyio_backend):
    pipe = Pipeline(mlp(), device, cancel_grace=0.05)
    assert_outputs(await pipe.run(x=batch()), reference(mlp(), {"x": batch()}))
    await hang_one_run(pipe, device)
    destroyed = destroyed_streams(device, monkeypatch)
    used = device.mem_info().used
    state = pipe._res.timeline._state
    del pipe
    gc.collect()
    # The finalizer handed everything over without waiting: no stream destroyed (that would join the
    # hung worker), nothing freed, the completion state parked.
    assert destroyed == [] and device.mem_info().used == used and used > 0
    assert state in lanes._PARKED and not state.released
    device.release_hangs()
    await until(state.freed.is_set, "the parked pipeline to be freed")
    own = [stream for stream in destroyed if not stream.name.startswith("ri")]  # not the captured models' own
    assert len(own) == 8  # 4 compute + 2 replay (one per slot) + H2D + D2H, once the device passed them
    assert device.mem_info().used == 0
    assert thread_errors == []


async def test_a_dropped_pipeline_keeps_its_wake_pipe_open_until_the_device_passed(device, thread_errors):
    pipe = Pipeline(mlp(), device, cancel_grace=0.05)
    await pipe.run(x=batch())
    await hang_one_run(pipe, device)
    state = pipe._res.timeline._state
    read_fd, write_fd = state.read_fd, state.write_fd
    del pipe
    gc.collect()
    os.fstat(read_fd), os.fstat(write_fd)  # still ours: the hung host function will write into it
    assert not state.released
    device.release_hangs()
    await until(state.freed.is_set, "the lane state to be freed")
    assert state.read_fd == state.write_fd == -1
    assert thread_errors == []


async def test_closing_the_device_fails_every_waiting_caller_promptly(device, anyio_backend):
    pipe = Pipeline(mlp(), device, depth=2)
    await pipe.run(x=batch())
    device.inject_fault("kernel", match="relu", hang=True, times=None)
    outcomes: list[str] = []

    async def one(seed: int) -> None:
        try:
            await pipe.run(x=batch(seed=seed))
            outcomes.append("result")
        except ClosedResourceError:
            outcomes.append("closed")

    with anyio.fail_after(60):  # nobody may wait for ever
        async with anyio.create_task_group() as group:
            for seed in range(40):
                group.start_soon(one, seed)
            await wait_all_tasks_blocked()  # 2 runs hung on the device, 38 waiting for a slot
            device.close()
    assert len(outcomes) == 40 and outcomes.count("closed") >= 38
    with pytest.raises(ClosedResourceError, match="closed"):
        await pipe.run(x=batch())
    await pipe.aclose()  # nothing left to wait for
    assert pipe.stats().closed


async def test_closing_the_device_from_another_thread_wakes_the_loop(device, anyio_backend):
    pipe = Pipeline(mlp(), device, depth=1)
    await pipe.run(x=batch())
    device.inject_fault("kernel", match="relu", hang=True, times=None)
    outcomes: list[str] = []

    async def one() -> None:
        try:
            await pipe.run(x=batch())
            outcomes.append("result")
        except ClosedResourceError:
            outcomes.append("closed")

    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            for _ in range(5):
                group.start_soon(one)
            await wait_all_tasks_blocked()
            await anyio.to_thread.run_sync(device.close)
    assert len(outcomes) == 5 and "closed" in outcomes
    await pipe.aclose()


async def test_aclose_on_a_hung_device_honours_cancellation(device, thread_errors, anyio_backend):
    pipe = Pipeline(mlp(), device, cancel_grace=0.05)
    await pipe.run(x=batch())
    device.inject_fault("kernel", match="relu", hang=True)
    state = pipe._res.timeline._state
    with anyio.fail_after(60):  # without cancellation aclose would wait for the hang for ever
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: pipe.run(x=batch()))
            await wait_all_tasks_blocked()
            with anyio.CancelScope() as scope:
                group.start_soon(lambda: cancel_when_blocked(scope))
                await pipe.aclose()
            assert scope.cancelled_caught
            group.cancel_scope.cancel()
    with pytest.raises(ClosedResourceError):
        await pipe.run(x=batch())
    stats = pipe.stats()  # works after a cancelled aclose
    assert stats.closed and stats.runs == 2
    await pipe.aclose()  # idempotent: returns at once
    assert state in lanes._PARKED and not state.released  # handed over, not freed under the device
    device.release_hangs()
    await until(state.freed.is_set, "the parked pipeline to be freed")
    assert device.mem_info().used == 0
    assert thread_errors == []


async def cancel_when_blocked(scope: anyio.CancelScope) -> None:
    await wait_all_tasks_blocked()
    scope.cancel()


async def test_move_on_after_bounds_aclose_of_a_hung_pipeline(device):
    pipe = Pipeline(mlp(), device, cancel_grace=0.05)
    await pipe.run(x=batch())
    await hang_one_run(pipe, device)
    with anyio.move_on_after(0.2) as scope:
        await pipe.aclose()
    assert scope.cancelled_caught  # returned when told to, with the run still on the device
    device.release_hangs()


@pytest.mark.parametrize("workspace", ["pool", "static", "cached", "per-call"])
@pytest.mark.parametrize("owned", [False, True])
async def test_stats_work_after_aclose(device, workspace, owned):
    pipe = Pipeline(mlp(), None if owned else device, workspace=workspace)
    for rows in (2, 3, 2):
        await pipe.run(x=batch(rows))
    await pipe.aclose()
    stats = pipe.stats()
    assert stats.closed and stats.runs == 3 and stats.prepared == 2 and stats.prepare_hits == 1
    assert stats.signatures == stats.executors == stats.arena_bytes == stats.constant_bytes == 0
    assert stats.workspace["in_use"] == 0 and stats.in_flight == 0


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors through /proc")
async def test_pipelines_never_closed_leak_no_descriptors_or_memory(device):
    gc.collect()
    before = open_fds()
    states = []
    for rows in range(1, 21):
        pipe = Pipeline(mlp(), device)
        await pipe.run(x=batch(rows))
        states.append(pipe._res.timeline._state)
        del pipe
    gc.collect()
    # A run's result can arrive while its host function is still returning (it wakes the loop, then
    # marks its last touch): such a state is released by its watcher a moment later, never sooner.
    await until(lambda: all(state.freed.is_set() for state in states), "every completion state to be freed")
    assert open_fds() == before
    assert device.mem_info().used == 0


async def test_a_pipeline_that_owns_its_device_closes_it_when_dropped():
    pipe = Pipeline(mlp(), "sim")
    await pipe.run(x=batch())
    device = pipe.device
    del pipe
    gc.collect()
    await until(lambda: device.closed, "the dropped pipeline's own device to be closed")


async def test_results_in_flight_when_aclose_starts_are_still_delivered(device, anyio_backend):
    pipe = Pipeline(mlp(), device, depth=3)
    results: list[dict[str, np.ndarray]] = []

    async def one(seed: int) -> None:
        results.append(await pipe.run(x=batch(seed=seed)))

    async with anyio.create_task_group() as group:
        for seed in range(3):
            group.start_soon(one, seed)
        await wait_all_tasks_blocked()
        await pipe.aclose()
    assert len(results) == 3 and device.mem_info().used == 0
