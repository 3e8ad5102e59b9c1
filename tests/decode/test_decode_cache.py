"""Cache slots on the device: taken lowest first, given back once, the rows a step runs."""

from __future__ import annotations

import numpy as np
import pytest

from aclpipe.decode import KVLayout
from aclpipe.decode.buckets import bucket_for, check_buckets
from aclpipe.decode.cache import KVCache

LAYOUT = KVLayout(layers=1, heads=2, head_dim=3, position_ids=False)


def test_one_zeroed_device_buffer_per_cache_input_with_a_spare_position_and_a_scratch_slot(device):
    cache = KVCache(LAYOUT, max_batch=3, max_len=8, device=device)
    try:
        assert set(cache.buffers) == {"past_key_values.0.key", "past_key_values.0.value"}
        # max_len + 1 positions, in whole 16-position blocks (every slot 64-byte aligned), and
        # after the 3 sequences' slots the scratch slot that rows without a write write to
        assert cache.shape == (4, 2, 16, 3) and cache.nbytes == 2 * 4 * 2 * 16 * 3 * 4
        assert cache.scratch_slot == 3
        whole = device.download(cache.buffers["past_key_values.0.key"], "float32", cache.shape)
        assert not whole.any()
    finally:
        cache.close()


def test_slots_are_taken_lowest_first_and_the_rows_in_use_follow(device):
    cache = KVCache(LAYOUT, max_batch=4, max_len=8, device=device)
    try:
        slots = [cache.acquire() for _ in range(3)]
        assert slots == [0, 1, 2] and cache.rows_in_use == 3
        cache.release(0)
        assert cache.rows_in_use == 3  # slot 2 still runs: rows 0..2, row 0 padded
        assert cache.acquire() == 0
        cache.release(2)
        assert cache.rows_in_use == 2
        cache.release(0)
        cache.release(1)
        assert cache.rows_in_use == 0 and cache.free == 4
    finally:
        cache.close()


def test_slots_come_back_and_are_refused_twice(device):
    cache = KVCache(LAYOUT, max_batch=2, max_len=4, device=device)
    try:
        slot = cache.acquire()
        cache.lengths[slot] = 3
        cache.release(slot)
        assert cache.free == 2
        with pytest.raises(RuntimeError, match="twice"):
            cache.release(slot)
        assert cache.lengths[cache.acquire()] == 0  # emptied when taken again
    finally:
        cache.close()


def test_buckets():
    assert check_buckets("b", None, 40, 16) == [16, 32, 40]
    assert check_buckets("b", [8, 4], 16, 1) == [4, 8, 16]
    with pytest.raises(ValueError, match="past the decoder's 16"):
        check_buckets("b", [32], 16, 1)
    assert [bucket_for(n, [4, 8, 16]) for n in (0, 1, 4, 5, 16)] == [0, 4, 4, 8, 16]




def test_a_sequence_moves_down_to_the_lowest_free_slot_with_its_cache(device):
    cache = KVCache(LAYOUT, max_batch=4, max_len=15, device=device)
    try:
        for _ in range(4):
            cache.acquire()
        pattern = np.arange(5 * 2 * 16 * 3, dtype=np.float32).reshape(5, 2, 16, 3)
        source = device.upload(pattern)
        for buffer in cache.buffers.values():
            device.copy(buffer, source, pattern.nbytes)
        source.close()
        cache.lengths[3] = 7
        cache.release(1)
        cache.release(0)
        assert cache.move(3) == 0 and cache.lengths[0] == 7
        assert cache.rows_in_use == 3 and cache.free == 2  # slots 1 and 3
        moved = device.download(cache.buffers["past_key_values.0.value"], "float32", (5, 2, 16, 3))
        np.testing.assert_array_equal(moved[0], pattern[3])
        np.testing.assert_array_equal(moved[2], pattern[2])
        np.testing.assert_array_equal(moved[4], pattern[4])  # the scratch slot is no sequence's
        with pytest.raises(RuntimeError, match="no free cache slot below 1"):
            cache.move(1)
    finally:
        cache.close()
