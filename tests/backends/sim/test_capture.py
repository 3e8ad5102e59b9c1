"""Graph capture on the simulator follows aclmdlRI (15_model_running_instance__management.md):
an origin stream, streams joining through events, replay with one call on one stream."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import aclpipe
from aclpipe import BackendError, DeviceFault, HazardError
from aclpipe.backends.protocol import CaptureMode, CaptureStatus, MemcpyKind
from aclpipe.tensor import TensorDesc
from aclpipe.testing import latch


def _negate(device, stream, buffer, node="neg"):
    desc = TensorDesc.contiguous((8,), "float32", buffer.address)
    executor = device.backend.op_prepare("Neg", [desc], [desc], {})
    device.backend.op_set_repeatable(executor)
    device.backend.op_launch(executor, 0, 0, stream.handle, {"node": node})
    return executor


def _chain(device, stream, buffer, length):
    return [_negate(device, stream, buffer, f"neg{k}") for k in range(length)]


def test_replay_on_one_stream_runs_the_captured_work_each_time(device):
    origin, runner = device.create_stream(), device.create_stream()
    buffer = device.upload(np.arange(8, dtype=np.float32))
    backend = device.backend
    backend.capture_begin(origin.handle)
    status, model = backend.capture_get_info(origin.handle)
    assert status == CaptureStatus.ACTIVE and model is not None
    _chain(device, origin, buffer, 3)  # three negations: x -> -x
    assert backend.capture_end(origin.handle) is model and model.size == 3
    assert backend.capture_get_info(origin.handle) == (CaptureStatus.NONE, None)
    origin.sync()
    np.testing.assert_array_equal(device.download(buffer, "float32", (8,)), np.arange(8))  # nothing ran yet
    for expected_sign in (-1, 1, -1):
        backend.model_execute(model, runner.handle, {"run": 1})  # any stream replays it
        runner.sync()
        np.testing.assert_array_equal(device.download(buffer, "float32", (8,)), expected_sign * np.arange(8))
    backend.model_destroy(model)


def test_other_streams_join_through_events_and_must_rejoin(device):
    origin, side = device.create_stream(), device.create_stream()
    source = device.upload(np.full(16, 3, np.float32))
    target = device.alloc(64)
    fork, join = device.create_event(), device.create_event()
    backend = device.backend
    backend.capture_begin(origin.handle)
    backend.event_record(fork.handle, origin.handle)
    backend.stream_wait_event(side.handle, fork.handle)  # side joins the capture
    assert backend.capture_get_info(side.handle)[0] == CaptureStatus.ACTIVE
    backend.memcpy_async(target.address, source.address, 64, MemcpyKind.DEVICE_TO_DEVICE, side.handle)
    backend.event_record(join.handle, side.handle)
    backend.stream_wait_event(origin.handle, join.handle)  # side rejoins the origin
    model = backend.capture_end(origin.handle)
    assert backend.capture_get_info(side.handle)[0] == CaptureStatus.NONE
    backend.model_execute(model, origin.handle)
    origin.sync()
    np.testing.assert_array_equal(device.download(target, "float32", (16,)), np.full(16, 3))


def test_a_stream_that_does_not_rejoin_fails_the_end(device):
    origin, side = device.create_stream(), device.create_stream()
    buffer = device.upload(np.ones(8, np.float32))
    fork = device.create_event()
    backend = device.backend
    backend.capture_begin(origin.handle)
    backend.event_record(fork.handle, origin.handle)
    backend.stream_wait_event(side.handle, fork.handle)
    _negate(device, side, buffer)
    with pytest.raises(BackendError) as caught:
        backend.capture_end(origin.handle)
    assert caught.value.code == 107025  # ACL_ERROR_RT_STREAM_UNJOINED


def test_end_names_the_origin_on_its_thread(device):
    origin, side = device.create_stream(), device.create_stream()
    fork = device.create_event()
    backend = device.backend
    with pytest.raises(BackendError) as caught:
        backend.capture_end(origin.handle)
    assert caught.value.code == 107029  # not capturing
    backend.capture_begin(origin.handle)
    with pytest.raises(BackendError) as caught:
        backend.capture_begin(origin.handle)
    assert caught.value.code == 107027  # already capturing
    backend.event_record(fork.handle, origin.handle)
    backend.stream_wait_event(side.handle, fork.handle)
    with pytest.raises(BackendError) as caught:
        backend.capture_end(side.handle)
    assert caught.value.code == 107036  # side joined; it did not begin the capture
    errors = []
    thread = threading.Thread(target=lambda: errors.append(_code(backend.capture_end, origin.handle)))
    thread.start()
    thread.join()
    assert errors == [107038]  # GLOBAL mode: end on the thread that began
    backend.event_record(fork.handle, side.handle)
    backend.stream_wait_event(origin.handle, fork.handle)
    backend.capture_end(origin.handle)


def _code(call, *args):
    try:
        call(*args)
    except BackendError as error:
        return error.code
    return 0


def test_relaxed_mode_ends_on_any_thread(device):
    origin = device.create_stream()
    device.backend.capture_begin(origin.handle, CaptureMode.RELAXED)
    _negate(device, origin, device.upload(np.ones(8, np.float32)))
    models = []
    thread = threading.Thread(target=lambda: models.append(device.backend.capture_end(origin.handle)))
    thread.start()
    thread.join()
    assert models and models[0].size == 1


@pytest.mark.parametrize("forbidden", ["stream_sync", "device_sync", "event_sync", "host_func"])
def test_forbidden_calls_invalidate_the_capture(device, forbidden):
    origin = device.create_stream()
    event = device.create_event()
    backend = device.backend
    backend.capture_begin(origin.handle)
    backend.event_record(event.handle, origin.handle)
    call = {"stream_sync": origin.sync, "device_sync": device.sync, "event_sync": event.sync,
            "host_func": lambda: origin.host_func(lambda: None)}[forbidden]
    with pytest.raises(BackendError) as caught:
        call()
    assert caught.value.code in (107041, 107028, 507009)
    assert backend.capture_get_info(origin.handle)[0] == CaptureStatus.INVALIDATED
    with pytest.raises(BackendError) as caught:
        backend.capture_end(origin.handle)
    assert caught.value.code == 507903  # ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED
    origin.sync()  # the stream left the capture


def test_a_captured_wait_needs_a_captured_record(device):
    origin = device.create_stream()
    outside = device.create_stream().record()
    device.backend.capture_begin(origin.handle)
    with pytest.raises(BackendError) as caught:
        origin.wait(outside)
    assert caught.value.code == 107024  # ACL_ERROR_RT_CAPTURE_DEPENDENCY


def test_a_fault_in_a_replay_is_the_replaying_streams_and_names_the_node_and_run(device):
    origin = device.create_stream()
    buffer = device.upload(np.ones(8, np.float32))
    device.backend.capture_begin(origin.handle)
    _chain(device, origin, buffer, 2)
    model = device.backend.capture_end(origin.handle)
    device.inject_fault("kernel", "neg1")
    device.backend.model_execute(model, origin.handle, {"run": 7})
    done = origin.record()
    with pytest.raises(DeviceFault) as caught:
        origin.sync()
    assert caught.value.context["node"] == "neg1" and caught.value.context["run"] == 7
    with pytest.raises(DeviceFault):
        done.sync()  # records after the replay carry it (capabilities.event_errors)
    device.backend.model_execute(model, origin.handle, {"run": 8})  # continue-on-failure: usable again
    origin.sync()


def test_destroying_a_model_whose_replay_may_run_is_refused(device):
    origin = device.create_stream()
    buffer = device.upload(np.ones(8, np.float32))
    device.backend.capture_begin(origin.handle)
    _negate(device, origin, buffer)
    model = device.backend.capture_end(origin.handle)
    with latch(origin):
        device.backend.model_execute(model, origin.handle)
        with pytest.raises(BackendError) as caught:
            device.backend.model_destroy(model)
        assert caught.value.code == 107037  # ACL_ERROR_RT_MODEL_RUNNING
    origin.sync()
    device.backend.model_destroy(model)
    with pytest.raises(BackendError):
        device.backend.model_execute(model, origin.handle)


def test_task_groups_are_updated_in_stream_order(device):
    origin, updater = device.create_stream(), device.create_stream()
    first = device.upload(np.ones(8, np.float32))
    second = device.upload(np.full(8, 5, np.float32))
    backend = device.backend
    backend.capture_begin(origin.handle)
    backend.capture_task_group_begin(origin.handle)
    _negate(device, origin, first)
    with pytest.raises(BackendError) as caught:
        origin.memset(first, 0)  # only single-op tasks inside a task group
    assert caught.value.code == 507009
    group = backend.capture_task_group_end(origin.handle)
    model = backend.capture_end(origin.handle)
    backend.model_execute(model, origin.handle)
    origin.sync()
    np.testing.assert_array_equal(device.download(first, "float32", (8,)), -np.ones(8))
    with pytest.raises(BackendError) as caught:
        backend.capture_task_update_begin(updater.handle, object())
    backend.capture_task_update_begin(updater.handle, group)
    _negate(device, updater, second)  # stored as the replacement, not run
    backend.capture_task_update_end(updater.handle)
    updater.sync()
    np.testing.assert_array_equal(device.download(second, "float32", (8,)), np.full(8, 5))
    backend.model_execute(model, origin.handle)
    origin.sync()
    np.testing.assert_array_equal(device.download(second, "float32", (8,)), np.full(8, -5))
    np.testing.assert_array_equal(device.download(first, "float32", (8,)), -np.ones(8))  # untouched now


def test_an_update_must_match_the_group(device):
    origin, updater = device.create_stream(), device.create_stream()
    buffer = device.upload(np.ones(8, np.float32))
    backend = device.backend
    backend.capture_begin(origin.handle)
    with pytest.raises(BackendError) as caught:
        backend.capture_task_group_end(origin.handle)
    assert caught.value.code == 107033
    backend.capture_task_group_begin(origin.handle)
    _negate(device, origin, buffer)
    group = backend.capture_task_group_end(origin.handle)
    backend.capture_end(origin.handle)
    backend.capture_task_update_begin(origin.handle, group)
    with pytest.raises(BackendError) as caught:
        backend.capture_task_update_begin(updater.handle, group)  # the group is being updated
    assert caught.value.code == 107033
    with pytest.raises(BackendError) as caught:
        backend.capture_task_update_end(updater.handle)  # no update open there
    assert caught.value.code == 107033
    with pytest.raises(BackendError) as caught:
        origin.memset(buffer, 0)  # only single-op tasks update a group
    assert caught.value.code == 507009
    with pytest.raises(BackendError, match="match in number and type"):
        backend.capture_task_update_end(origin.handle)  # no task for the group's one


def test_the_sanitizer_checks_replays(device):
    origin, side = device.create_stream(), device.create_stream()
    buffer = device.upload(np.ones(8, np.float32))
    fork, join = device.create_event(), device.create_event()
    backend = device.backend
    backend.capture_begin(origin.handle)
    backend.event_record(fork.handle, origin.handle)
    backend.stream_wait_event(side.handle, fork.handle)
    _negate(device, origin, buffer)
    _negate(device, side, buffer)  # same bytes, no ordering between the two captured streams
    backend.event_record(join.handle, side.handle)
    backend.stream_wait_event(origin.handle, join.handle)
    model = backend.capture_end(origin.handle)
    with pytest.raises(HazardError):
        backend.model_execute(model, origin.handle)
    device.sync()


def test_a_product_without_capture_refuses_it():
    with aclpipe.open_device("sim", spec="atlas-200i-a2") as device:
        assert not device.capabilities.graph_capture
        stream = device.create_stream()
        with pytest.raises(BackendError) as caught:
            device.backend.capture_begin(stream.handle)
        assert caught.value.code == 207000
