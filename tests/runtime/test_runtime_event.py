"""Event: query, sync, elapsed time, re-recording, close."""

from __future__ import annotations

import gc

import pytest

from aclpipe import BackendError, ClosedResourceError, DeviceFault
from aclpipe.testing import latch


def test_a_never_recorded_event_is_done(device):
    assert device.create_event().is_done


def test_is_done_follows_the_stream(device):
    stream = device.create_stream()
    with latch(stream):
        event = stream.record()
        assert not event.is_done
    event.sync()
    assert event.is_done


def test_sync_timeout_raises_device_fault(device):
    stream = device.create_stream()
    with latch(stream):
        event = stream.record()
        with pytest.raises(DeviceFault) as caught:
            event.sync(timeout=0.05)
    assert caught.value.code == 507047
    event.sync()


def test_record_reuses_the_event_given(device):
    stream = device.create_stream()
    event = device.create_event()
    assert stream.record(event) is event
    event.sync()


def test_elapsed_milliseconds_between_timing_events(device):
    stream = device.create_stream()
    start = stream.record(timing=True)
    buffer = device.alloc(1 << 16)
    stream.memset(buffer, 0)
    end = stream.record(timing=True)
    end.sync()
    assert (end - start) >= 0 and end.elapsed_ms(start) == end - start


def test_elapsed_needs_timing_events_and_completion(device):
    stream = device.create_stream()
    start, plain = stream.record(timing=True), stream.record()
    plain.sync()
    with pytest.raises(BackendError, match="without timing"):
        plain - start
    with latch(stream):
        end = stream.record(timing=True)
        with pytest.raises(BackendError, match="not completed"):
            end - start
    with pytest.raises(BackendError, match="never recorded"):
        device.create_event(timing=True) - start
    with pytest.raises(TypeError):
        start - 1.0  # type: ignore[operator]


def test_close_refuses_later_use(device):
    event = device.create_stream().record()
    event.sync()
    event.close()
    event.close()
    with pytest.raises(ClosedResourceError):
        event.sync()


# -- the two kinds (07_event_management.md) ----------------------------------------------------------
def test_events_are_reusable_by_default_and_single_use_on_request(device):
    first, second = device.create_stream(), device.create_stream()
    reusable, single = device.create_event(), device.create_event(reusable=False)
    assert reusable.reusable and not single.reusable
    for _ in range(2):
        first.record(reusable)
        second.wait(reusable)
    first.record(single)
    second.wait(single)
    with pytest.raises(BackendError, match="single-use"):
        first.record(single)
    single.reset(second)
    first.record(single)
    second.sync()
    with pytest.raises(BackendError, match="reusable"):
        reusable.reset(second)


def test_waiting_on_an_event_never_recorded_is_refused(device):
    with pytest.raises(BackendError, match="never recorded"):
        device.create_stream().wait(device.create_event())


def test_the_device_counts_its_live_events(device):
    before = device.live_events
    events = [device.create_event() for _ in range(3)]
    assert device.live_events == before + 3
    events[0].close()
    events[0].close()  # idempotent: counted once
    assert device.live_events == before + 2
    del events
    gc.collect()
    assert device.live_events == before


def test_timeouts_round_up_to_whole_milliseconds_never_zero():
    from aclpipe.runtime.event import is_poll, timeout_ms

    assert timeout_ms(None) == -1
    assert [timeout_ms(seconds) for seconds in (1e-6, 1e-3, 0.0015, 2)] == [1, 1, 2, 2000]
    assert timeout_ms(0) == 1  # a device sync's shortest wait; streams and events poll instead
    assert is_poll(0) and is_poll(-1) and not is_poll(None) and not is_poll(1e-6)


def test_a_zero_timeout_polls_with_a_query(device):
    stream = device.create_stream()
    with latch(stream):
        event = stream.record()
        with pytest.raises(DeviceFault) as caught:
            event.sync(timeout=0)
        assert caught.value.code == 507047
        with pytest.raises(DeviceFault) as caught:
            stream.sync(timeout=0)
        assert caught.value.code == 507046
    event.sync(timeout=1e-4 + 10)
    event.sync(timeout=0)
    stream.sync(timeout=0)
