"""The simulator's stream-ordered allocator (aclrtMemPool*): its stream order, what the sanitizer
catches, its 2 MB accounting and TrimTo, and the products without it."""

from __future__ import annotations

import numpy as np
import pytest

import aclpipe
from aclpipe.backends.protocol import MemcpyKind, MemPoolAttr, StreamOrderedAlloc, stream_ordered_alloc
from aclpipe.errors import BackendError, HazardError
from aclpipe.runtime import Device
from aclpipe.runtime.capture import Capture

MB2 = 2 << 20


def _allocator(device: Device) -> StreamOrderedAlloc:
    backend = stream_ordered_alloc(device.backend)
    assert backend is not None
    return backend


def _attr(backend: StreamOrderedAlloc, pool: object, attr: MemPoolAttr) -> int:
    return backend.mem_pool_get_attr(pool, attr)


def test_a_block_is_usable_in_its_streams_order_and_counted_in_two_megabyte_granules(device: Device):
    backend, stream = _allocator(device), device.create_stream()
    pool = backend.mem_pool_create(16 << 20)
    assert backend.mem_pool_malloc_async(pool, 0, stream.handle) == 0
    address = backend.mem_pool_malloc_async(pool, 3 << 20, stream.handle)
    assert _attr(backend, pool, MemPoolAttr.USED_MEM_CURRENT) == 2 * MB2
    host = device.alloc_host(64)
    device.backend.memset_async(address, 5, 64, stream.handle)
    device.backend.memcpy_async(host.address, address, 64, MemcpyKind.DEVICE_TO_HOST, stream.handle)
    backend.mem_pool_free_async(address, stream.handle)
    assert _attr(backend, pool, MemPoolAttr.USED_MEM_CURRENT) == 0
    assert _attr(backend, pool, MemPoolAttr.RESERVED_MEM_CURRENT) == 2 * MB2  # cached until a trim
    stream.sync()
    assert (host.numpy(np.uint8, (64,)) == 5).all()
    backend.mem_pool_trim_to(pool, 0)
    assert _attr(backend, pool, MemPoolAttr.RESERVED_MEM_CURRENT) == 0
    assert _attr(backend, pool, MemPoolAttr.RESERVED_MEM_HIGH) == 2 * MB2
    backend.mem_pool_destroy(pool)
    host.close()


def test_another_stream_needs_an_event_after_the_malloc(device: Device):
    backend = _allocator(device)
    first, second = device.create_stream(), device.create_stream()
    pool = backend.mem_pool_create(MB2)
    address = backend.mem_pool_malloc_async(pool, 256, first.handle)
    with pytest.raises(HazardError, match="not ordered after"):
        device.backend.memset_async(address, 1, 256, second.handle)
    second.wait(first.record())
    device.backend.memset_async(address, 1, 256, second.handle)
    first.wait(second.record())
    backend.mem_pool_free_async(address, first.handle)
    device.sync()
    backend.mem_pool_destroy(pool)


def test_a_free_must_come_after_every_use_on_other_streams(device: Device):
    backend = _allocator(device)
    first, second = device.create_stream(), device.create_stream()
    pool = backend.mem_pool_create(MB2)
    address = backend.mem_pool_malloc_async(pool, 256, first.handle)
    second.wait(first.record())
    device.backend.memset_async(address, 1, 256, second.handle)
    with pytest.raises(HazardError, match="aclrtMemPoolFreeAsync|SomaMemMng"):
        backend.mem_pool_free_async(address, first.handle)  # the memset on `second` may still run
    assert _attr(backend, pool, MemPoolAttr.USED_MEM_CURRENT) == MB2  # refused: still the caller's
    device.sync()
    backend.mem_pool_free_async(address, first.handle)
    first.sync()
    backend.mem_pool_destroy(pool)


def test_work_after_the_free_fails_when_it_runs(device: Device):
    backend, stream = _allocator(device), device.create_stream()
    pool = backend.mem_pool_create(MB2)
    address = backend.mem_pool_malloc_async(pool, 256, stream.handle)
    backend.mem_pool_free_async(address, stream.handle)
    device.backend.memset_async(address, 1, 256, stream.handle)
    with pytest.raises(BackendError, match="freed"):
        stream.sync()
    backend.mem_pool_destroy(pool)


def test_a_trim_waits_for_the_host_to_see_the_frees_run():
    with aclpipe.open_device("sim", sanitizer=True) as device:
        backend, stream = _allocator(device), device.create_stream()
        pool = backend.mem_pool_create(4 << 20)
        held = device.backend.latch(stream.handle)  # type: ignore[attr-defined]
        backend.mem_pool_free_async(backend.mem_pool_malloc_async(pool, 64, stream.handle), stream.handle)
        with pytest.raises(HazardError, match="aclrtMemPoolTrimTo"):
            backend.mem_pool_trim_to(pool, 0)
        held.set()
        stream.sync()
        backend.mem_pool_trim_to(pool, 0)
        assert _attr(backend, pool, MemPoolAttr.RESERVED_MEM_CURRENT) == 0
    with aclpipe.open_device("sim", sanitizer=False) as device:  # no sanitizer: the pending block stays
        backend, stream = _allocator(device), device.create_stream()
        pool = backend.mem_pool_create(4 << 20)
        held = device.backend.latch(stream.handle)  # type: ignore[attr-defined]
        backend.mem_pool_free_async(backend.mem_pool_malloc_async(pool, 64, stream.handle), stream.handle)
        backend.mem_pool_trim_to(pool, 0)
        assert _attr(backend, pool, MemPoolAttr.RESERVED_MEM_CURRENT) == MB2
        held.set()
        stream.sync()


def test_the_runtimes_refusals(device: Device):
    backend, stream = _allocator(device), device.create_stream()
    pool = backend.mem_pool_create(MB2)
    address = backend.mem_pool_malloc_async(pool, 64, stream.handle)
    refusals = {
        507000: [lambda: backend.mem_pool_malloc_async(pool, 64, stream.handle),  # full until a trim
                 lambda: backend.mem_pool_trim_to(pool, 0),  # below the bytes in use
                 lambda: backend.mem_pool_trim_to(pool, 2 * MB2)],  # above the pool's size
        107000: [lambda: backend.mem_pool_free_async(address + 64, stream.handle),  # not a block
                 lambda: backend.mem_pool_create(device.mem_info().total + MB2)],
    }
    for code, calls in refusals.items():
        for call in calls:
            with pytest.raises(BackendError) as refused:
                call()
            assert refused.value.code == code
    backend.mem_pool_free_async(address, stream.handle)
    with pytest.raises(BackendError) as twice:
        backend.mem_pool_free_async(address, stream.handle)
    assert twice.value.code == 107000
    stream.sync()
    backend.mem_pool_destroy(pool)
    with pytest.raises(BackendError) as destroyed:
        backend.mem_pool_malloc_async(pool, 64, stream.handle)
    assert destroyed.value.code == 507000


def test_not_inside_a_host_function_nor_a_capture(device: Device):
    backend, stream = _allocator(device), device.create_stream()
    pool = backend.mem_pool_create(MB2)
    seen: list[BaseException] = []

    def inside() -> None:
        try:
            backend.mem_pool_malloc_async(pool, 64, stream.handle)
        except HazardError as error:
            seen.append(error)

    stream.host_func(inside)
    stream.sync()
    assert seen and "host function" in str(seen[0])
    with pytest.raises(BackendError) as captured, Capture(stream):
        backend.mem_pool_malloc_async(pool, 64, stream.handle)
    assert captured.value.code == 207000
    backend.mem_pool_destroy(pool)


@pytest.mark.parametrize("spec", ["atlas-310p", "atlas-200i-a2"])
def test_products_without_it_refuse_with_207000(spec: str):
    with aclpipe.open_device("sim", spec=spec) as device:
        assert not device.capabilities.stream_ordered_alloc and stream_ordered_alloc(device.backend) is None
        with pytest.raises(BackendError) as refused:
            device.backend.mem_pool_create(0)  # type: ignore[attr-defined]
        assert refused.value.code == 207000


def test_freeing_an_aclrtmalloc_address_frees_it_in_the_streams_order(device: Device):
    backend, stream = _allocator(device), device.create_stream()
    address = device.backend.mem_alloc(64)
    device.backend.memset_async(address, 1, 64, stream.handle)
    backend.mem_pool_free_async(address, stream.handle)  # ApiImplSoma: a host function frees it
    stream.sync()
    with pytest.raises(BackendError) as freed:
        device.backend.mem_free(address)
    assert freed.value.code == 207002
