"""One thread and event loop at a time: a second one is refused with EventLoopError, never raced."""

from __future__ import annotations

import threading

import anyio
import anyio.lowlevel
import numpy as np
import pytest
from pipeline_graphs import assert_outputs, mlp, reference

from aclpipe import EventLoopError, Pipeline
from aclpipe.pipeline import LoopAffinity

pytestmark = pytest.mark.timeout(120)


def batch(rows: int = 4, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, 32)).astype(np.float32)


def test_two_threads_running_one_pipeline_get_results_or_a_clear_error(device):
    graph = mlp()
    pipe = Pipeline(graph, device, depth=2)
    outcomes: dict[int, list[str]] = {0: [], 1: []}
    start = threading.Barrier(2)

    def worker(index: int) -> None:
        async def loop() -> None:
            for run in range(60):
                x = batch(1 + (run + index) % 4, seed=run)
                try:
                    assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
                    outcomes[index].append("result")
                except EventLoopError as error:
                    assert "in use by thread" in str(error)
                    outcomes[index].append("refused")
                    await anyio.lowlevel.checkpoint()

        start.wait()
        anyio.run(loop)

    threads = [threading.Thread(target=worker, args=(index,)) for index in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads), "a thread is stuck"
    # Every attempt ended in a right result or a refusal: no stall, no corrupted run.
    assert all(len(runs) == 60 for runs in outcomes.values())
    assert "result" in outcomes[0] + outcomes[1]
    pipe.close()
    assert device.mem_info().used == 0


def test_a_blocking_call_from_another_thread_is_refused_while_a_run_is_in_flight(device):
    pipe = Pipeline(mlp(), device)
    refused: list[BaseException] = []

    async def main() -> None:
        device.inject_fault("kernel", match="relu", hang=True)
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: pipe.run(x=batch()))
            await anyio.wait_all_tasks_blocked()
            for call in (lambda: pipe.prepare(x=(2, 32)), lambda: pipe.run_sync(x=batch()), pipe.close):
                try:
                    await anyio.to_thread.run_sync(call)
                except EventLoopError as error:
                    refused.append(error)
            device.release_hangs()
        await pipe.aclose()

    anyio.run(main)
    assert len(refused) == 3


def test_an_idle_pipeline_moves_between_threads_and_loops(device):
    graph = mlp()
    pipe = Pipeline(graph, device)
    x = batch()
    expected = reference(graph, {"x": x})
    assert_outputs(anyio.run(lambda: pipe.run(x=x)), expected)
    assert_outputs(anyio.run(lambda: pipe.run(x=x), backend="trio"), expected)
    results: list[dict[str, np.ndarray]] = []
    thread = threading.Thread(target=lambda: results.append(pipe.run_sync(x=x)))
    thread.start()
    thread.join(60)
    assert_outputs(results[0], expected)
    pipe.close()


def test_affinity_is_released_when_the_last_call_leaves():
    affinity = LoopAffinity("thing")
    affinity.enter("a")
    affinity.enter("b")
    affinity.leave()
    assert affinity.busy
    other: list[BaseException] = []
    thread = threading.Thread(target=lambda: _try_enter(affinity, other))
    thread.start()
    thread.join()
    assert len(other) == 1 and "thing is in use" in str(other[0])
    affinity.leave()
    assert not affinity.busy


def _try_enter(affinity: LoopAffinity, errors: list[BaseException]) -> None:
    try:
        affinity.enter("c")
    except EventLoopError as error:
        errors.append(error)


def test_threads_with_their_own_pipelines_share_one_device(device):
    graph = mlp()
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        try:
            with Pipeline(graph, device, depth=2) as pipe:
                for run in range(15):
                    x = batch(1 + run % 3, seed=seed * 100 + run)
                    assert_outputs(pipe.run_sync(x=x), reference(graph, {"x": x}))
        except BaseException as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == [] and not any(thread.is_alive() for thread in threads)
    assert device.mem_info().used == 0
