"""Simulated events: a record captures the position at the call, waits keep their generation."""

from __future__ import annotations

import itertools

import pytest

import aclpipe
from aclpipe import BackendError, InvalidArgumentError
from aclpipe.testing import latch


def test_record_captures_the_position_at_call_time(device):
    stream = device.create_stream()
    first = latch(stream)
    event = stream.record()
    with latch(stream):  # work enqueued after the record must not delay it
        first.release()
        event.sync(timeout=10)
        assert not stream.is_done


def test_a_wait_keeps_the_generation_it_saw(device):
    producer, waiter, idle = (device.create_stream() for _ in range(3))
    with latch(producer):
        event = producer.record()
        waiter.wait(event)
        waiter_done = waiter.record()
        idle.record(event)  # the newest record completes at once...
        event.sync(timeout=10)
        assert event.is_done
        assert not waiter_done.is_done  # ...but the earlier wait still waits for the producer
    waiter.sync(timeout=10)


def test_waiting_on_a_never_recorded_event_is_an_invalid_value(device):
    """docs/zh/design/modules/event/event.md 4.2: a wait on an unrecorded event is refused."""
    stream = device.create_stream()
    with pytest.raises(InvalidArgumentError, match="never recorded") as caught:
        stream.wait(device.create_event())
    assert caught.value.code == 107000
    assert device.create_event().is_done  # a query of one says complete (07_event_management.md)


def test_a_reusable_event_is_recorded_again_without_a_reset(device):
    """07: events from aclrtCreateEventExWithFlag are reused by recording them again."""
    first, second = device.create_stream(), device.create_stream()
    event = device.create_event()
    assert event.reusable
    for _ in range(3):
        first.record(event)
        second.wait(event)
    second.sync()
    with pytest.raises(InvalidArgumentError, match="reusable"):
        event.reset(second)  # aclrtResetEvent refuses ExWithFlag events


def test_a_single_use_event_needs_a_reset_before_it_is_recorded_again(device):
    """07: events from aclrtCreateEventWithFlag follow record, wait, aclrtResetEvent."""
    producer, consumer = device.create_stream(), device.create_stream()
    event = device.create_event(reusable=False)
    producer.record(event)
    consumer.wait(event)
    with pytest.raises(InvalidArgumentError, match="single-use"):
        producer.record(event)
    event.reset(consumer)
    with pytest.raises(InvalidArgumentError, match="never recorded"):
        consumer.wait(event)  # back to its initial state
    producer.record(event)
    consumer.wait(event)
    consumer.sync()


def test_events_are_limited_per_device_by_the_product():
    """07: 65536 events per device on Atlas A2, 1023 on Atlas inference cards."""
    with aclpipe.open_device("sim", spec="atlas-310p", sanitizer=False) as device:
        assert device.capabilities.max_events == 1023
        events = [device.create_event() for _ in range(1023)]
        with pytest.raises(BackendError) as caught:
            device.create_event()
        assert caught.value.code == 207007 and "1023" in str(caught.value)
        events.pop().close()
        device.create_event()  # one was freed
    with aclpipe.open_device("sim", sanitizer=False) as device:
        assert device.capabilities.max_events == 65536


def test_a_completed_event_releases_a_later_wait_at_once(device):
    producer, consumer = device.create_stream(), device.create_stream()
    event = producer.record()
    event.sync()
    consumer.wait(event)
    consumer.sync(timeout=10)


def test_timestamps_are_ordered_along_a_stream(device):
    stream = device.create_stream()
    events = [stream.record(timing=True) for _ in range(5)]
    events[-1].sync()
    gaps = [later - earlier for earlier, later in itertools.pairwise(events)]
    assert all(gap >= 0 for gap in gaps)


def test_an_event_recorded_last_implies_its_stream_is_done(device):
    # Whoever sees the event complete must see the stream past it (a race the fake CANN had too).
    stream = device.create_stream()
    buffer = device.alloc(64)
    for _ in range(300):
        stream.memset(buffer, 1)
        event = stream.record()
        event.sync(5)
        assert stream.is_done


def test_a_sync_of_a_passed_record_answers_at_once_and_still_checks_the_event(device):
    """The usual sync (a run's done event, after its completion host function ran) takes a
    short path; what it refuses, and what a failed record reports, stay as on the long one."""
    from aclpipe.errors import ClosedResourceError

    backend, stream = device.backend, device.create_stream()
    event = device.create_event()
    gate = latch(stream)
    stream.record(event)
    assert event.handle.outcome(event.handle.generation) == (False, None)
    with pytest.raises(BackendError) as caught:
        event.sync(timeout=0)  # pending: a poll (a query) that finds it not done
    assert caught.value.code == 507047
    gate.release()
    event.sync(timeout=10)
    assert event.handle.outcome(event.handle.generation) == (True, None)
    backend.event_sync(event.handle, -1)  # passed: no wait, no error
    with pytest.raises(InvalidArgumentError) as caught:
        backend.event_sync(object(), -1)
    assert caught.value.code == 107017
    event.close()
    with pytest.raises(ClosedResourceError):
        backend.event_sync(event.handle, -1)
