"""MemoryPool: stream-ordered reuse, cross-stream reuse behind an event wait, the OOM ladder."""

from __future__ import annotations

import numpy as np
import pytest

import aclpipe
from aclpipe import ClosedResourceError, DeviceOutOfMemory, HazardError
from aclpipe.runtime import DeviceBuffer, MemoryPool, PoolBuffer
from aclpipe.testing import latch


def read(device, stream, buffer, nbytes):
    host = device.alloc_host(nbytes)
    stream.memcpy(host, buffer, nbytes)
    stream.sync()
    return host.numpy().copy()


@pytest.fixture
def small_device():
    """1 MiB of device memory, sanitizer on: capacity errors are easy to reach."""
    dev = aclpipe.open_device("sim", sanitizer=True, capacity=1 << 20)
    yield dev
    dev.close()


def test_pool_buffer_is_a_device_buffer_usable_by_copies(device):
    stream = device.create_stream()
    pool = MemoryPool(device)
    buffer = pool.allocate(1000, stream)
    assert isinstance(buffer, DeviceBuffer) and isinstance(buffer, PoolBuffer)
    assert buffer.nbytes == 1000 and buffer.stream is stream and buffer.address % 32 == 0
    stream.memset(buffer, 7)
    assert (read(device, stream, buffer, 1000) == 7).all()
    pool.close()


def test_size_classes_round_small_requests_and_bound_large_waste(device):
    pool = MemoryPool(device, round_to=512)
    assert pool.size_class(1) == 512 and pool.size_class(513) == 1024
    for nbytes in (1_100_000, 3_000_000, 50_000_000):
        size = pool.size_class(nbytes)
        assert nbytes <= size <= nbytes * 1.25 + 512 and size % 512 == 0
    pool.close()


def test_same_stream_reuse_is_immediate_and_counts_a_hit(device):
    stream = device.create_stream()
    pool = MemoryPool(device)
    first = pool.allocate(4096, stream)
    stream.memset(first, 1)
    address = first.address
    pool.free(first)
    second = pool.allocate(4000, stream)  # same class: the cached block, no waiting
    assert second.address == address
    stream.memset(second, 2)  # same stream: ordered after the memset of 1, no hazard
    assert (read(device, stream, second, 4000) == 2).all()
    stats = pool.stats()
    assert (stats.hits, stats.misses, stats.cross_stream_reuses) == (1, 1, 0)
    assert stats.in_use == stats.allocated == 4096 and stats.cached == 0
    pool.close()


def test_small_request_does_not_take_a_much_larger_block(device):
    stream = device.create_stream()
    pool = MemoryPool(device)
    pool.free(pool.allocate(64 * 1024, stream))
    small = pool.allocate(512, stream)
    assert pool.stats().misses == 2 and small.nbytes == 512
    pool.close()


def test_cross_stream_reuse_waits_on_the_free_event_under_the_sanitizer(device):
    producer, consumer = device.create_stream(), device.create_stream()
    pool = MemoryPool(device, limit=4096)  # room for exactly one block: reuse is forced
    with latch(producer):
        block = pool.allocate(4096, producer)
        producer.memset(block, 1)
        pool.free(block)  # the memset has not even run yet
        reused = pool.allocate(4096, consumer)
        assert reused.address == block.address
        consumer.memset(reused, 2)  # the sanitizer would raise without the pool's wait
    assert (read(device, consumer, reused, 4096) == 2).all()  # the consumer's write came last
    stats = pool.stats()
    assert stats.cross_stream_reuses == 1 and stats.blocks == 1
    pool.close()


def test_the_same_accesses_without_the_pools_wait_are_a_hazard(device):
    producer, consumer = device.create_stream(), device.create_stream()
    memory = device.alloc(4096)
    with latch(producer):
        producer.memset(memory, 1)
        with pytest.raises(HazardError):
            consumer.memset(memory, 2)
    producer.sync()
    memory.close()


def test_completed_blocks_of_other_streams_are_preferred_to_new_memory(device):
    first, second = device.create_stream(), device.create_stream()
    pool = MemoryPool(device)
    buffer = pool.allocate(2048, first)
    first.memset(buffer, 3)
    pool.free(buffer)
    first.sync()  # the free's event is now complete: reuse costs no stall
    reused = pool.allocate(2048, second)
    assert reused.address == buffer.address and pool.stats().cross_stream_reuses == 1
    second.memset(reused, 4)
    assert (read(device, second, reused, 2048) == 4).all()
    pool.close()


def test_free_on_the_stream_that_used_it_last(device):
    producer, consumer = device.create_stream(), device.create_stream()
    pool = MemoryPool(device)
    buffer = pool.allocate(1024, producer)
    producer.memset(buffer, 5)
    consumer.wait(producer.record())
    target = device.alloc(1024)
    consumer.memcpy(target, buffer)
    pool.free(buffer, consumer)  # last use is on the consumer
    again = pool.allocate(1024, consumer)
    assert again.address == buffer.address and pool.stats().cross_stream_reuses == 0
    consumer.memset(again, 6)
    assert (read(device, consumer, target, 1024) == 5).all()
    pool.close()


def test_double_free_foreign_buffer_and_bad_arguments_are_refused(device):
    stream = device.create_stream()
    pool, other = MemoryPool(device), MemoryPool(device)
    buffer = pool.allocate(100, stream)
    with pytest.raises(ValueError, match="another pool|not allocated by this pool"):
        other.free(buffer)
    pool.free(buffer)
    with pytest.raises(ValueError, match="double free"):
        pool.free(buffer)
    buffer.close()  # close() stays idempotent
    with pytest.raises(ValueError, match="positive"):
        pool.allocate(0, stream)
    with pytest.raises(TypeError):
        pool.allocate(1.5, stream)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Stream"):
        pool.allocate(10, "s0")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="round_to"):
        MemoryPool(device, round_to=100)
    with pytest.raises(ValueError, match="limit"):
        MemoryPool(device, limit=0)
    other.close()
    pool.close()


def test_dropping_a_buffer_returns_it_to_the_pool(device):
    stream = device.create_stream()
    pool = MemoryPool(device)
    buffer = pool.allocate(512, stream)
    address = buffer.address
    del buffer
    assert pool.stats().cached == 512
    assert pool.allocate(512, stream).address == address
    pool.close()


def test_oom_ladder_releases_cached_blocks_and_retries(small_device):
    device = small_device
    stream, other = device.create_stream(), device.create_stream()
    pool = MemoryPool(device)
    cached = [pool.allocate(256 * 1024, other) for _ in range(3)]
    for buffer in cached:
        other.memset(buffer, 1)
        pool.free(buffer)
    big = pool.allocate(900 * 1024, stream)  # needs the cached blocks' memory back
    stream.memset(big, 9)
    assert (read(device, stream, big, 16) == 9).all()
    stats = pool.stats()
    assert stats.oom_recoveries == 1 and stats.cached == 0 and stats.blocks == 1
    pool.close()


def test_oom_ladder_takes_a_cached_block_in_flight_before_releasing_anything(small_device):
    device = small_device
    first, second = device.create_stream(), device.create_stream()
    pool = MemoryPool(device)
    hog = device.alloc(700 * 1024)
    with latch(first):
        block = pool.allocate(200 * 1024, first)
        first.memset(block, 1)
        pool.free(block)  # in flight: not preferred while new memory is available...
        reused = pool.allocate(150 * 1024, second)  # ...but there is none: take it, with a wait
        assert reused.address == block.address
        second.memset(reused, 2)
    assert (read(device, second, reused, 16) == 2).all()
    assert pool.stats().cross_stream_reuses == 1
    hog.close()
    pool.close()


def test_oom_raises_with_requested_in_use_and_limit(small_device):
    stream = small_device.create_stream()
    pool = MemoryPool(small_device, limit=64 * 1024)
    kept = pool.allocate(48 * 1024, stream)
    with pytest.raises(DeviceOutOfMemory) as caught:
        pool.allocate(32 * 1024, stream)
    error = caught.value
    assert isinstance(error, MemoryError)
    assert (error.requested, error.in_use, error.limit) == (32 * 1024, 48 * 1024, 64 * 1024)
    assert "pool" in str(error)
    with pytest.raises(DeviceOutOfMemory) as device_full:
        MemoryPool(small_device).allocate(2 << 20, stream)
    assert device_full.value.limit == 1 << 20
    kept.close()
    pool.close()


def test_an_injected_allocation_failure_is_recovered_by_releasing_the_cache(device):
    stream = device.create_stream()
    pool = MemoryPool(device)
    pool.free(pool.allocate(512, stream))
    device.inject_fault("alloc", "pool block")
    kept = pool.allocate(8192, stream)
    assert pool.stats().oom_recoveries == 1 and pool.stats().cached == 0
    kept.close()
    pool.close()


def test_limit_bounds_the_bytes_the_pool_holds(device):
    stream = device.create_stream()
    pool = MemoryPool(device, limit=8192)
    buffers = [pool.allocate(2048, stream) for _ in range(4)]
    with pytest.raises(DeviceOutOfMemory):
        pool.allocate(2048, stream)
    buffers.pop().close()
    pool.allocate(2048, stream)  # the freed block comes back
    assert pool.stats().peak == 8192
    pool.close()


def test_trim_waits_for_the_device_and_releases_cached_memory(device):
    stream = device.create_stream()
    pool = MemoryPool(device)
    free_before = device.mem_info().free
    with latch(stream) as gate:
        buffer = pool.allocate(64 * 1024, stream)
        stream.memset(buffer, 1)
        pool.free(buffer)
        gate.release()  # trim must wait for the memset before freeing (else: HazardError)
        assert pool.trim() == 64 * 1024
    assert pool.stats().allocated == 0 and device.mem_info().free == free_before
    pool.close()


def test_close_is_idempotent_syncs_and_frees_everything(device):
    stream = device.create_stream()
    pool = MemoryPool(device)
    free_before = device.mem_info().free
    with latch(stream) as gate:
        out = pool.allocate(4096, stream)
        stream.memset(out, 1)
        pool.free(pool.allocate(4096, stream))
        gate.release()
        pool.close()  # waits for the memset on the buffer still in use
    pool.close()
    assert out.closed and pool.closed and device.mem_info().free == free_before
    with pytest.raises(ClosedResourceError):
        pool.allocate(10, stream)
    out.close()  # a buffer of a closed pool closes quietly
    with pytest.raises(ValueError):
        pool.free(out)


def test_pool_works_without_the_sanitizer():
    with aclpipe.open_device("sim", sanitizer=False) as device:
        a, b = device.create_stream(), device.create_stream()
        pool = MemoryPool(device)
        data = np.arange(256, dtype=np.uint8)
        source = device.upload(data)
        buffer = pool.allocate(256, a)
        a.memcpy(buffer, source)
        pool.free(buffer)
        a.sync()
        other = pool.allocate(256, b)
        b.memset(other, 0)
        assert (read(device, b, other, 256) == 0).all()
        pool.close()


def test_threads_sharing_a_pool_under_a_tight_limit_stay_ordered(device):
    import threading

    # Four users hold at most 4 x 3 KiB at once: 16 KiB always suffices after releasing the cache,
    # yet is too little to give each stream its own blocks of every size, so blocks cross streams.
    pool = MemoryPool(device, limit=16 * 1024)
    errors = []

    def worker(seed):
        stream = device.create_stream()
        try:
            for index in range(30):
                buffer = pool.allocate(1024 * (1 + (seed + index) % 3), stream)
                stream.memset(buffer, index)  # the sanitizer checks every reuse
                pool.free(buffer)
            stream.sync()
        except Exception as error:  # noqa: BLE001 (reported below)
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    stats = pool.stats()
    assert stats.in_use == 0 and stats.cached == stats.allocated <= 16 * 1024
    assert stats.hits + stats.misses == 120
    pool.close()
