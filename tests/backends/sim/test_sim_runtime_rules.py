"""The simulator's op wait timeout and capture-mode rules, as the runtime source settles them
(``aclrtSetOpWaitTimeout``; ``Context::IsCaptureModeSupport``; ``Event::IsEventInModel``;
``aclmdlRICaptureBeginImpl``)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import aclpipe
from aclpipe import BackendError, DeviceFault
from aclpipe.backends.protocol import CaptureMode, MemcpyKind
from aclpipe.testing import latch

TIMEOUT = 10.0


# -- op wait timeout (07_event_management.md, aclrtSetOpWaitTimeout) --------------------------------
def test_by_default_a_wait_never_times_out(device):
    assert device.capabilities.op_wait_timeout == 0
    producer, waiter = device.create_stream(), device.create_stream()
    with latch(producer):
        waiter.wait(producer.record())
        with pytest.raises(DeviceFault) as caught:
            waiter.sync(0.1)
        assert caught.value.code == 507046  # still blocked: the synchronize's own timeout, not the wait's
    waiter.sync(TIMEOUT)


def test_a_wait_past_the_op_wait_timeout_fails_at_the_next_synchronize_and_the_stream_goes_on():
    # 1 s of device time is 10 ms of wall time at time_scale 0.01.
    with aclpipe.open_device("sim", op_wait_timeout=1, time_scale=0.01) as device:
        assert device.capabilities.op_wait_timeout == 1
        producer, waiter = device.create_stream(), device.create_stream()
        target = device.alloc(64)
        with latch(producer):
            waiter.wait(producer.record())  # the wait call itself succeeds: the failure comes later
            waiter.memset(target, 0x5A)
            with pytest.raises(DeviceFault) as caught:
                waiter.sync(TIMEOUT)
        assert caught.value.code == 107020 and "aclrtSetOpWaitTimeout" in str(caught.value)
        assert (device.download(target, "uint8", (64,)) == 0x5A).all()  # continue on failure
        waiter.wait(producer.record())  # a wait whose record completes in time is fine
        waiter.sync(TIMEOUT)


@pytest.mark.parametrize("requested, effective", [(None, 0.0), (0, 0.0), (0.2, 1.0), (30, 30.0)])
def test_the_op_wait_timeout_is_whole_seconds_and_zero_means_none(requested, effective):
    with aclpipe.open_device("sim", op_wait_timeout=requested, sanitizer=False) as device:
        assert device.capabilities.op_wait_timeout == effective


def test_an_inference_card_has_no_op_wait_timeout_and_a_negative_one_is_refused():
    with pytest.raises(BackendError) as caught:
        aclpipe.open_device("sim", spec="atlas-310p", op_wait_timeout=5)
    assert caught.value.code == 207000 and "aclrtSetOpWaitTimeout" in str(caught.value)
    with aclpipe.open_device("sim", spec="atlas-310p", sanitizer=False) as device:
        assert device.capabilities.op_wait_timeout == 0
    with pytest.raises(ValueError, match="op_wait_timeout"):
        aclpipe.open_device("sim", op_wait_timeout=-1)


# -- capture modes (context_aclgraph.cc, Context::IsCaptureModeSupport) ------------------------------
def _sync_calls(device):
    backend, buffer, host = device.backend, device.alloc(64), device.alloc_host(64)
    return {"aclrtMemset": lambda: backend.memset_sync(buffer.address, 3, 64),
            "aclrtMemcpy": lambda: backend.memcpy_sync(host.address, buffer.address, 64, MemcpyKind.DEVICE_TO_HOST)}


def _on_thread(call):
    outcome: list[object] = []

    def run():
        try:
            outcome.append(call())
        except BackendError as error:
            outcome.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(TIMEOUT)
    return outcome[0]


@pytest.mark.parametrize("mode, here, elsewhere", [
    (CaptureMode.GLOBAL, True, True), (CaptureMode.THREAD_LOCAL, True, False), (CaptureMode.RELAXED, False, False),
])
def test_synchronous_copies_are_refused_while_a_capture_forbids_them(device, mode, here, elsewhere):
    backend, origin = device.backend, device.create_stream()
    calls = _sync_calls(device)
    backend.capture_begin(origin.handle, mode)
    for name, call in calls.items():
        for refused, outcome in ((here, _outcome(call)), (elsewhere, _on_thread(call))):
            assert isinstance(outcome, BackendError) == refused, (name, mode)
            if refused:
                assert outcome.code == 107030 and "IsCaptureModeSupport" in str(outcome)
    backend.model_destroy(backend.capture_end(origin.handle))
    for call in calls.values():
        call()  # no capture open: allowed again


def _outcome(call):
    try:
        return call()
    except BackendError as error:
        return error


def test_device_upload_and_download_work_while_another_thread_captures(device):
    backend, origin = device.backend, device.create_stream()
    backend.capture_begin(origin.handle)
    try:
        values = np.arange(16, dtype=np.float32)
        copied = _on_thread(lambda: device.download(device.upload(values), "float32", (16,)))
        np.testing.assert_array_equal(copied, values)  # aclpipe copies asynchronously, from pinned memory
    finally:
        backend.model_destroy(backend.capture_end(origin.handle))


def test_a_sync_of_an_event_recorded_in_a_captured_model_is_refused_until_it_is_recorded_again(device):
    backend, origin, other = device.backend, device.create_stream(), device.create_stream()
    event = device.create_event()
    backend.capture_begin(origin.handle)
    backend.event_record(event.handle, origin.handle)
    model = backend.capture_end(origin.handle)
    with pytest.raises(BackendError) as caught:
        event.sync(TIMEOUT)
    assert caught.value.code == 107000 and "IsEventInModel" in str(caught.value)
    backend.model_execute(model, other.handle)
    other.record(event)
    event.sync(TIMEOUT)
    backend.model_destroy(model)


def test_the_default_stream_cannot_be_captured(device):
    with pytest.raises(BackendError) as caught:
        device.backend.capture_begin(None)
    assert caught.value.code == 100000 and "default stream" in str(caught.value)
