"""Replicas: one graph on several simulated devices behind the Pipeline API.

Dispatch to the least loaded device, results in input order, faulted devices out of
rotation until restored, a clear error when every device is out, cancellation and closing.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import aclosing
from functools import partial

import anyio
import numpy as np
import pytest
from pipeline_graphs import (
    FAILURES,
    assert_outputs,
    assert_stream_fails_in_order,
    live_device_state,
    mixed40,
    reference,
)

import aclpipe
from aclpipe import ClosedResourceError, DevicesUnavailableError, ExecutionError, Pipeline
from aclpipe.pipeline.several.replicas import ReplicaPipeline, ReplicaStats

pytestmark = pytest.mark.anyio


def batch(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((8, 16)).astype(np.float32)


@pytest.fixture
def devices():
    opened = [aclpipe.open_device(f"sim:{index}") for index in range(3)]
    yield opened
    for device in opened:
        device.release_hangs()
        device.close()


@pytest.mark.parametrize("spec", [["sim:0", "sim:1"], "sim:0,1", "sim:0-1"])
async def test_a_device_list_makes_a_replicated_pipeline_with_the_same_api(spec):
    graph = mixed40()
    async with Pipeline(graph, device=spec, depth=2) as pipe:
        assert isinstance(pipe, ReplicaPipeline) and isinstance(pipe, Pipeline)
        assert [d.name for d in pipe.devices] == ["sim:0", "sim:1"]
        x = batch(0)
        assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
        assert pipe.plan_for(x=(8, 16)).num_streams >= 1 and pipe.prepare(x=(8, 16)) is not None
    assert all(d.closed for d in pipe.devices)  # opened by the pipeline, closed by it


async def test_stream_spreads_runs_over_the_devices_and_keeps_input_order(devices):
    graph = mixed40()
    batches = [{"x": batch(seed)} for seed in range(12)]
    async with Pipeline(graph, device=devices[:2], depth=2) as pipe:
        results = [out async for out in pipe.stream(batches)]
        for out, inputs in zip(results, batches):
            assert_outputs(out, reference(graph, inputs))
        stats = pipe.stats()
    assert isinstance(stats, ReplicaStats) and stats.runs == 12 and stats.in_flight == 0
    assert [d.name for d in stats.devices] == ["sim:0", "sim:1"]
    assert all(d.dispatched > 0 and d.pipeline.runs == d.dispatched for d in stats.devices)
    assert sum(d.dispatched for d in stats.devices) == 12
    assert stats.constant_bytes == sum(d.pipeline.constant_bytes for d in stats.devices)
    assert not any(d.closed for d in devices)  # given as Device objects: still the caller's


async def test_runs_go_to_the_device_with_the_least_outstanding_work(devices):
    graph = mixed40()
    async with Pipeline(graph, device=devices[:2], depth=2) as pipe:
        devices[0].inject_fault("kernel", match="n05", hang=True)
        async with anyio.create_task_group() as group:
            group.start_soon(partial(pipe.run, x=batch(0)))  # ties go to sim:0, where it hangs
            await anyio.sleep(0.05)
            for seed in range(1, 4):  # sim:0 still has work outstanding: all go to sim:1
                x = batch(seed)
                assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
            busy = pipe.stats().devices
            devices[0].release_hangs()
    assert [d.dispatched for d in busy] == [1, 3]
    assert busy[0].outstanding_runs == 1 and busy[0].outstanding_work > 0 and busy[1].outstanding_runs == 0


async def test_a_faulting_device_leaves_rotation_until_it_is_restored(devices):
    graph = mixed40()
    async with Pipeline(graph, device=devices[:2], depth=2) as pipe:
        devices[1].inject_fault("kernel", match="n12")
        outcomes = []
        for seed in range(4):  # the second run lands on sim:1 and fails there
            try:
                outcomes.append(await pipe.run(x=batch(seed)))
            except ExecutionError as error:
                outcomes.append(error)
        errors = [o for o in outcomes if isinstance(o, ExecutionError)]
        assert len(errors) == 1
        assert errors[0].device == "sim:1" and errors[0].node == "n12" and "sim:1" in str(errors[0])
        stats = pipe.stats()
        assert [d.in_rotation for d in stats.devices] == [True, False] and "n12" in stats.devices[1].fault
        assert stats.devices[1].dispatched == 1  # the later runs all went to sim:0
        pipe.restore("sim:1")
        for seed in range(10, 14):
            x = batch(seed)
            assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
        assert pipe.stats().devices[1].dispatched > 1


async def test_when_every_device_is_out_runs_raise_a_clear_error(devices):
    graph = mixed40()
    async with Pipeline(graph, device=devices[:2], depth=1) as pipe:
        for device in devices[:2]:
            device.inject_fault("kernel", match="n03")
        for seed in range(2):
            with pytest.raises(ExecutionError, match="out of rotation"):
                await pipe.run(x=batch(seed))
        with pytest.raises(DevicesUnavailableError, match="every device") as info:
            await pipe.run(x=batch(2))
        assert set(info.value.faults) == {"sim:0", "sim:1"}
        with pytest.raises(DevicesUnavailableError):
            async for _ in pipe.stream([{"x": batch(3)}]):
                pass
        pipe.restore(devices[0])
        pipe.restore(1)
        x = batch(4)
        assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
        with pytest.raises(ValueError, match="not a device of this pipeline"):
            pipe.restore("sim:2")


async def test_a_fault_in_a_stream_takes_the_device_out_and_the_stream_goes_on_elsewhere(devices):
    graph = mixed40()
    batches = [{"x": batch(seed)} for seed in range(8)]
    async with Pipeline(graph, device=devices[:2], depth=1) as pipe:
        devices[0].inject_fault("kernel", match="n30")
        got, failed = [], []
        for start in range(0, 8, 2):
            try:
                async for out in pipe.stream(batches[start:start + 2]):
                    got.append(out)
            except ExecutionError as error:
                failed.append(error)
        assert len(failed) == 1 and failed[0].device == "sim:0"
        assert pipe.stats().devices[0].in_rotation is False
        assert pipe.stats().in_flight == 0


async def test_cancelled_runs_and_streams_give_every_slot_back(devices):
    graph = mixed40()
    baselines = [live_device_state(d) for d in devices[:2]]
    async with Pipeline(graph, device=devices[:2], depth=1) as pipe:
        for device in devices[:2]:
            device.inject_fault("kernel", match="n20", hang=True)
        async with anyio.create_task_group() as group:
            for seed in range(4):
                async def cut_off(seed: int = seed) -> None:
                    with anyio.move_on_after(0.2):  # two hang on the devices, two wait for their slots
                        await pipe.run(x=batch(seed))
                group.start_soon(cut_off)
            await anyio.sleep(0.5)
            assert pipe.stats().in_flight == 2  # one per device, waiting shielded for the device
            for device in devices[:2]:
                device.release_hangs()
        async with aclosing(pipe.stream({"x": batch(seed)} for seed in range(6))) as results:
            async for _ in results:
                break
        stats = pipe.stats()
        assert stats.in_flight == 0 and stats.lost_slots == 0
        assert all(d.outstanding_runs == 0 for d in stats.devices)
        x = batch(9)
        assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
    assert [live_device_state(d) for d in devices[:2]] == baselines


async def test_aclose_waits_for_runs_in_flight_and_is_idempotent(devices):
    graph = mixed40()
    pipe = Pipeline(graph, device=devices[:2], depth=2)
    results: list[dict[str, np.ndarray]] = []
    two_done = anyio.Event()

    async def run_one(seed: int) -> None:
        results.append(await pipe.run(x=batch(seed)))
        if len(results) == 2:
            two_done.set()

    devices[1].inject_fault("kernel", match="n10", hang=True)
    async with anyio.create_task_group() as group:
        for seed in range(3):
            group.start_soon(run_one, seed)
        with anyio.fail_after(30):
            await two_done.wait()  # the runs on sim:0 finish; the one on sim:1 is held
        group.start_soon(pipe.aclose)  # waits for the run held on sim:1
        await anyio.sleep(0.05)
        assert len(results) == 2 and pipe.stats().in_flight == 1
        devices[1].release_hangs()
    assert len(results) == 3
    await pipe.aclose()
    with pytest.raises(ClosedResourceError):
        await pipe.run(x=batch(0))


def test_bad_device_lists_and_options_are_refused_before_anything_opens():
    graph = mixed40()
    with pytest.raises(ValueError, match="twice"):
        Pipeline(graph, device="sim:0,0")
    with pytest.raises(ValueError, match="split must be one of"):
        Pipeline(graph, device="sim:0", split="diagonal")
    with pytest.raises(ValueError, match="split='replicas'"):
        ReplicaPipeline(graph, device="sim:0,1", split="stages")
    with pytest.raises(aclpipe.InvalidArgumentError, match="does not exist"):
        Pipeline(graph, device="sim:0,99")


@pytest.mark.parametrize("failure", list(FAILURES))
async def test_stream_delivers_the_runs_ahead_of_a_failing_batch_before_its_error(devices, failure):
    # As Pipeline.stream: the accepted batches' results first, in order, then the error.
    graph = mixed40()
    async with Pipeline(graph, device=devices[:2], depth=2) as pipe:
        await assert_stream_fails_in_order(pipe, graph, [{"x": batch(seed)} for seed in range(3)],
                                           np.ones((8, 15), np.float32), failure)


async def test_max_programs_and_buckets_apply_on_every_device(devices):
    graph = mixed40(batch=None)
    sizes = [{"x": np.random.default_rng(rows).standard_normal((rows, 16)).astype(np.float32)}
             for rows in range(1, 9)]
    async with Pipeline(graph, device=devices[:2], max_programs=2) as pipe:
        for inputs in sizes:
            assert_outputs(await pipe.run(**inputs), reference(graph, inputs))
        stats = pipe.stats()
        assert all(d.pipeline.signatures <= 2 for d in stats.devices)
        assert stats.evicted == stats.prepared - stats.signatures > 0
    async with Pipeline(graph, device=devices[:2], buckets=(4, 8)) as pipe:
        results = [out async for out in pipe.stream(sizes)]
        for out, inputs in zip(results, sizes, strict=True):
            assert_outputs(out, reference(graph, inputs))
        assert all(d.pipeline.signatures <= 2 for d in pipe.stats().devices)
    with pytest.raises(ValueError, match="max_programs must be a positive int"):
        Pipeline(graph, device=devices[:2], max_programs=0)


async def eventually(check: Callable[[], bool]) -> None:
    """Return once ``check()`` holds (polled: what it watches has no event to wait on)."""
    with anyio.fail_after(30):
        while True:
            if check():
                return
            await anyio.sleep(0.01)


async def test_a_closed_device_leaves_rotation_for_good_and_runs_go_to_the_others(devices):
    graph = mixed40()
    async with Pipeline(graph, device=devices[:3], depth=2) as pipe:
        for seed in range(3):
            await pipe.run(x=batch(seed))
        devices[1].close()
        for seed in range(10):
            x = batch(seed)
            assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
        batches = [{"x": batch(seed)} for seed in range(10, 22)]
        for out, inputs in zip([out async for out in pipe.stream(batches)], batches, strict=True):
            assert_outputs(out, reference(graph, inputs))
        stats = pipe.stats()
        assert [d.in_rotation for d in stats.devices] == [True, False, True]
        assert "sim:1 was closed" in (stats.devices[1].fault or "")
        with pytest.raises(ClosedResourceError, match="cannot take runs again"):
            pipe.restore("sim:1")
        assert pipe.prepare(x=(8, 16)) is not None and pipe.plan_for(x=(8, 16)) is not None
        devices[0].close()
        devices[2].close()
        with pytest.raises(DevicesUnavailableError, match="was closed") as info:
            await pipe.run(x=batch(0))
        assert sorted(info.value.faults) == ["sim:0", "sim:1", "sim:2"]


@pytest.mark.parametrize("api", ["run", "stream"])
async def test_a_run_held_on_a_device_that_is_closed_still_gets_its_result(devices, api):
    # The simulator finishes what is queued when it closes; a device that abandons the run
    # instead (its lanes lost) makes the pipeline run it again on another device.
    graph = mixed40()
    async with Pipeline(graph, device=devices[:2], depth=2) as pipe:
        devices[0].inject_fault("kernel", match="n05", hang=True)  # ties go to sim:0, where it is held
        results: list[dict[str, np.ndarray]] = []

        async def run_one() -> None:
            if api == "run":
                results.append(await pipe.run(x=batch(0)))
            else:
                results.extend([out async for out in pipe.stream([{"x": batch(0)}])])

        async with anyio.create_task_group() as group:
            group.start_soon(run_one)
            await eventually(lambda: pipe.stats().devices[0].outstanding_runs == 1)
            devices[0].close()
        assert len(results) == 1
        assert_outputs(results[0], reference(graph, {"x": batch(0)}))
        assert not pipe.stats().devices[0].in_rotation
        x = batch(1)
        assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))


async def test_a_cancelled_aclose_returns_at_once_and_frees_once_the_devices_pass(devices):
    graph = mixed40()
    baselines = [live_device_state(d) for d in devices[:2]]
    pipe = Pipeline(graph, device=devices[:2], depth=2)
    for device in devices[:2]:
        device.inject_fault("kernel", match="n20", hang=True)
    closed: list[BaseException] = []
    watchdog: list[str] = []
    watch = anyio.CancelScope()

    async def run_one(seed: int) -> None:
        with pytest.raises(ClosedResourceError) as info:
            await pipe.run(x=batch(seed))
        closed.append(info.value)

    async def release_if_stuck() -> None:  # only so that a failing aclose cannot hang the test
        with watch:
            await anyio.sleep(20)
            watchdog.append("aclose ignored its cancellation")
            for device in devices[:2]:
                device.release_hangs()

    async with anyio.create_task_group() as group:
        for seed in range(2):  # one held on each device
            group.start_soon(run_one, seed)
        group.start_soon(release_if_stuck)
        await eventually(lambda: all(d.pipeline.in_flight == 1 for d in pipe.stats().devices))
        with anyio.move_on_after(0.2) as scope:
            await pipe.aclose()
        assert scope.cancelled_caught and watchdog == []  # returned while both devices are held
        await pipe.aclose()  # closed already: returns at once
        with pytest.raises(ClosedResourceError):
            await pipe.run(x=batch(2))
        for device in devices[:2]:
            device.release_hangs()
        watch.cancel()
    assert len(closed) == 2  # the held runs' results are not read from parked memory
    # Parked: freed by whichever thread sees each device pass.
    await eventually(lambda: [live_device_state(d) for d in devices[:2]] == baselines)
