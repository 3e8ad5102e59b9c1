"""The Decoder against onnxruntime's greedy decoding of the same model, token for token."""

from __future__ import annotations

import anyio
import numpy as np
import pytest
from decode_reference import reference_greedy

import aclpipe
from aclpipe import ClosedResourceError, InputError, UnsupportedOpError
from aclpipe.decode import Decoder, PromptTooLongError

PROMPTS = [[1, 2, 3, 4, 5], [7], [3, 9, 11, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 40], [5, 6], [60, 1, 33]]


async def _all(decoder: Decoder, prompts: list[list[int]], new_tokens: list[int]) -> list[list[int]]:
    results: list[list[int]] = [[] for _ in prompts]

    async def one(index: int) -> None:
        results[index] = await decoder.generate(prompts[index], new_tokens[index]).tokens()

    async with anyio.create_task_group() as group:
        for index in range(len(prompts)):
            group.start_soon(one, index)
    return results


def test_one_request_at_a_time_equals_onnxruntime(toy_model):
    async def main():
        async with Decoder(toy_model, max_batch=2, max_len=64) as decoder:
            return [await decoder.generate(prompt, 12).tokens() for prompt in PROMPTS[:3]]

    assert anyio.run(main) == [reference_greedy(toy_model, prompt, 12) for prompt in PROMPTS[:3]]


def test_many_in_flight_equal_onnxruntime_with_more_requests_than_slots(toy_model):
    new_tokens = [9, 14, 5, 11, 7]

    async def main():
        async with Decoder(toy_model, max_batch=3, max_len=64) as decoder:
            tokens = await _all(decoder, PROMPTS, new_tokens)
            return tokens, decoder.stats()

    tokens, stats = anyio.run(main)
    assert tokens == [reference_greedy(toy_model, p, n) for p, n in zip(PROMPTS, new_tokens)]
    assert stats["free_slots"] == 3 and stats["active"] == 0
    assert stats["tokens"] == sum(new_tokens)
    # Batching: fewer decode steps than one per token of each request.
    assert stats["decode_steps"] < sum(new_tokens) - len(new_tokens)


def test_requests_join_and_leave_mid_generation(toy_model):
    async def main():
        async with Decoder(toy_model, max_batch=4, max_len=64) as decoder:
            first = decoder.generate(PROMPTS[0], 16)
            early = [await first.__anext__() for _ in range(5)]
            second = decoder.generate(PROMPTS[1], 4)  # joins while the first runs, leaves before it ends
            results: dict[str, list[int]] = {}

            async def read(name, generation, head):
                results[name] = head + await generation.tokens()

            async with anyio.create_task_group() as group:
                group.start_soon(read, "first", first, early)
                group.start_soon(read, "second", second, [])
            return results, decoder.stats()["free_slots"]

    results, free = anyio.run(main)
    assert results["first"] == reference_greedy(toy_model, PROMPTS[0], 16)
    assert results["second"] == reference_greedy(toy_model, PROMPTS[1], 4)
    assert free == 4


def test_cancelling_one_request_frees_its_slot_and_leaves_the_others_alone(toy_model):
    async def main():
        async with Decoder(toy_model, max_batch=2, max_len=64) as decoder:
            kept = decoder.generate(PROMPTS[0], 12)
            dropped = decoder.generate(PROMPTS[3], 12)
            head = [await kept.__anext__()]
            assert [await dropped.__anext__() for _ in range(3)]
            assert decoder.active == 2
            await dropped.aclose()
            freed = decoder.cache.free
            third = decoder.generate(PROMPTS[4], 6)  # takes the freed slot
            rest = await kept.tokens()
            return head + rest, await third.tokens(), freed, [t async for t in dropped], decoder.cache.free

    kept, third, freed, after_close, free = anyio.run(main)
    assert freed == 1
    assert kept == reference_greedy(toy_model, PROMPTS[0], 12)
    assert third == reference_greedy(toy_model, PROMPTS[4], 6)
    assert after_close == [] and free == 2


def test_a_cancelled_reader_cancels_its_request(toy_model):
    async def main():
        async with Decoder(toy_model, max_batch=2, max_len=64) as decoder:
            generation = decoder.generate(PROMPTS[0], 40)
            with anyio.move_on_after(0):
                await generation.tokens()
            return decoder.active, decoder.waiting, decoder.cache.free

    assert anyio.run(main) == (0, 0, 2)


def test_a_request_longer_than_max_len_is_refused_before_it_starts(toy_model):
    async def main():
        async with Decoder(toy_model, max_batch=2, max_len=16) as decoder:
            with pytest.raises(PromptTooLongError) as refused:
                decoder.generate(list(range(1, 18)), 1)
            with pytest.raises(PromptTooLongError):
                decoder.generate([1, 2, 3], 15)  # 3 + 15 - 1 = 17 positions
            fits = await decoder.generate([1, 2, 3], 14).tokens()
            return refused.value, decoder.stats(), fits

    error, stats, fits = anyio.run(main)
    assert isinstance(error, InputError) and isinstance(error, ValueError)
    assert (error.prompt_len, error.max_len) == (17, 16) and "max_len=16" in str(error)
    assert stats["prefill_steps"] == 1 and stats["waiting"] == 0
    assert fits == reference_greedy(toy_model, [1, 2, 3], 14)


@pytest.mark.parametrize("spec", ["atlas-310p", "atlas-200i-a2"])
def test_a_product_without_canns_scatter_update_is_refused_up_front(toy_model, spec):
    device = aclpipe.open_device("sim", spec=spec)
    try:
        with pytest.raises(UnsupportedOpError, match=f"{spec}.*aclnnInplaceScatterUpdate.*Atlas A2/A3"):
            Decoder(toy_model, device=device, max_batch=2, max_len=16)
        assert device.mem_info().used == 0  # no cache was made
    finally:
        device.close()


def test_generation_crosses_cache_buckets_mid_way(toy_model):
    async def main():
        async with Decoder(toy_model, max_batch=2, max_len=40, cache_buckets=[4, 8, 16]) as decoder:
            tokens = await _all(decoder, [PROMPTS[0], PROMPTS[1]], [30, 20])
            return tokens, decoder.stats()["programs"]

    tokens, programs = anyio.run(main)
    assert tokens == [reference_greedy(toy_model, PROMPTS[0], 30), reference_greedy(toy_model, PROMPTS[1], 20)]
    assert programs >= 4  # a prefill and decode steps at the cache lengths 4, 8, 16 and 40


def test_eos_ends_a_request(toy_model):
    reference = reference_greedy(toy_model, PROMPTS[0], 12)
    eos = reference[3]

    async def main():
        async with Decoder(toy_model, max_batch=2, max_len=64) as decoder:
            return await decoder.generate(PROMPTS[0], 12, eos_id=eos).tokens()

    assert anyio.run(main) == reference[:reference.index(eos) + 1]


def test_sampling_with_a_seed_repeats_and_top_1_is_greedy(toy_model):
    async def main():
        async with Decoder(toy_model, max_batch=3, max_len=64) as decoder:
            runs = [await decoder.generate(PROMPTS[0], 8, temperature=1.5, seed=7).tokens() for _ in range(2)]
            top1 = await decoder.generate(PROMPTS[0], 8, temperature=0.7, top_k=1, seed=1).tokens()
            return runs, top1

    runs, top1 = anyio.run(main)
    assert runs[0] == runs[1]
    assert top1 == reference_greedy(toy_model, PROMPTS[0], 8)


def test_blocking_wrapper(toy_model):
    with Decoder(toy_model, max_batch=2, max_len=32) as decoder:
        assert decoder.generate_sync(np.array([1, 2, 3]), 5) == reference_greedy(toy_model, [1, 2, 3], 5)
    with pytest.raises(ClosedResourceError):
        decoder.generate([1], 1)


def test_blocking_callers_on_many_threads_are_batched_together(toy_model):
    from concurrent.futures import ThreadPoolExecutor

    with Decoder(toy_model, max_batch=4, max_len=32) as decoder:
        with ThreadPoolExecutor(3) as pool:
            results = list(pool.map(lambda prompt: decoder.generate_sync(prompt, 8), PROMPTS[:3]))
    assert results == [reference_greedy(toy_model, prompt, 8) for prompt in PROMPTS[:3]]


@pytest.mark.parametrize("prompt", [[], [1.5, 2.0], [[1, 2]]])
def test_bad_prompts_are_refused(toy_model, prompt):
    decoder = Decoder(toy_model, max_batch=1, max_len=8)
    try:
        with pytest.raises(ValueError, match="prompt_ids"):
            decoder.generate(prompt, 2)
        with pytest.raises(ValueError, match="max_new_tokens"):
            decoder.generate([1], 0)
    finally:
        decoder.close()


def test_a_joining_prefill_holds_the_running_sequences_up_for_one_step_at_most(toy_model):
    async def main():
        async with Decoder(toy_model, max_batch=4, max_len=64) as decoder:
            running = decoder.generate(PROMPTS[0], 10)
            tokens = [await running.__anext__() for _ in range(3)]
            before = dict(decoder.steps)
            joining = [decoder.generate(prompt, 4) for prompt in PROMPTS[1:4]]
            tokens.append(await running.__anext__())
            after = dict(decoder.steps)
            tokens += await running.tokens()
            others = [await generation.tokens() for generation in joining]
            return tokens, others, before, after

    tokens, others, before, after = anyio.run(main)
    # The three joined in one prefill, and the running sequence's next token came one decode step later.
    assert after["prefill"] - before["prefill"] == 1 and after["decode"] - before["decode"] == 1
    assert tokens == reference_greedy(toy_model, PROMPTS[0], 10)
    assert others == [reference_greedy(toy_model, prompt, 4) for prompt in PROMPTS[1:4]]


def test_a_failed_step_fails_its_requests_only(toy_model, monkeypatch):
    async def main():
        async with Decoder(toy_model, max_batch=2, max_len=64) as decoder:
            run = decoder.pipeline.run
            failing = {"left": 1}

            async def flaky(**inputs):
                if failing["left"]:
                    failing["left"] -= 1
                    raise RuntimeError("the device failed this step")
                return await run(**inputs)

            monkeypatch.setattr(decoder.pipeline, "run", flaky)
            with pytest.raises(RuntimeError, match="failed this step"):
                await decoder.generate(PROMPTS[0], 5).tokens()
            free = decoder.cache.free
            return free, await decoder.generate(PROMPTS[1], 5).tokens()

    free, tokens = anyio.run(main)
    assert free == 2
    assert tokens == reference_greedy(toy_model, PROMPTS[1], 5)


def test_replicas_take_the_same_device_forms_as_a_pipeline_each_with_its_own_cache(toy_model):
    async def main():
        async with Decoder(toy_model, device="sim:0,1", max_batch=2, max_len=32) as decoder:
            tokens = await _all(decoder, PROMPTS[:4], [6, 6, 6, 6])
            return tokens, decoder.stats()

    tokens, stats = anyio.run(main)
    assert tokens == [reference_greedy(toy_model, prompt, 6) for prompt in PROMPTS[:4]]
    assert [replica["tokens"] for replica in stats["replicas"]] == [12, 12]  # two requests on each device
    assert stats["free_slots"] == 4 and stats["tokens"] == 24


def test_replicas_block_too_and_close_the_devices_they_opened(toy_model):
    with Decoder(toy_model, device=["sim:0", "sim:1"], max_batch=1, max_len=16) as decoder:
        assert decoder.generate_sync([1, 2, 3], 4) == reference_greedy(toy_model, [1, 2, 3], 4)
        devices = [replica.pipeline.device for replica in decoder.replicas]
    assert all(device.closed for device in devices)


def test_a_path_bytes_or_loaded_graph_all_serve(toy_model, tmp_path):
    import onnx

    import aclpipe

    path = tmp_path / "toy.onnx"
    onnx.save(toy_model, str(path))
    expected = reference_greedy(toy_model, [1, 2, 3], 4)
    for model in (str(path), toy_model.SerializeToString(), aclpipe.load_onnx(toy_model)):
        with Decoder(model, max_batch=1, max_len=16) as decoder:
            assert decoder.generate_sync([1, 2, 3], 4) == expected


def test_a_decode_step_copies_the_same_bytes_whatever_the_cache_holds(toy_model):
    """The cache stays on the device: what a step copies (ids, mask, positions in; logits out)
    grows with the mask's width, never with the cache's contents."""
    async def main():
        async with Decoder(toy_model, max_batch=2, max_len=64, cache_buckets=[16, 64]) as decoder:
            generation = decoder.generate(PROMPTS[0], 40)
            await generation.__anext__()  # the prefill
            copied = []
            for _ in range(30):
                before = dict(decoder.copied)
                await generation.__anext__()
                copied.append((decoder.copied["h2d"] - before["h2d"], decoder.copied["d2h"] - before["d2h"]))
            return copied, decoder.cache.nbytes

    copied, cache_bytes = anyio.run(main)
    # One row: id, position, (slot, position) to write (8 bytes each), a mask of bucket + 1 columns; logits.
    assert set(copied[:10]) == {(8 * 4 + 8 * 17, 64 * 4)}  # past bucket 16
    assert set(copied[-10:]) == {(8 * 4 + 8 * 65, 64 * 4)}  # past bucket 64
    assert max(h2d + d2h for h2d, d2h in copied) < cache_bytes / 20


def test_the_last_running_sequence_moves_down_when_the_others_leave(toy_model):
    """Slots 0-2 finish first; the sequence in slot 3 moves to slot 0, so the steps after run
    one row, and its tokens are still onnxruntime's."""
    async def main():
        async with Decoder(toy_model, max_batch=4, max_len=64) as decoder:
            tokens = await _all(decoder, PROMPTS[:4], [3, 3, 3, 24])
            return tokens, decoder.stats()

    tokens, stats = anyio.run(main)
    assert tokens == [reference_greedy(toy_model, p, n) for p, n in zip(PROMPTS[:4], [3, 3, 3, 24])]
    assert stats["moves"] == 1 and stats["free_slots"] == 4
