"""The Decoder on the ascend binding over the fake CANN: the same tokens, every bucket captured."""

from __future__ import annotations

import anyio
import numpy as np
import pytest
from decode_reference import reference_greedy
from test_decoder import PROMPTS, _all

from aclpipe.decode import Decoder
from aclpipe.eager import OpRunner
from aclpipe.errors import DeviceFault, InvalidArgumentError


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


CASES = [
    ("Minimum", [np.array([[1.0, -2.0, 3.0]], np.float32), np.array([[0.5], [4.0]], np.float32)], {}),
    ("Neg", [np.array([1.5, -2.0, 0.0], np.float32)], {}),
    ("LogicalAnd", [np.array([True, True, False]), np.array([[True], [False]])], {}),
    ("IndexSelect", [np.arange(12, dtype=np.float32).reshape(4, 3), np.array([3, 0, 3], np.int64)], {"dim": 0}),
    ("Where", [np.array([[True], [False]]), np.arange(6, dtype=np.float32).reshape(2, 3),
               np.array(-1.0, np.float32)], {}),
]


@pytest.mark.parametrize(("op", "arrays", "attrs"), CASES, ids=[case[0] for case in CASES])
def test_the_step_ops_the_fake_gained_match_the_simulator(op, arrays, attrs, ascend_device, device):
    results = []
    for target in (ascend_device, device):
        runner = OpRunner(op, target.create_stream())
        for array in arrays:
            runner.input(array)
        results.append(runner.output().attr(**attrs).run()[0])
    np.testing.assert_array_equal(results[0], results[1])


def _scatter_update(target, indices, updates, axis):
    cache = target.upload(np.zeros((3, 2, 5, 4), np.float32))
    try:
        OpRunner("InplaceScatterUpdate", target.create_stream()).input(indices).input(updates) \
            .output(cache, shape=(3, 2, 5, 4), dtype="float32").attr(axis=axis).run()
        return target.download(cache, "float32", (3, 2, 5, 4))
    finally:
        cache.close()


@pytest.mark.parametrize("indices", [np.array([[2, 1], [0, 3]]), np.array([[2, 1], [0, 3]], np.int32),
                                     np.array([1, 3])], ids=["int64 pairs", "int32 pairs", "1-d offsets"])
def test_inplace_scatter_update_on_the_fake_matches_the_simulator(indices, ascend_device, device):
    updates = np.arange(2 * 2 * 2 * 4, dtype=np.float32).reshape(2, 2, 2, 4) + 1
    written = [_scatter_update(target, indices, updates, -2) for target in (ascend_device, device)]
    np.testing.assert_array_equal(written[0], written[1])
    expected = np.zeros((3, 2, 5, 4), np.float32)
    batches, offsets = (indices[:, 0], indices[:, 1]) if indices.ndim == 2 else (range(2), indices)
    for row, (batch, offset) in enumerate(zip(batches, offsets)):
        expected[batch, :, offset:offset + 2] = updates[row]
    np.testing.assert_array_equal(written[0], expected)


@pytest.mark.parametrize(("indices", "axis", "error", "needle"), [
    (np.array([[0, 1]]), 0, InvalidArgumentError, "axis"),
    (np.array([[0, 1, 2]]), 2, InvalidArgumentError, "indices"),
    (np.array([[0, -1]]), 2, DeviceFault, "indices"),
    (np.array([[3, 0]]), 2, DeviceFault, "indices"),
], ids=["axis 0", "3 columns", "negative", "past the batch"])
def test_inplace_scatter_update_on_the_fake_refuses_what_cann_does(indices, axis, error, needle, ascend_device):
    with pytest.raises(error, match=needle):
        _scatter_update(ascend_device, indices, np.ones((1, 2, 2, 4), np.float32), axis)
