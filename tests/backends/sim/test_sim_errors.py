"""Sticky stream errors by generation, and their propagation through events."""

from __future__ import annotations

import pytest
from sim_kernels import kernel

from aclpipe import DeviceFault
from aclpipe.backends.sim.engines import Cost
from aclpipe.testing import latch


def test_an_error_is_reported_once_at_sync_with_the_failing_task(device):
    stream, ran = device.create_stream(), []
    device.inject_fault("kernel", "bad")
    kernel(device, stream, "bad", ran, node="n7")
    with pytest.raises(DeviceFault) as caught:
        stream.sync()
    error = caught.value
    assert error.code == 507015 and error.context["node"] == "n7" and error.context["stream"] == stream.name
    assert "n7" in str(error)
    stream.sync()  # consumed


def test_tasks_enqueued_before_consuming_are_skipped_tasks_after_run(device):
    stream, ran = device.create_stream(), []
    device.inject_fault("kernel", "k1")
    kernel(device, stream, "k1", ran)
    probe = stream.record()
    with latch(stream):
        kernel(device, stream, "k2", ran)  # same generation: enqueued before the error is consumed
        with pytest.raises(DeviceFault):
            probe.sync(timeout=10)  # the event carries the error; the stream still holds it
        assert isinstance(stream.take_error(), DeviceFault)  # consumed: a new generation starts
        kernel(device, stream, "k3", ran)
    stream.sync()
    assert ran == ["k3"]


def test_a_waiting_stream_inherits_the_producers_error(device):
    producer, consumer, ran = device.create_stream(), device.create_stream(), []
    device.inject_fault("kernel", "producer-kernel")
    kernel(device, producer, "producer-kernel", ran)
    consumer.wait(producer.record())
    kernel(device, consumer, "consumer-kernel", ran)
    with pytest.raises(DeviceFault, match="producer-kernel"):
        consumer.sync()
    with pytest.raises(DeviceFault):
        producer.sync()
    assert ran == []


def test_the_error_reaches_a_waiter_even_if_the_producer_consumed_it_first(device):
    producer, consumer, ran = device.create_stream(), device.create_stream(), []
    device.inject_fault("kernel", "early")
    kernel(device, producer, "early", ran)
    probe = producer.record()
    with latch(producer):
        event = producer.record()  # same failed generation, not yet reached
        with pytest.raises(DeviceFault):
            probe.sync(timeout=10)
        assert producer.take_error() is not None
        consumer.wait(event)
        kernel(device, consumer, "late", ran)
    with pytest.raises(DeviceFault, match="early"):
        consumer.sync()
    assert ran == []


def test_errors_of_one_stream_do_not_touch_another(device):
    broken, healthy, ran = device.create_stream(), device.create_stream(), []
    device.inject_fault("kernel", "bad")
    kernel(device, broken, "bad", ran)
    kernel(device, healthy, "good", ran)
    healthy.sync()
    with pytest.raises(DeviceFault):
        broken.sync()
    assert ran == ["good"]


def test_a_kernel_that_raises_becomes_an_ai_core_exception(device):
    stream = device.create_stream()

    def crash():
        raise ZeroDivisionError("boom")

    device.backend.launch_kernel(stream.handle, "crash", crash, cost=Cost())
    with pytest.raises(DeviceFault, match="ZeroDivisionError") as caught:
        stream.sync()
    assert caught.value.code == 507015
