"""What a stage pipeline holds on its devices is freed once, together, once every device passed
it: at once by aclose, later when aclose is cancelled or the pipeline is dropped."""

from __future__ import annotations

import gc
import time

import anyio
import numpy as np
import pytest
from pipeline_graphs import assert_outputs, live_device_state, mixed40, reference

import aclpipe
from aclpipe import ClosedResourceError, Pipeline

pytestmark = pytest.mark.timeout(120)


def batch(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((8, 16)).astype(np.float32)


@pytest.fixture
def devices():
    opened = [aclpipe.open_device(f"sim:{index}") for index in range(2)]
    yield opened
    for device in opened:
        device.release_hangs()
        device.close()


def wait_until(check, what: str) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_a_stage_pipeline_dropped_without_aclose_frees_its_devices_memory(devices):
    graph = mixed40()
    baselines = [live_device_state(d) for d in devices]
    pipe = Pipeline(graph, device=devices, split="stages")
    x = batch(0)
    assert_outputs(pipe.run_sync(x=x), reference(graph, {"x": x}))
    del pipe
    gc.collect()
    wait_until(lambda: [live_device_state(d) for d in devices] == baselines,
               "a dropped stage pipeline kept its devices' memory")


def test_parked_stages_are_freed_together_once_the_last_device_passes(devices):
    graph = mixed40()
    baselines = [live_device_state(d) for d in devices]
    pipe = Pipeline(graph, device=devices, split="stages")
    partition, _ = pipe.stages_for(x=(8, 16))
    devices[1].inject_fault("kernel", match=partition.stages[1].nodes[-1], hang=True)
    outcome: list[BaseException] = []

    async def main() -> None:
        async def run_one() -> None:
            try:
                await pipe.run(x=batch(0))
            except ClosedResourceError as error:
                outcome.append(error)

        async with anyio.create_task_group() as group:
            group.start_soon(run_one)
            with anyio.fail_after(30):
                while pipe.stats().in_flight != 1:  # noqa: ASYNC110 - no event says a run was enqueued
                    await anyio.sleep(0.01)
            with anyio.move_on_after(0.1):
                await pipe.aclose()
            # Stage 0 is done, but stage 1 still waits on its events: nothing is freed yet.
            assert live_device_state(devices[0]) != baselines[0]
            devices[1].release_hangs()

    anyio.run(main)
    assert len(outcome) == 1
    wait_until(lambda: [live_device_state(d) for d in devices] == baselines,
               "parked stages were not freed once every device passed them")
