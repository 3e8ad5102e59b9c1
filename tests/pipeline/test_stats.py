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
