"""Cache slots: taken and given back, the past read padded, new positions appended in place."""

from __future__ import annotations

import numpy as np
import pytest

from aclpipe.decode import KVLayout
from aclpipe.decode.buckets import bucket_for, check_buckets
from aclpipe.decode.cache import KVCache

LAYOUT = KVLayout(layers=1, heads=2, head_dim=3, position_ids=False)


def test_append_then_read_the_past_padded_to_a_bucket():
    cache = KVCache(LAYOUT, max_batch=3, max_len=8)
    first, second = cache.acquire(), cache.acquire()
    new = {name: np.arange(2 * 2 * 5 * 3, dtype=np.float32).reshape(2, 2, 5, 3) for name, _ in LAYOUT.pairs()}
    cache.append([first, second], new, counts=[5, 2])
    assert list(cache.lengths[[first, second]]) == [5, 2]
    past = cache.past([second, first], past_len=6, rows=4)["past_key_values.0.key"]
    assert past.shape == (4, 2, 6, 3)
    np.testing.assert_array_equal(past[1, :, :5], new["past_key_values.0.key"][0])
    np.testing.assert_array_equal(past[0, :, :2], new["past_key_values.0.key"][1, :, :2])
    assert not past[2:].any()


def test_a_decode_step_appends_one_position_to_each_slot():
    cache = KVCache(LAYOUT, max_batch=3, max_len=8)
    slots = [cache.acquire() for _ in range(3)]
    cache.append(slots, {name: np.zeros((3, 2, 2, 3), np.float32) for name, _ in LAYOUT.pairs()}, counts=[2, 1, 2])
    step = np.arange(4 * 2 * 1 * 3, dtype=np.float32).reshape(4, 2, 1, 3) + 1  # a padded row last
    cache.append([slots[2], slots[0]], {name: step for name, _ in LAYOUT.pairs()}, counts=[1, 1])
    assert list(cache.lengths[slots]) == [3, 1, 3]
    past = cache.past(slots, past_len=3, rows=3)["past_key_values.0.value"]
    np.testing.assert_array_equal(past[2, :, 2], step[0, :, 0])
    np.testing.assert_array_equal(past[0, :, 2], step[1, :, 0])
    assert not past[1].any()


def test_slots_come_back_and_are_refused_twice():
    cache = KVCache(LAYOUT, max_batch=2, max_len=4)
    slot = cache.acquire()
    cache.release(slot)
    assert cache.free == 2
    with pytest.raises(RuntimeError, match="twice"):
        cache.release(slot)


def test_buckets():
    assert check_buckets("b", None, 40, 16) == [16, 32, 40]
    assert check_buckets("b", [8, 4], 16, 1) == [4, 8, 16]
    with pytest.raises(ValueError, match="past the decoder's 16"):
        check_buckets("b", [32], 16, 1)
    assert [bucket_for(n, [4, 8, 16]) for n in (0, 1, 4, 5, 16)] == [0, 4, 4, 8, 16]
