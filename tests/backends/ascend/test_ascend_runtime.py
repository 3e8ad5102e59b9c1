"""Streams, events, memory and host functions of the ascend backend on the fake CANN.

Every test runs on both builds: host functions through ``aclrtLaunchHostFunc`` and through
the ``aclrtLaunchCallback`` + report-thread fallback.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import anyio
import numpy as np
import pytest

from aclpipe.backends.protocol import MemcpyKind
from aclpipe.errors import (
    BackendError,
    ClosedResourceError,
    DeviceFault,
    DeviceOutOfMemory,
    InvalidArgumentError,
)
from aclpipe.runtime import Device
from aclpipe.runtime.completion.timeline import Timeline
from aclpipe.testing import latch

TIMEOUT = 10.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request):
    return request.param


def test_copies_and_memset_round_trip(any_ascend: Device):
    data = np.arange(1000, dtype=np.float32)
    buffer = any_ascend.upload(data)
    np.testing.assert_array_equal(any_ascend.download(buffer, "float32", (1000,)), data)
    stream = any_ascend.create_stream(priority=3)
    copy = any_ascend.alloc(4000)
    stream.memcpy(copy, buffer)
    stream.memset(copy, 0, 400)
    stream.sync()
    expected = data.copy()
    expected[:100] = 0
    np.testing.assert_array_equal(any_ascend.download(copy, "float32", (1000,)), expected)


def test_events_order_streams_and_report_completion(any_ascend: Device):
    producer, consumer = any_ascend.create_stream(), any_ascend.create_stream()
    source = any_ascend.upload(np.full(64, 7, np.uint8))
    target = any_ascend.alloc(64)
    with latch(producer):
        producer.memset(source, 9)
        ready = producer.record()
        consumer.wait(ready)
        consumer.memcpy(target, source)
        copied = consumer.record()
        assert not ready.is_done and not copied.is_done and not consumer.is_done
    copied.sync(TIMEOUT)
    assert ready.is_done and copied.is_done and consumer.is_done
    assert (any_ascend.download(target, "uint8", (64,)) == 9).all()


def test_event_timing_is_signed_and_needs_timing_events(any_ascend: Device):
    stream = any_ascend.create_stream()
    start = stream.record(timing=True)
    with latch(stream):
        end = stream.record(timing=True)
        threading.Event().wait(0.02)
    end.sync(TIMEOUT)
    elapsed = end - start
    assert elapsed > 0 and start - end == -elapsed
    plain = stream.record()
    plain.sync(TIMEOUT)
    with pytest.raises(InvalidArgumentError, match="TIME_LINE"):
        plain - start


def test_sync_with_a_timeout_raises_507046_and_the_stream_recovers(any_ascend: Device):
    stream = any_ascend.create_stream()
    gate = latch(stream)
    with pytest.raises(DeviceFault) as caught:
        stream.sync(timeout=0.05)
    assert caught.value.code == 507046 and "still queued" in str(caught.value)
    event = stream.record()
    with pytest.raises(DeviceFault):
        event.sync(timeout=0.05)
    gate.release()
    stream.sync(TIMEOUT)


def test_without_the_timeout_apis_timed_waits_poll(ascend: Device, monkeypatch):
    # Older runtimes may lack aclrtSynchronize{Stream,Event}WithTimeout: the backend polls.
    monkeypatch.setattr(ascend.backend.library, "has_stream_sync_timeout", False)
    monkeypatch.setattr(ascend.backend.library, "has_event_sync_timeout", False)
    stream = ascend.create_stream()
    with latch(stream):
        event = stream.record()
        for wait in (stream.sync, event.sync):
            with pytest.raises(DeviceFault, match="did not (finish|complete) within 30 ms"):
                wait(timeout=0.03)
    stream.sync(timeout=TIMEOUT)
    event.sync(timeout=TIMEOUT)


def test_host_functions_run_in_order_off_the_calling_thread(any_ascend: Device):
    stream = any_ascend.create_stream()
    seen: list[tuple[int, int]] = []
    for value in range(5):
        stream.host_func(lambda value=value: seen.append((value, threading.get_ident())))
    stream.sync(TIMEOUT)
    assert [value for value, _ in seen] == list(range(5))
    assert threading.get_ident() not in {thread for _, thread in seen}


def test_a_raising_host_function_fails_its_stream_at_sync(any_ascend: Device):
    stream = any_ascend.create_stream()

    def broken() -> None:
        raise KeyError("boom")

    stream.host_func(broken)
    with pytest.raises(BackendError) as caught:
        stream.sync(TIMEOUT)
    assert caught.value.code == 507000 and "broken" in str(caught.value)
    assert isinstance(caught.value.__cause__, KeyError)
    stream.host_func(broken)
    stream.record().sync(TIMEOUT)
    assert isinstance(stream.take_error(), BackendError) and stream.take_error() is None
    stream.sync(TIMEOUT)


def test_memory_freed_under_a_queued_copy_is_a_sticky_device_error(any_ascend: Device):
    stream = any_ascend.create_stream()
    source, target = any_ascend.alloc(256), any_ascend.alloc(256)
    with latch(stream):
        stream.memcpy(target, source)
        source.free()  # the runtime cannot know the queued copy still needs it
    with pytest.raises(DeviceFault) as caught:
        stream.sync(TIMEOUT)
    assert caught.value.code == 507013 and "aclrtMemcpyAsync failed on the stream" in str(caught.value)  # DMA, not UCE
    stream.memset(target, 1)
    stream.sync(TIMEOUT)  # consumed: later work runs again


def test_memory_errors_carry_codes_and_fields(any_ascend: Device):
    total = any_ascend.backend.mem_info()[1]
    with pytest.raises(DeviceOutOfMemory) as caught:
        any_ascend.alloc(total + 1)
    assert caught.value.requested == total + 1 and caught.value.limit == total
    assert isinstance(caught.value, MemoryError)
    buffer = any_ascend.alloc(1 << 20)
    assert any_ascend.mem_info().used >= 1 << 20
    pinned = any_ascend.alloc_host(64)
    stream = any_ascend.create_stream()
    with pytest.raises(InvalidArgumentError, match="source: .* is device memory, not pinned host memory"):
        any_ascend.backend.memcpy_async(pinned.address, buffer.address, 64, MemcpyKind.HOST_TO_DEVICE, stream.handle)
    buffer.free()
    with pytest.raises(InvalidArgumentError):
        any_ascend.backend.mem_free(buffer.address)


def test_every_thread_can_call_in(any_ascend: Device):
    # CANN's current context is per thread: the backend must set it on each new thread.
    data = np.arange(256, dtype=np.int32)

    def round_trip(index: int) -> bool:
        stream = any_ascend.create_stream()
        buffer = any_ascend.upload(data + index)
        event = stream.record()
        event.sync(TIMEOUT)
        stream.close()
        return bool((any_ascend.download(buffer, "int32", (256,)) == data + index).all())

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(round_trip, range(8)))


def test_an_event_destroyed_while_a_wait_needs_it_is_destroyed_later(any_ascend: Device, any_hooks):
    producer, consumer = any_ascend.create_stream(), any_ascend.create_stream()
    before = any_hooks.live("event")
    with latch(producer):
        event = producer.record()
        consumer.wait(event)
        event.close()  # the fake refuses aclrtDestroyEvent now (507006): the backend retries later
    consumer.sync(TIMEOUT)
    any_ascend.create_event().close()  # creating an event reaps the deferred one
    assert any_hooks.live("event") == before


def test_closed_devices_and_streams_refuse_work(any_fake_lib):
    import aclpipe

    device = aclpipe.open_device("ascend:0")
    stream = device.create_stream()
    stream.close()
    with pytest.raises(ClosedResourceError):
        stream.sync()
    backend = device.backend
    device.close()
    device.close()  # idempotent
    with pytest.raises(ClosedResourceError):
        backend.mem_alloc(64)


@pytest.mark.anyio
async def test_the_c_completion_path_advances_a_timeline(any_ascend: Device):
    # Timeline.enqueue_advance hands aclpipe's compiled C host function to host_func_c.
    stream = any_ascend.create_stream()
    timeline = Timeline(1)
    staging = any_ascend.alloc_host(4 * 64)
    source = any_ascend.upload(np.arange(64, dtype=np.float32))
    woken: list[int] = []

    async def waiter(value: int) -> None:
        await timeline.wait(0, value)
        woken.append(value)

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as group:
            with latch(stream):
                stream.memcpy(staging, source)
                value = timeline.enqueue_advance(any_ascend.backend, stream.handle, 0)
                group.start_soon(waiter, value)
                await anyio.sleep(0.02)  # the waiter is parked: only the pipe can wake it
                assert timeline.value(0) == 0 and not woken
    assert woken == [value]
    np.testing.assert_array_equal(staging.numpy("float32"), np.arange(64, dtype=np.float32))
    later = [timeline.enqueue_advance(any_ascend.backend, stream.handle, 0) for _ in range(10)]
    with anyio.fail_after(TIMEOUT):
        await timeline.wait(0, later[-1])
    assert timeline.value(0) == later[-1] and timeline.wakeups >= 1
    stream.sync(TIMEOUT)
    timeline.close()
