"""Simulated events: a record captures the position at the call, waits keep their generation."""

from __future__ import annotations

import itertools

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


def test_waiting_on_a_never_recorded_event_does_not_block(device):
    stream = device.create_stream()
    stream.wait(device.create_event())
    stream.sync(timeout=10)


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
