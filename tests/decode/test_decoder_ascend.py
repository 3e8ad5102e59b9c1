"""The Decoder on the ascend binding over the fake CANN: the same tokens, every bucket captured."""

from __future__ import annotations

import anyio
from decode_reference import reference_greedy
from test_decoder import PROMPTS, _all

from aclpipe.decode import Decoder


def test_many_in_flight_equal_onnxruntime_with_every_program_captured(toy_model, ascend_device):
    new_tokens = [9, 14, 5, 11, 7]

    async def main():
        async with Decoder(toy_model, device=ascend_device, max_batch=4, max_len=32) as decoder:
            tokens = await _all(decoder, PROMPTS, new_tokens)
            return tokens, decoder.stats()

    tokens, stats = anyio.run(main)
    assert tokens == [reference_greedy(toy_model, p, n) for p, n in zip(PROMPTS, new_tokens)]
    assert stats["programs"] >= 2 and stats["captured"] == stats["programs"] and stats["starved"] == 0


def test_every_bucket_the_planner_chose_is_captured_up_front(toy_model, ascend_device):
    with Decoder(toy_model, device=ascend_device, max_batch=4, max_len=32) as decoder:
        decoder.prepare()
        stats, chosen = decoder.stats(), min(decoder.max_programs, len(decoder.signatures()))
    assert stats["programs"] == chosen == stats["captured"] and stats["starved"] == 0
