"""PipelineStats is a frozen snapshot that reads the same after aclose (everything held is 0)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from pipeline_graphs import mlp

from aclpipe import Pipeline, PipelineStats

pytestmark = pytest.mark.anyio


async def test_stats_are_a_frozen_snapshot_and_survive_close(device):
    pipe = Pipeline(mlp(), device, streams=2, depth=2)
    await pipe.run(x=np.ones((4, 32), np.float32))
    stats = pipe.stats()
    assert isinstance(stats, PipelineStats)
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.runs = 5  # type: ignore[misc]
    assert stats.runs == 1 and stats.signatures == 1 and stats.executors > 0 and not stats.closed
    assert stats.as_dict()["workspace"]["strategy"] == "pool"
    await pipe.aclose()
    after = pipe.stats()
    assert after.closed and after.runs == 1 and after.arena_bytes == after.executors == 0


async def test_completion_latency_counts_every_run_read_from_its_stamp(device):
    async with Pipeline(mlp(), device, streams=2, depth=2) as pipe:
        assert pipe.stats().completion == {}
        for _ in range(3):
            await pipe.run(x=np.ones((4, 32), np.float32))
        async for _ in pipe.stream([{"x": np.ones((4, 32), np.float32)}] * 4):
            pass
        completion = pipe.stats().completion
    assert completion["samples"] == 7
    assert 0 < completion["median_us"] <= completion["p99_us"]


def test_the_completion_log_keeps_a_bounded_window():
    from aclpipe.pipeline.stats import CompletionLog

    log = CompletionLog(keep=4)
    for nanoseconds in (1_000, 2_000, 3_000, 4_000, 100_000):
        log.add(nanoseconds)
    assert log.summary() == {"samples": 4.0, "median_us": 3.5, "p99_us": 100.0}


class _Stamps:
    """A timeline's passed_at: the stamps of lane 0 still held (older ones are overwritten)."""

    def __init__(self, stamps: dict[int, int]):
        self.stamps = stamps

    def passed_at(self, lane: int, value: int) -> int | None:
        assert lane == 0
        return self.stamps.get(value)


def test_the_completion_log_matches_resumed_runs_with_their_stamps_later():
    from aclpipe.pipeline.stats import CompletionLog

    log = CompletionLog()
    log.resumed(1, 5_000)
    log.resumed(2, 9_000)
    log.resumed(3, 9_500)  # its stamp was overwritten before it was looked up: dropped
    assert log.summary() == {} and log.due
    log.settle(_Stamps({1: 1_000, 2: 3_000}), 0)  # type: ignore[arg-type]
    assert not log.due and sorted(log.samples) == [4_000, 6_000]
    log.settle(_Stamps({}), 0)  # type: ignore[arg-type]
    assert len(log.samples) == 2


async def test_a_results_latency_is_logged_before_the_next_wait_or_report(device):
    async with Pipeline(mlp(), device, streams=2, depth=2) as pipe:
        await pipe.run(x=np.ones((4, 32), np.float32))
        assert len(pipe._completion.due) == 1 and not pipe._completion.samples  # noted, not looked up yet
        await pipe.run(x=np.ones((4, 32), np.float32))
        assert len(pipe._completion.samples) == 1  # the first run's, looked up before the second waited
        assert pipe.stats().completion["samples"] == 2 and not pipe._completion.due
