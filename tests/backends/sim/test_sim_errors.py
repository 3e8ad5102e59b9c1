"""Stream failures as aclrtSetStreamFailureMode documents them: continue (default) and stop,
aclrtStreamAbort, and how errors reach event waiters."""

from __future__ import annotations

import numpy as np
import pytest
from sim_kernels import kernel

import aclpipe
from aclpipe import BackendError, DeviceFault
from aclpipe.backends.sim.engines import Cost
from aclpipe.errors import error_from_code
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


def test_continue_on_failure_runs_later_tasks_on_the_garbage_left_behind(device):
    stream = device.create_stream()
    assert stream.failure_mode == "continue"
    source = device.upload(np.full(16, 3, np.float32))
    target = device.upload(np.zeros(16, np.float32))
    back = device.alloc_host(64)
    device.inject_fault("copy", "d2d")
    device.backend.memcpy_async(target.address, source.address, 64, aclpipe.backends.protocol.MemcpyKind(3),
                                stream.handle, {"node": "d2d"})
    stream.memcpy(back, target)  # runs: continue-on-failure
    with pytest.raises(DeviceFault, match="d2d"):
        stream.sync()
    assert np.isnan(back.numpy("float32")).all()  # the failed copy's destination is garbage
    stream.memcpy(back, source)
    stream.sync()  # the stream goes on: later work runs normally
    assert (back.numpy("float32") == 3).all()


def test_stop_on_failure_drops_queued_tasks_and_refuses_new_ones(device):
    stream, ran = device.create_stream(failure_mode="stop"), []
    assert stream.failure_mode == "stop"
    device.inject_fault("kernel", "k1")
    with latch(stream):
        kernel(device, stream, "k1", ran)
        kernel(device, stream, "k2", ran)
    with pytest.raises(DeviceFault, match="k1"):
        stream.sync()
    assert ran == []
    with pytest.raises(DeviceFault, match="stopped after a failure"):
        kernel(device, stream, "k3", ran)
    stream.renew()  # a fresh device stream under the same object takes new work
    kernel(device, stream, "k4", ran)
    stream.sync()
    assert ran == ["k4"]


def test_stop_on_failure_applies_to_every_stream_of_the_device(device):
    plain = device.create_stream()
    assert plain.failure_mode == device.failure_mode == "continue"
    device.create_stream(failure_mode="stop")
    assert plain.failure_mode == device.failure_mode == "stop"  # 06_stream_management.md: the whole context
    ran = []
    device.inject_fault("kernel", "first")
    kernel(device, plain, "first", ran)
    with pytest.raises(DeviceFault):
        plain.sync()
    with pytest.raises(DeviceFault, match="stopped"):
        kernel(device, plain, "second", ran)


def test_the_failure_mode_is_set_once_per_stream(device):
    stream = device.create_stream()
    device.backend.stream_set_failure_mode(stream.handle, 1)
    with pytest.raises(BackendError, match="once per stream"):
        device.backend.stream_set_failure_mode(stream.handle, 0)


def test_a_stopped_streams_waiters_block_until_aborted(device):
    producer, consumer, ran = device.create_stream(failure_mode="stop"), device.create_stream(), []
    device.inject_fault("kernel", "producer-kernel")
    with latch(producer):
        kernel(device, producer, "producer-kernel", ran)
        consumer.wait(producer.record())  # the record is dropped when the producer stops
        kernel(device, consumer, "consumer-kernel", ran)
    with pytest.raises(DeviceFault):
        producer.sync()
    with pytest.raises(DeviceFault) as caught:
        consumer.sync(timeout=0.2)  # blocked for ever on the dropped record
    assert caught.value.code == 507046
    consumer.abort()  # aclrtStreamAbort discards the blocked wait and what follows it
    consumer.sync()
    assert ran == []
    kernel(device, consumer, "after-abort", ran)
    consumer.sync()
    assert ran == ["after-abort"]


def test_abort_is_refused_where_the_product_lacks_it():
    with aclpipe.open_device("sim", spec="atlas-310p") as device:
        assert not device.capabilities.stream_abort
        with pytest.raises(BackendError) as caught:
            device.create_stream().abort()
        assert caught.value.code == 207000


def test_a_waiting_stream_learns_of_the_producers_error_through_its_records(device):
    producer, consumer, ran = device.create_stream(), device.create_stream(), []
    device.inject_fault("kernel", "producer-kernel")
    kernel(device, producer, "producer-kernel", ran)
    consumer.wait(producer.record())
    kernel(device, consumer, "consumer-kernel", ran)  # continue-on-failure: it runs, on garbage
    done = consumer.record()
    with pytest.raises(DeviceFault, match="producer-kernel"):
        done.sync()  # a simulator extension (capabilities.event_errors): the record carries the failure
    consumer.sync()  # the consumer itself did not fail
    with pytest.raises(DeviceFault, match="producer-kernel"):
        done.sync(0)  # passed now: the short path reports the same error, as often as asked
    with pytest.raises(DeviceFault):
        producer.sync()
    assert ran == ["consumer-kernel"]


def test_a_record_carries_only_failures_after_its_previous_record(device):
    stream, ran = device.create_stream(), []
    event = device.create_event()
    device.inject_fault("kernel", "early")
    kernel(device, stream, "early", ran)
    stream.record(event)
    with pytest.raises(DeviceFault, match="early"):
        event.sync()
    kernel(device, stream, "later", ran)
    stream.record(event)
    event.sync()  # nothing failed since the last record
    with pytest.raises(DeviceFault):
        stream.sync()


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


def test_a_kernel_that_raises_a_device_error_fails_its_stream_with_that_error(device):
    stream, ran = device.create_stream(), []

    def fail():
        raise error_from_code(507035, "the kernel's own device error")

    device.backend.launch_kernel(stream.handle, "fail", fail, cost=Cost())
    device.backend.launch_kernel(stream.handle, "after", lambda: ran.append("after"), cost=Cost())
    with pytest.raises(BackendError, match="the kernel's own device error") as caught:
        stream.sync()
    assert caught.value.code == 507035 and caught.value.context["task"] == "fail"
    assert ran == ["after"]  # continue on failure: the stream went on


def test_a_kernel_escaping_with_a_base_exception_fails_its_stream_not_its_worker(device):
    stream, ran = device.create_stream(), []

    class Escape(BaseException):
        pass

    def escape():
        raise Escape()

    device.backend.launch_kernel(stream.handle, "escape", escape, cost=Cost())
    device.backend.launch_kernel(stream.handle, "after", lambda: ran.append("after"), cost=Cost())
    with pytest.raises(BackendError, match="Escape") as caught:
        stream.sync()
    assert caught.value.code == 507000
    assert ran == ["after"]  # the worker lived on
    stream.sync()
