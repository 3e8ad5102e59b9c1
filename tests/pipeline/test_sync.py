"""The blocking API from many threads at once: one device, replicas and stages alike.

Every caller gets its own right result, a thread's calls in its order; the async API keeps its
one-event-loop guard; the loop thread behind the blocking calls ends with ``close()`` or with
the pipeline.
"""

from __future__ import annotations

import gc
import threading
from typing import Any

import anyio
import numpy as np
import pytest
from pipeline_graphs import assert_outputs, mixed40, reference

import aclpipe
from aclpipe import ClosedResourceError, EventLoopError, Pipeline

pytestmark = pytest.mark.timeout(120)

LAYOUTS = {"one device": ("sim:0", {}), "replicas": ("sim:0,1", {}), "stages": ("sim:0,1", {"split": "stages"})}


def batch(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((8, 16)).astype(np.float32)


def loop_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name.startswith("aclpipe blocking calls")]


def run_threads(pipe: Pipeline, threads: int, runs: int) -> tuple[dict[int, list[Any]], list[threading.Thread]]:
    """Each of ``threads`` threads makes ``runs`` blocking calls; per thread its (seed, outcome) pairs."""
    outcomes: dict[int, list[Any]] = {index: [] for index in range(threads)}
    start = threading.Barrier(threads)

    def worker(index: int) -> None:
        start.wait()
        for run in range(runs):
            seed = index * 1000 + run
            try:
                outcomes[index].append((seed, pipe.run_sync(x=batch(seed))))
            except BaseException as error:  # noqa: BLE001 - reported by the caller's assertions
                outcomes[index].append((seed, error))

    workers = [threading.Thread(target=worker, args=(index,), daemon=True) for index in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(90)
    return outcomes, workers


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_many_threads_calling_run_sync_each_get_their_own_results_in_order(layout):
    graph = mixed40()
    spec, options = LAYOUTS[layout]
    pipe = Pipeline(graph, device=spec, **options)
    outcomes, workers = run_threads(pipe, threads=16, runs=10)
    assert not any(thread.is_alive() for thread in workers), "a caller is stuck"
    for index, results in outcomes.items():
        assert [seed for seed, _ in results] == [index * 1000 + run for run in range(10)]
        for seed, result in results:
            assert not isinstance(result, BaseException), f"run {seed}: {result!r}"
            assert_outputs(result, reference(graph, {"x": batch(seed)}))
    assert pipe.stats().runs == 160 and pipe.stats().in_flight == 0
    pipe.close()
    assert loop_threads() == []  # close() ends the loop thread behind the blocking calls
    with pytest.raises(ClosedResourceError):
        pipe.run_sync(x=batch(0))
    pipe.close()  # idempotent


def test_the_async_api_still_serves_one_event_loop_at_a_time(device):
    graph = mixed40()
    pipe = Pipeline(graph, device)
    refused: list[BaseException] = []

    async def main() -> None:
        device.inject_fault("kernel", match="n20", hang=True)
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: pipe.run(x=batch(0)))  # held on the device: this loop owns the pipeline
            await anyio.wait_all_tasks_blocked()
            for call in (lambda: pipe.run_sync(x=batch(1)), pipe.close):
                try:
                    await anyio.to_thread.run_sync(call)
                except EventLoopError as error:
                    refused.append(error)
            device.release_hangs()
        await pipe.aclose()

    anyio.run(main)
    assert len(refused) == 2


def test_run_sync_inside_an_event_loop_is_refused(device):
    pipe = Pipeline(mixed40(), device)

    async def main() -> None:
        with pytest.raises(EventLoopError, match="await the async form"):
            pipe.run_sync(x=batch(0))

    anyio.run(main)
    pipe.close()


def test_a_pipeline_dropped_without_close_ends_its_loop_thread():
    graph = mixed40()
    device = aclpipe.open_device("sim:0")
    try:
        pipe = Pipeline(graph, device)
        before = set(loop_threads())
        x = batch(3)
        assert_outputs(pipe.run_sync(x=x), reference(graph, {"x": x}))
        (started,) = set(loop_threads()) - before
        del pipe
        gc.collect()
        started.join(30)
        assert not started.is_alive()
    finally:
        device.close()
