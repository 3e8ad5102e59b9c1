"""Stages: one graph cut across several simulated devices, boundaries copied over peer links.

Results match the numpy reference with the sanitizer checking every cross-device access; a
model too big for one device runs on several; every stage stays busy under ``stream()``;
faults, cancellation and closing behave as on one device.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from contextlib import aclosing

import anyio
import anyio.lowlevel
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
from aclpipe import ClosedResourceError, DeviceOutOfMemory, EventLoopError, ExecutionError, Pipeline, PlanError
from aclpipe.backends.sim import ATLAS_A2
from aclpipe.graph import Graph
from aclpipe.pipeline.several.stages import StagePipeline, StageStats

pytestmark = pytest.mark.anyio


def batch(seed: int, rows: int = 8, width: int = 16) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, width)).astype(np.float32)


@pytest.fixture
def devices():
    opened = [aclpipe.open_device(f"sim:{index}") for index in range(4)]
    yield opened
    for device in opened:
        device.release_hangs()
        device.close()


def heavy(layers: int = 4, width: int = 256) -> Graph:
    """``layers`` matmul+tanh layers whose weights take ``width * width * 4`` bytes each."""
    rng = np.random.default_rng(5)
    g = Graph("heavy")
    h = g.input("x", shape=(8, width))
    for layer in range(layers):
        weight = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        h = g.tanh(g.matmul(h, g.constant(f"w{layer}", weight), name=f"mm{layer}"), name=f"act{layer}")
    g.output("y", h)
    return g


@pytest.mark.parametrize("count", [2, 4])
async def test_stages_compute_what_one_device_computes(devices, count):
    graph = mixed40()
    async with Pipeline(graph, device=devices[:count], split="stages") as pipe:
        assert isinstance(pipe, StagePipeline) and pipe.depth == 2 * count
        x = batch(0)
        assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
        batches = [{"x": batch(seed)} for seed in range(1, 9)]
        results = [out async for out in pipe.stream(batches)]
        for out, inputs in zip(results, batches):
            assert_outputs(out, reference(graph, inputs))
        partition, plans = pipe.stages_for(x=(8, 16))
        stats = pipe.stats()
    assert len(partition.stages) == len(plans) == count and partition.boundary_bytes > 0
    assert isinstance(stats, StageStats) and stats.runs == 9 and stats.in_flight == 0
    assert [stage["device"] for stage in stats.stages] == [d.name for d in devices[:count]]
    assert sum(stage["nodes"] for stage in stats.stages) == 40


async def test_a_model_bigger_than_one_device_runs_on_several():
    graph = heavy()  # four 256 KiB weights
    options = {"capacity": 800 * 1024}  # room for two weights and change
    device = aclpipe.open_device("sim:0", **options)
    try:
        with pytest.raises(DeviceOutOfMemory):
            async with Pipeline(graph, device) as single:
                await single.run(x=batch(0, width=256))
    finally:
        device.close()
    async with Pipeline(graph, device="sim:0,1", split="stages", device_options=options) as pipe:
        x = batch(1, width=256)
        expected = x
        for layer in range(4):
            expected = np.tanh(expected @ graph.constants[f"w{layer}"])
        np.testing.assert_allclose((await pipe.run(x=x))["y"], expected, rtol=1e-4, atol=1e-5)
        held = [sum(b.nbytes for b in per_device.values()) for per_device in pipe._constants]
        assert held == [2 * 256 * 256 * 4] * 2  # each device holds only its own stage's weights
        assert all(d.mem_info().used <= 800 * 1024 for d in pipe.devices)


async def test_stream_keeps_every_stage_busy(devices):
    """While stage 1 is held on batch 1, stage 0 goes on with the next batches."""
    graph = mixed40()
    batches = [{"x": batch(seed)} for seed in range(3)]
    async with Pipeline(graph, device=devices[:2], split="stages", depth=3) as pipe:
        partition, _ = pipe.stages_for(x=(8, 16))
        first_of_stage_1 = partition.stages[1].nodes[0]
        devices[1].inject_fault("kernel", match=first_of_stage_1, hang=True)
        devices[0].backend.trace_begin()
        results = []

        async def consume() -> None:
            async for out in pipe.stream(batches):
                results.append(out)

        async with anyio.create_task_group() as group:
            group.start_soon(consume)
            with anyio.fail_after(30):
                while True:  # stage 0 finishes all three batches while stage 1 holds the first
                    await anyio.sleep(0.01)
                    runs = {r.run for r in devices[0].backend.recorder.records() if r.kind == "kernel"}
                    if {1, 2, 3} <= runs:
                        break
            assert results == []
            devices[1].release_hangs()
        devices[0].backend.trace_end()
        for out, inputs in zip(results, batches):
            assert_outputs(out, reference(graph, inputs))


@pytest.mark.parametrize("stage", [0, 1])
async def test_a_fault_in_any_stage_names_the_node_and_later_runs_recover(devices, stage):
    graph = mixed40()
    async with Pipeline(graph, device=devices[:2], split="stages") as pipe:
        partition, _ = pipe.stages_for(x=(8, 16))
        node = partition.stages[stage].nodes[1]
        devices[stage].inject_fault("kernel", match=node)
        with pytest.raises(ExecutionError, match=f"node '{node}'") as info:
            await pipe.run(x=batch(0))
        assert info.value.node == node
        for seed in range(1, 5):
            x = batch(seed)
            assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
        stats = pipe.stats()
        assert stats.failed_runs == 1 and stats.in_flight == 0


async def test_cancelled_runs_and_streams_give_every_slot_back(devices):
    graph = mixed40()
    baselines = [live_device_state(d) for d in devices[:2]]
    async with Pipeline(graph, device=devices[:2], split="stages", depth=2) as pipe:
        partition, _ = pipe.stages_for(x=(8, 16))
        devices[1].inject_fault("kernel", match=partition.stages[1].nodes[-1], hang=True)
        async with anyio.create_task_group() as group:
            for seed in range(3):  # one holds stage 1, one waits behind it, one waits for a slot
                async def cut_off(seed: int = seed) -> None:
                    with anyio.move_on_after(0.2):
                        await pipe.run(x=batch(seed))
                group.start_soon(cut_off)
            await anyio.sleep(0.5)
            assert pipe.stats().in_flight == 2  # enqueued runs wait, shielded, for every stage
            devices[1].release_hangs()
        async with aclosing(pipe.stream({"x": batch(seed)} for seed in range(6))) as results:
            async for _ in results:
                break
        stats = pipe.stats()
        assert stats.in_flight == 0 and stats.lost_slots == 0
        x = batch(9)
        assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
    assert [live_device_state(d) for d in devices[:2]] == baselines


async def test_aclose_waits_for_runs_in_flight_and_is_idempotent(devices):
    graph = mixed40()
    pipe = Pipeline(graph, device=devices[:2], split="stages")
    partition, _ = pipe.stages_for(x=(8, 16))
    results: list[dict[str, np.ndarray]] = []

    async def run_one(seed: int) -> None:
        results.append(await pipe.run(x=batch(seed)))

    devices[0].inject_fault("kernel", match=partition.stages[0].nodes[2], hang=True)
    async with anyio.create_task_group() as group:
        group.start_soon(run_one, 0)
        with anyio.fail_after(30):
            while True:  # until it is enqueued (and then held on stage 0)
                if pipe.stats().in_flight == 1:
                    break
                await anyio.sleep(0.01)
        group.start_soon(pipe.aclose)
        await anyio.sleep(0.05)
        assert results == []
        devices[0].release_hangs()
    assert len(results) == 1
    await pipe.aclose()
    with pytest.raises(ClosedResourceError):
        await pipe.run(x=batch(1))
    owned = Pipeline(graph, device="sim:2,3", split="stages")
    await owned.aclose()
    assert all(d.closed for d in owned.devices)


async def test_devices_without_peer_access_cannot_take_stages():
    no_link = dataclasses.replace(ATLAS_A2, name="no-link", peer_bytes_per_s=0.0)
    with pytest.raises(PlanError, match="no peer access"):
        StagePipeline(mixed40(), device="sim:0,1", device_options={"spec": no_link})


async def test_more_devices_than_nodes_is_a_plan_error():
    g = Graph("one")
    g.output("y", g.relu(g.input("x", shape=(2, 2))))
    async with Pipeline(g, device="sim:0,1", split="stages") as pipe:
        with pytest.raises(PlanError, match="cannot be cut into 2 stages"):
            await pipe.run(x=np.ones((2, 2), np.float32))


def test_stage_options_are_checked():
    with pytest.raises(ValueError, match="memory_fraction"):
        StagePipeline(mixed40(), device="sim:0,1", memory_fraction=0)
    with pytest.raises(ValueError, match="depth"):
        StagePipeline(mixed40(), device="sim:0,1", depth=0)
    with pytest.raises(TypeError):
        StagePipeline("graph", device="sim:0,1")  # type: ignore[arg-type]


async def test_stages_with_one_device_per_stage_on_the_timing_model():
    graph = mixed40()
    async with Pipeline(graph, device="sim:0,1", split="stages", device_options={"timing": True}) as pipe:
        x = batch(3)
        assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
        out = [o async for o in pipe.stream([{"x": batch(s)} for s in range(4)])]
        assert len(out) == 4


@pytest.mark.parametrize("failure", list(FAILURES))
async def test_stream_delivers_the_runs_ahead_of_a_failing_batch_before_its_error(devices, failure):
    # As Pipeline.stream: the accepted batches' results first, in order, then the error.
    graph = mixed40()
    async with Pipeline(graph, device=devices[:2], split="stages") as pipe:
        await assert_stream_fails_in_order(pipe, graph, [{"x": batch(seed)} for seed in range(3)],
                                           np.ones((8, 15), np.float32), failure)


async def test_many_batch_sizes_keep_at_most_max_programs_and_buckets_pad(devices):
    # As on one device: idle programs beyond max_programs are freed, least recently used first,
    # and buckets run every size on a few programs, the results sliced back to the real rows.
    graph = mixed40(batch=None)
    async with Pipeline(graph, device=devices[:2], split="stages", max_programs=3) as pipe:
        for rows in range(1, 9):
            x = batch(rows, rows=rows)
            assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
        stats = pipe.stats()
        assert stats.signatures == 3 and stats.prepared == 8 and stats.evicted == 5
    async with Pipeline(graph, device=devices[:2], split="stages", buckets=(4, 8)) as pipe:
        batches = [{"x": batch(rows, rows=rows)} for rows in range(1, 9)]
        results = [out async for out in pipe.stream(batches)]
        for out, inputs in zip(results, batches, strict=True):
            assert_outputs(out, reference(graph, inputs))
        assert pipe.stats().signatures == 2 and pipe.stats().in_flight == 0
    with pytest.raises(ValueError, match="max_programs must be a positive int"):
        Pipeline(graph, device=devices[:2], split="stages", max_programs=0)


async def test_a_stage_program_with_a_run_in_flight_is_never_evicted(devices, anyio_backend):
    graph = mixed40(batch=None)
    async with Pipeline(graph, device=devices[:2], split="stages", max_programs=1, depth=2) as pipe:
        async with aclosing(pipe.stream({"x": batch(seed, rows=7)} for seed in range(3))) as held:
            first = await held.__anext__()  # the next batch is in flight: its program is busy
            for rows in (1, 2):
                x = batch(rows, rows=rows)
                assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
            rest = [out async for out in held]
        for seed, out in enumerate([first, *rest]):
            assert_outputs(out, reference(graph, {"x": batch(seed, rows=7)}))
        await pipe.run(x=batch(0, rows=3))
        assert pipe.stats().signatures == 1 and pipe.stats().evicted == 3


def wide(width: int = 1024) -> Graph:
    """Two stages' worth of large activations: a few programs fill a small device."""
    g = Graph("wide")
    x = g.input("x", shape=(None, width))
    g.output("y", g.relu(g.neg(g.tanh(x))))
    return g


def rows_of(count: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, 1024)).astype(np.float32)


async def test_a_new_shape_that_fits_only_once_idle_programs_go_evicts_them_first():
    # The cut counts the idle programs' arenas as room; the allocation that then fails frees
    # them (least recently used first) and tries again, as on one device.
    graph = wide()
    probes = [aclpipe.open_device(f"sim:{k}") for k in range(2)]
    try:
        async with Pipeline(graph, device=probes, split="stages", depth=2) as pipe:
            await pipe.run(x=rows_of(256))
            used = max(d.mem_info().used for d in probes)
            partition, _ = pipe.stages_for(x=(256, 1024))
            # Room for the cut's estimate of one program (it counts activations without reuse), not
            # for two programs as they are.
            estimate = max(stage.constant_bytes + 2 * stage.activation_bytes for stage in partition.stages)
            capacity = int(estimate / 0.9) + 4096
            assert capacity < 2 * used
    finally:
        for device in probes:
            device.close()
    opened = [aclpipe.open_device(f"sim:{k}", capacity=capacity) for k in range(2)]
    try:
        async with Pipeline(graph, device=opened, split="stages", depth=2) as pipe:
            await pipe.run(x=rows_of(256))
            for count in (255, 254):
                x = rows_of(count, seed=count)
                assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
            stats = pipe.stats()
            assert stats.evicted == 2 and stats.signatures == 1
        assert all(device.mem_info().used == 0 for device in opened)
    finally:
        for device in opened:
            device.close()


def test_two_threads_on_one_stage_pipeline_get_results_or_a_clear_error(devices):
    # As on one device (test_affinity.py): the async API serves one event loop at a time and
    # refuses another one meanwhile, instead of mixing two loops' waits (which hung).
    graph = mixed40()
    pipe = Pipeline(graph, device=devices[:2], split="stages")
    outcomes: dict[int, list[str]] = {0: [], 1: []}
    start = threading.Barrier(2)

    def worker(index: int) -> None:
        async def loop() -> None:
            for run in range(30):
                x = batch(100 * index + run)
                try:
                    assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
                    outcomes[index].append("result")
                except EventLoopError as error:
                    assert "in use by thread" in str(error)
                    outcomes[index].append("refused")
                    await anyio.lowlevel.checkpoint()

        start.wait()
        anyio.run(loop)

    threads = [threading.Thread(target=worker, args=(index,), daemon=True) for index in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads), "a thread is stuck"
    assert all(len(runs) == 30 for runs in outcomes.values())
    assert "result" in outcomes[0] + outcomes[1]
    pipe.close()


async def test_a_cancelled_aclose_returns_at_once_and_frees_once_the_devices_pass(devices):
    graph = mixed40()
    baselines = [live_device_state(d) for d in devices[:2]]
    pipe = Pipeline(graph, device=devices[:2], split="stages")
    partition, _ = pipe.stages_for(x=(8, 16))
    devices[1].inject_fault("kernel", match=partition.stages[1].nodes[-1], hang=True)
    closed: list[BaseException] = []
    watchdog: list[str] = []
    watch = anyio.CancelScope()

    async def run_one() -> None:
        with pytest.raises(ClosedResourceError) as info:
            await pipe.run(x=batch(0))
        closed.append(info.value)

    async def release_if_stuck() -> None:  # only so that a failing aclose cannot hang the test
        with watch:
            await anyio.sleep(20)
            watchdog.append("aclose ignored its cancellation")
            devices[1].release_hangs()

    async with anyio.create_task_group() as group:
        group.start_soon(run_one)
        group.start_soon(release_if_stuck)
        await eventually(lambda: pipe.stats().in_flight == 1)  # enqueued, then held on stage 1
        with anyio.move_on_after(0.2) as scope:
            await pipe.aclose()
        assert scope.cancelled_caught and watchdog == []  # returned while stage 1 is still held
        await pipe.aclose()  # closed already: returns at once
        with pytest.raises(ClosedResourceError):
            await pipe.run(x=batch(1))
        devices[1].release_hangs()
        watch.cancel()
    assert len(closed) == 1  # the held run's result is not read from parked memory
    # Parked: freed by whichever thread sees the devices pass.
    await eventually(lambda: [live_device_state(d) for d in devices[:2]] == baselines)


async def eventually(check: Callable[[], bool]) -> None:
    """Return once ``check()`` holds (polled: what it watches has no event to wait on)."""
    with anyio.fail_after(30):
        while True:
            if check():
                return
            await anyio.sleep(0.01)
