"""Many concurrent callers on one pipeline: all results right, in any order, no deadlock."""

from __future__ import annotations

import random

import anyio
import numpy as np
import pytest
from pipeline_graphs import assert_outputs, live_device_state, mixed40, mlp, reference

from aclpipe import Pipeline

pytestmark = pytest.mark.anyio

CALLS = 1000


@pytest.mark.parametrize(("depth", "workspace", "pool_bytes"), [
    (2, "pool", 0), (3, "static", 0), (4, "pool", 512),  # 512: one block, so runs wait for workspaces
])
async def test_a_thousand_concurrent_runs_all_come_back_right(device, depth, workspace, pool_bytes):
    graph = mlp(width=16)
    inputs = np.random.default_rng(depth).standard_normal((CALLS, 3, 16)).astype(np.float32)
    # The MLP works row by row: one numpy evaluation of every row at once is the reference.
    expected = reference(graph, {"x": inputs.reshape(-1, 16)})["y"].reshape(CALLS, 3, -1)
    results: list[np.ndarray | None] = [None] * CALLS
    order: list[int] = []

    async def call(index: int) -> None:
        results[index] = (await pipe.run(x=inputs[index]))["y"]
        order.append(index)

    async with Pipeline(graph, device, streams=2, depth=depth, workspace=workspace, pool_bytes=pool_bytes) as pipe:
        with anyio.fail_after(120):
            async with anyio.create_task_group() as group:
                for index in range(CALLS):
                    group.start_soon(call, index)
        stats = pipe.stats()
    assert sorted(order) == list(range(CALLS))
    for index in range(CALLS):
        assert_outputs({"y": results[index]}, {"y": expected[index]})  # type: ignore[dict-item]
    assert stats.runs == CALLS and stats.in_flight == 0 and stats.failed_runs == 0
    assert stats.workspace.get("outstanding", 0) == 0


async def test_concurrent_runs_of_many_signatures_and_streams_at_once(device):
    graph = mlp(batch="batch", width=16)
    rng = random.Random(7)
    sizes = [rng.choice([1, 2, 3, 5, 8]) for _ in range(200)]
    inputs = [np.random.default_rng(i).standard_normal((rows, 16)).astype(np.float32) for i, rows in enumerate(sizes)]
    baseline = live_device_state(device)

    async def call(index: int) -> None:
        out = await pipe.run(x=inputs[index])
        assert_outputs(out, reference(graph, {"x": inputs[index]}))

    async def consume(offset: int) -> None:
        batches = [{"x": inputs[(offset + k) % len(inputs)]} for k in range(20)]
        async for position, out in _enumerate(pipe.stream(batches)):
            assert_outputs(out, reference(graph, batches[position]))

    async with Pipeline(graph, device, streams=3, depth=3, workspace="pool", pool_bytes=1024) as pipe:
        with anyio.fail_after(120):
            async with anyio.create_task_group() as group:
                for index in range(len(inputs)):
                    group.start_soon(call, index)
                for offset in (0, 50, 100):
                    group.start_soon(consume, offset)
        stats = pipe.stats()
        assert stats.signatures == len(set(sizes)) and stats.in_flight == 0
        assert stats.workspace["outstanding"] == 0
    assert live_device_state(device) == baseline


async def test_a_branchy_graph_under_load_on_four_streams(device):
    graph = mixed40()
    inputs = [np.random.default_rng(i).standard_normal((8, 16)).astype(np.float32) for i in range(60)]

    async def call(x: np.ndarray) -> None:
        assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))

    async with Pipeline(graph, device, streams=4, depth=4, workspace="pool", pool_bytes=1024) as pipe:
        with anyio.fail_after(120):
            async with anyio.create_task_group() as group:
                for x in inputs:
                    group.start_soon(call, x)
        assert pipe.stats().in_flight == 0


async def _enumerate(results):  # type: ignore[no-untyped-def]
    index = 0
    async for item in results:
        yield index, item
        index += 1
