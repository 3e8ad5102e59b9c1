"""The 'stream-ordered' workspace strategy: MallocAsync before each launch, FreeAsync after it, on
the launch's stream; through the strategy interface and through the public Pipeline API."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import numpy as np
import pytest

import aclpipe
from aclpipe import Pipeline
from aclpipe.errors import BackendError, HazardError
from aclpipe.runtime import Device
from aclpipe.runtime.workspaces import StreamOrderedWorkspace, make_workspace_strategy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipeline"))
from pipeline_graphs import assert_outputs, mixed40, reference


def _batches(count: int) -> list[np.ndarray]:
    return [np.random.default_rng(seed).standard_normal((8, 16)).astype(np.float32) for seed in range(count)]


async def _run(device: Device, workspace: str, inputs: list[np.ndarray], pool_bytes: int = 0) -> list[dict]:
    async with Pipeline(mixed40(), device, streams=4, depth=2, workspace=workspace, pool_bytes=pool_bytes) as pipe:
        results = [await pipe.run(x=x) for x in inputs]
        stats = pipe.stats().workspace
    return [*results, stats]


def test_a_pipeline_runs_with_stream_ordered_workspaces(device: Device):
    inputs = _batches(4)
    *results, stats = anyio.run(_run, device, "stream-ordered", inputs)
    for x, got in zip(inputs, results):
        assert_outputs(got, reference(mixed40(), {"x": x}))
    # One MallocAsync per workspace launch, none waited for, all freed again.
    assert stats["allocations"] == stats["acquires"] > 0 and stats["waits"] == 0 and stats["in_use"] == 0


def test_a_small_pool_is_trimmed_and_the_results_stay_right(device: Device):
    inputs = _batches(6)
    *results, stats = anyio.run(_run, device, "stream-ordered", inputs, 4 << 20)  # two 2 MB blocks
    for x, got in zip(inputs, results):
        assert_outputs(got, reference(mixed40(), {"x": x}))
    assert stats["waits"] > 0 and stats["reserved"] <= 4 << 20 and stats["limit"] == 4 << 20


def test_products_without_it_refuse_it_naming_what_to_use():
    with aclpipe.open_device("sim", spec="atlas-310p") as device:
        with pytest.raises(BackendError, match="Atlas A2 only.*'pool'") as refused:
            Pipeline(mixed40(), device, workspace="stream-ordered")
        assert refused.value.code == 207000


def test_the_block_is_the_launch_streams_until_an_event_says_otherwise(device: Device):
    strategy = make_workspace_strategy(device, "stream-ordered")
    assert isinstance(strategy, StreamOrderedWorkspace)
    first, second = device.create_stream(), device.create_stream()
    workspace = strategy.acquire(512, first)
    device.backend.memset_async(workspace.address, 0, 512, first.handle)
    with pytest.raises(HazardError):
        device.backend.memset_async(workspace.address, 0, 512, second.handle)
    strategy.release_after(workspace, first)
    with pytest.raises(ValueError, match="already released"):
        strategy.release_after(workspace, first)
    strategy.release_now(strategy.acquire(0, first))  # no workspace: nothing to free
    strategy.close()
    assert strategy.stats().in_use == 0


def test_a_full_pool_is_trimmed_by_a_blocking_acquire(device: Device):
    strategy = StreamOrderedWorkspace(device, max_size=2 << 20)
    stream = device.create_stream()
    for _ in range(3):  # each needs the one 2 MB block the last one freed
        workspace = strategy.acquire(64, stream)
        device.backend.memset_async(workspace.address, 1, 64, stream.handle)
        strategy.release_after(workspace, stream)
    assert strategy.trims == 2 and strategy.stats().waits == 2
    strategy.close()
