"""Stream: copies in every direction, memset, record/wait, host functions, sync and errors."""

from __future__ import annotations

import numpy as np
import pytest

import aclpipe
from aclpipe import BackendError, ClosedResourceError, DeviceFault
from aclpipe.testing import latch


def test_memcpy_direction_follows_the_buffer_kinds(device):
    stream = device.create_stream()
    source, back = device.alloc_host(64), device.alloc_host(64)
    source.numpy()[...] = np.arange(64)
    first, second = device.alloc(64), device.alloc(64)
    stream.memcpy(first, source)  # H2D
    stream.memcpy(second, first)  # D2D
    stream.memcpy(back, second)  # D2H
    stream.sync()
    assert (back.numpy() == np.arange(64)).all()
    with pytest.raises(BackendError) as caught:  # H2H: not asynchronous on Atlas A2 (11-03)
        stream.memcpy(back, source, 8, dst_offset=56)
    assert caught.value.code == 207000


def test_memcpy_offsets_and_default_size(device):
    stream = device.create_stream()
    data = device.upload(np.arange(72, dtype=np.uint8))
    small = device.alloc(8)
    stream.memcpy(small, data, src_offset=64)  # nbytes defaults to the whole of both; D2D offsets 64-byte aligned
    stream.sync()
    assert list(device.download(small, "uint8", (8,))) == list(range(64, 72))


def test_memcpy_and_memset_refuse_bad_arguments_before_the_device(device):
    stream = device.create_stream()
    buffer = device.alloc(64)
    with pytest.raises(TypeError, match="pinned HostBuffer"):
        stream.memcpy(buffer, np.zeros(64, np.uint8))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="overruns"):
        stream.memcpy(buffer, device.alloc(64), 65)
    with pytest.raises(ValueError, match="overruns"):
        stream.memcpy(buffer, device.alloc(64), 8, dst_offset=60)
    with pytest.raises(ValueError, match="overruns"):
        stream.memset(buffer, 0, 8, offset=60)
    # Without nbytes both buffers are copied whole: a smaller or larger one is refused, not cut short.
    with pytest.raises(ValueError, match="dst has 16 bytes from offset 0 and src 64 .*pass nbytes="):
        stream.memcpy(device.alloc_host(16), buffer)
    with pytest.raises(ValueError, match="dst has 64 bytes from offset 0 and src 32 from offset 32"):
        stream.memcpy(buffer, device.alloc(64), src_offset=32)
    with pytest.raises(TypeError):
        stream.memset(device.alloc_host(8), 0)  # type: ignore[arg-type]


def test_copy_from_a_freed_buffer_is_refused(device):
    stream = device.create_stream()
    gone, target = device.alloc(64), device.alloc(64)
    gone.close()
    with pytest.raises(ClosedResourceError):
        stream.memcpy(target, gone)


def test_memset_writes_the_low_byte(device):
    stream = device.create_stream()
    buffer = device.alloc(16)
    stream.memset(buffer, 0x1FF)
    stream.memset(buffer, 3, 4, offset=4)
    stream.sync()
    assert list(device.download(buffer, "uint8", (8,))) == [255] * 4 + [3] * 4


def test_wait_on_a_stream_orders_after_everything_enqueued_there(device):
    producer, consumer = device.create_stream(), device.create_stream()
    data, copy = device.alloc(64), device.alloc(64)
    with latch(producer):
        producer.memset(data, 9)
        consumer.wait(producer)  # a Stream: waits for its current end
        consumer.memcpy(copy, data)
        assert not consumer.record().is_done
    consumer.sync()
    assert (device.download(copy, "uint8", (64,)) == 9).all()


def test_wait_refuses_other_types(device):
    with pytest.raises(TypeError, match="Event or a Stream"):
        device.create_stream().wait("s0")  # type: ignore[arg-type]


def test_host_func_runs_and_refuses_non_callables(device):
    stream, ran = device.create_stream(), []
    stream.host_func(lambda: ran.append(1))
    stream.sync()
    assert ran == [1]
    with pytest.raises(TypeError, match="callable"):
        stream.host_func(42)  # type: ignore[arg-type]


def test_is_done_and_sync_consumes_the_error(device):
    stream = device.create_stream()
    with latch(stream):
        assert not stream.is_done
    stream.sync()
    assert stream.is_done
    device.inject_fault("copy")
    buffer = device.alloc(8)
    stream.memset(buffer, 0)
    with pytest.raises(DeviceFault):
        stream.sync()
    assert stream.take_error() is None


def test_take_error_returns_and_clears(device):
    stream = device.create_stream()
    device.inject_fault("copy")
    buffer = device.alloc(8)
    stream.memset(buffer, 0)
    with pytest.raises(DeviceFault):
        stream.record().sync()  # the event carries the error; the stream keeps its copy
    error = stream.take_error()
    assert isinstance(error, DeviceFault) and stream.take_error() is None
    stream.sync()


def test_has_error_keeps_the_error_for_take_error(device):
    stream = device.create_stream()
    assert not stream.has_error()  # nothing failed: no error, nothing kept
    buffer = device.alloc(8)
    device.inject_fault("copy")
    stream.memset(buffer, 0)
    with pytest.raises(DeviceFault):
        stream.record().sync()  # the copy has run; the stream keeps its sticky error
    assert stream.has_error() and stream.has_error()  # asking again neither loses nor repeats it
    assert isinstance(stream.take_error(), DeviceFault)
    assert not stream.has_error() and stream.take_error() is None


def test_an_error_has_error_took_is_still_raised_once_by_sync(device):
    stream = device.create_stream()
    buffer = device.alloc(8)
    device.inject_fault("copy")
    stream.memset(buffer, 0)
    with pytest.raises(DeviceFault):
        stream.record().sync()
    assert stream.has_error()
    with pytest.raises(DeviceFault):
        stream.sync()
    stream.sync()
    assert not stream.has_error()


def test_has_error_sees_the_error_of_a_renewed_streams_old_handle(device):
    stream = device.create_stream()
    buffer = device.alloc(64)
    device.inject_fault("copy", skip=1)
    with latch(stream):
        stream.memset(buffer, 1)
        stream.memset(buffer, 2)  # fails, on the old device stream
        stream.renew()
        stream.memset(buffer, 3)
    with pytest.raises(DeviceFault):
        stream.record().sync()  # behind the old stream's end, whose failure the record carries too
    assert stream.has_error()  # taken from the old handle, which renew() retired
    assert isinstance(stream.take_error(), DeviceFault) and not stream.has_error()
    assert (device.download(buffer, "uint8", (64,)) == 3).all()


def test_has_error_refuses_a_closed_stream(device):
    stream = device.create_stream()
    stream.close()
    with pytest.raises(ClosedResourceError):
        stream.has_error()


def test_priority_and_close(device):
    stream = device.create_stream(priority=3)
    assert stream.priority == 3 and stream.name in repr(stream)
    with pytest.raises(ValueError):
        device.create_stream(priority=9)
    stream.close()
    stream.close()
    with pytest.raises(ClosedResourceError):
        stream.sync()


# -- failure modes (06_stream_management.md) --------------------------------------------------------
def test_streams_continue_on_failure_unless_asked_to_stop(device):
    plain = device.create_stream()
    assert plain.failure_mode == "continue" and device.failure_mode == "continue"
    with pytest.raises(ValueError, match="'continue' or 'stop'"):
        device.create_stream(failure_mode="halt")
    stopping = device.create_stream(failure_mode="stop")
    assert stopping.failure_mode == "stop"
    assert plain.failure_mode == device.failure_mode == "stop"  # CANN applies it to the whole context


def test_a_stopped_stream_is_renewed_and_reports_errors_of_the_old_one(device):
    stream = device.create_stream(failure_mode="stop")
    buffer = device.alloc(64)
    device.inject_fault("copy")
    with latch(stream):
        stream.memset(buffer, 1)
        stream.memset(buffer, 2)  # dropped when the stream stops
    with pytest.raises(DeviceFault):
        stream.sync()
    with pytest.raises(DeviceFault, match="stopped after a failure"):
        stream.memset(buffer, 3)
    old = stream.handle
    stream.renew()
    assert stream.handle is not old and stream.renewals == 1 and stream.failure_mode == "stop"
    stream.memset(buffer, 4)
    stream.sync()
    assert (device.download(buffer, "uint8", (64,)) == 4).all()


def test_renew_keeps_completion_order_and_collects_late_errors_of_the_old_stream(device):
    stream, other = device.create_stream(), device.create_stream()
    buffer = device.alloc(64)
    device.inject_fault("copy", skip=1)
    with latch(stream):
        stream.memset(buffer, 1)
        stream.memset(buffer, 2)  # fails, after the renewal
        stream.renew()  # the fresh stream starts once the old one has passed both
        stream.memset(buffer, 3)
        done = stream.record()
        other.wait(done)
        assert not done.is_done
    other.sync()
    with pytest.raises(DeviceFault):
        stream.sync()  # the old stream's error is reported by the stream object
    stream.sync()
    assert (device.download(buffer, "uint8", (64,)) == 3).all()


def test_abort_needs_a_product_that_has_it(device):
    stream = device.create_stream()
    stream.abort()  # nothing queued: a no-op on Atlas A2
    with aclpipe.open_device("sim", spec="atlas-310p") as card:
        with pytest.raises(BackendError, match="cannot abort streams"):
            card.create_stream().abort()
