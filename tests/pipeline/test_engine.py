"""The engine steps (accept, start, finish or abandon, unpin) drive a one-device pipeline and a
stage pipeline alike, as a pipeline over several devices drives them; ``each_batch`` hands a
stream its batches, or last the error that ended them."""

from __future__ import annotations

from typing import Any

import anyio
import numpy as np
import pytest
from pipeline_graphs import assert_outputs, mixed40, reference

import aclpipe
from aclpipe import Pipeline
from aclpipe.pipeline.engine import Engine, each_batch
from aclpipe.pipeline.several import StagePipeline

pytestmark = pytest.mark.anyio


def batch(seed: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal((8, 16)).astype(np.float32)}


async def run_through(engine: Engine[Any, Any], inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return await engine.finish(await engine.start(*engine.accept(inputs)))


@pytest.fixture(params=["one device", "stages"])
async def engine(request: pytest.FixtureRequest):
    if request.param == "one device":
        pipe = Pipeline(mixed40(), "sim")
    else:
        pipe = Pipeline(mixed40(), device=["sim:0", "sim:1"], split="stages")
        assert isinstance(pipe, StagePipeline)
    async with pipe:
        yield pipe


async def test_accept_start_finish_is_a_run(engine: Engine[Any, Any]):
    for seed in range(3):
        inputs = batch(seed)
        assert_outputs(await run_through(engine, inputs), reference(mixed40(), inputs))


async def test_an_abandoned_run_and_an_unpinned_batch_give_everything_back(engine: Pipeline):
    ticket = await engine.start(*engine.accept(batch(0)))
    with anyio.CancelScope(shield=True):
        await engine.abandon(ticket)
    entry, _, _ = engine.accept(batch(1))
    engine.unpin(entry)
    assert entry.idle  # no pin and every slot back: the program may be evicted
    assert engine.stats().in_flight == 0
    assert_outputs(await run_through(engine, batch(2)), reference(mixed40(), batch(2)))


async def test_a_pipeline_over_several_devices_is_made_by_its_split():
    async with Pipeline(mixed40(), device="sim:0,1") as replicas, \
            Pipeline(mixed40(), device="sim:2,3", split="stages") as stages:
        assert type(replicas) is aclpipe.pipeline.ReplicaPipeline and type(stages) is StagePipeline


async def test_each_batch_gives_dicts_then_the_error_that_ended_them():
    def failing():
        yield {"x": 1}
        raise RuntimeError("source broke")

    got = [item async for item in each_batch(failing())]
    assert got[0] == {"x": 1} and isinstance(got[1], RuntimeError) and len(got) == 2

    got = [item async for item in each_batch([{"x": 1}, [1, 2], {"x": 3}])]
    assert got[0] == {"x": 1} and isinstance(got[1], TypeError) and len(got) == 2  # stops at the bad item
    assert "takes dicts" in str(got[1])
