"""The step programs are counted against the device's budget: capture never runs out of streams."""

from __future__ import annotations

import anyio
from decode_reference import reference_greedy

import aclpipe
from aclpipe.decode import Decoder
from aclpipe.decode.budget import BucketUse, fitting


def _use(streams: int, events: int = 1, arena: int = 1) -> BucketUse:
    return BucketUse("decode", 1, 1, 16, streams, events, arena)


def test_fitting_counts_the_most_demanding_programs_first():
    uses = (_use(5), _use(3), _use(3), _use(2))
    assert fitting(uses, streams=11, events=100, memory=100) == 3  # 5 + 3 + 3; the 2 more would be 13
    assert fitting(uses, streams=10, events=100, memory=100) == 2
    assert fitting(uses, streams=7, events=100, memory=100) == 1
    assert fitting(uses, streams=100, events=2, memory=100) == 2
    assert fitting(uses, streams=0, events=0, memory=0) == 1  # one runs uncaptured at worst


def test_every_bucket_program_is_prepared_and_captured_up_front(toy_model):
    with Decoder(toy_model, max_batch=4, max_len=32, cache_buckets=[16]) as decoder:
        plan = decoder.capture_plan()
        assert len(plan.uses) == len(decoder.signatures()) == 12  # (prefill, decode) x 3 batch x 2 lengths
        assert "streams" in plan.describe() and "decode  batch   4 x seq    1 past    32" in plan.describe()
        decoder.prepare()
        stats = decoder.pipeline.stats()
        assert stats.signatures == 12 and stats.captured == 12 and stats.starved == 0


def test_a_small_stream_budget_lowers_the_programs_held_and_no_capture_starves(toy_model):
    device = aclpipe.open_device("sim", max_streams=24)
    prompts = [[1, 2, 3], [4] * 20, [9, 8], [7] * 9, [5]]
    try:
        async def main():
            async with Decoder(toy_model, device=device, max_batch=4, max_len=48, cache_buckets=[8, 16, 32]) as decoder:
                held = decoder.max_programs
                results = [[] for _ in prompts]

                async def one(index):
                    results[index] = await decoder.generate(prompts[index], 12).tokens()

                async with anyio.create_task_group() as group:
                    for index in range(len(prompts)):
                        group.start_soon(one, index)
                return held, len(decoder.signatures()), decoder.pipeline.stats(), results

        held, total, stats, results = anyio.run(main)
    finally:
        device.close()
    assert held < total
    assert stats.starved == 0 and stats.captured == stats.signatures <= held
    assert stats.evicted > 0  # programs beyond the budget were freed, not left to fail a capture
    assert results == [reference_greedy(toy_model, prompt, 12) for prompt in prompts]


def test_a_device_that_does_not_capture_runs_the_steps_from_launch_tables(toy_model):
    import dataclasses

    from aclpipe.backends.sim.engines import ATLAS_A2

    device = aclpipe.open_device("sim", spec=dataclasses.replace(ATLAS_A2, graph_capture=False))
    try:
        with Decoder(toy_model, device=device, max_batch=2, max_len=32) as decoder:
            tokens = decoder.generate_sync([1, 2, 3], 6)
            stats = decoder.pipeline.stats()
    finally:
        device.close()
    assert tokens == reference_greedy(toy_model, [1, 2, 3], 6)
    assert stats.captured == 0 and stats.starved == 0
