"""Graph capture on the simulator follows aclmdlRI (15_model_running_instance__management.md):
an origin stream, streams joining through events, replay with one call on one stream."""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

import numpy as np
import pytest

import aclpipe
from aclpipe import BackendError, DeviceFault, HazardError
from aclpipe.backends.protocol import CaptureMode, CaptureStatus, MemcpyKind
from aclpipe.tensor import TensorDesc
from aclpipe.testing import latch


@pytest.fixture(params=[True, False], ids=["sanitizer", "no-sanitizer"])
def device(request):
    """Each test twice: with the sanitizer (the first replay's regions checked task by task, the
    next ones' from its summary) and without it; either way a replay's records and waits are
    made at hand-over, and none for a replay run by one thread."""
    dev = aclpipe.open_device("sim", sanitizer=request.param)
    yield dev
    dev.release_hangs()
    dev.close()


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


@pytest.mark.parametrize("forbidden", ["device_sync", "host_func"])
def test_forbidden_calls_invalidate_the_capture(device, forbidden):
    origin = device.create_stream()
    event = device.create_event()
    backend = device.backend
    backend.capture_begin(origin.handle)
    backend.event_record(event.handle, origin.handle)
    call = {"device_sync": device.sync, "host_func": lambda: origin.host_func(lambda: None)}[forbidden]
    with pytest.raises(BackendError) as caught:
        call()
    assert caught.value.code in (107041, 507009)
    assert backend.capture_get_info(origin.handle)[0] == CaptureStatus.INVALIDATED
    with pytest.raises(BackendError) as caught:
        backend.capture_end(origin.handle)
    assert caught.value.code == 507903  # ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED
    origin.sync()  # the stream left the capture


@pytest.mark.parametrize("refused, code", [("stream_sync", 107027), ("stream_query", 107027),
                                           ("event_sync", 107028), ("event_query", 107028)])
def test_a_sync_or_query_inside_a_capture_is_refused_and_the_capture_goes_on(device, refused, code):
    """api_error.cc: ApiErrorDecorator::StreamSynchronize/StreamQuery return 107027 and
    ::EventSynchronize/EventQueryStatus 107028 before doing anything."""
    origin = device.create_stream()
    event = device.create_event()
    backend = device.backend
    backend.capture_begin(origin.handle)
    backend.event_record(event.handle, origin.handle)
    call = {"stream_sync": origin.sync, "stream_query": lambda: origin.is_done, "event_sync": event.sync,
            "event_query": lambda: event.is_done}[refused]
    with pytest.raises(BackendError) as caught:
        call()
    assert caught.value.code == code
    assert backend.capture_get_info(origin.handle)[0] == CaptureStatus.ACTIVE
    backend.model_destroy(backend.capture_end(origin.handle))
    origin.sync()


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


def test_replays_run_in_the_order_they_were_submitted_whichever_stream_starts_first(device):
    """The replaying stream hands the model's streams their parts when it gets there; a replay
    submitted earlier on a stream that is still held goes first all the same."""
    origin, held, free = device.create_stream(), device.create_stream(), device.create_stream()
    buffer = device.upload(np.arange(8, dtype=np.float32))
    marker = device.alloc(32)
    device.backend.capture_begin(origin.handle)
    _negate(device, origin, buffer)
    model = device.backend.capture_end(origin.handle)
    with latch(held):
        device.backend.model_execute(model, held.handle)  # submitted first, its stream is held
        device.backend.model_execute(model, free.handle)  # submitted second, starts first
        free.memset(marker, 0)
        assert not free.is_done  # its replay waits for the first one's part on the model's stream
    held.sync()
    free.sync()
    np.testing.assert_array_equal(device.download(buffer, "float32", (8,)), np.arange(8))  # negated twice
    device.backend.model_destroy(model)


def test_a_replay_its_stream_drops_never_runs_and_leaves_the_model_destroyable(device):
    origin, runner = device.create_stream(), device.create_stream()
    buffer = device.upload(np.arange(8, dtype=np.float32))
    device.backend.capture_begin(origin.handle)
    _negate(device, origin, buffer)
    model = device.backend.capture_end(origin.handle)
    gate = device.backend.latch(runner.handle)
    device.backend.model_execute(model, runner.handle)
    runner.abort()  # drops the replay before the stream reached it
    gate.set()
    runner.sync()
    device.backend.model_destroy(model)  # nothing of it can run any more
    np.testing.assert_array_equal(device.download(buffer, "float32", (8,)), np.arange(8))


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
    if device.backend.sanitizer is None:
        pytest.skip("the sanitizer's own check")
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


def _fork_join_model(device, threads):
    """A model over two streams: the origin doubles ``a``, the side stream (after a fork) copies it
    into ``b``, the origin waits for it.  Each kernel notes the thread that ran it."""
    origin, side = device.create_stream(), device.create_stream()
    a = device.upload(np.arange(8, dtype=np.float32))
    b = device.upload(np.zeros(8, np.float32))
    views = {name: device.backend.memory.tensor(TensorDesc.contiguous((8,), "float32", buffer.address), what=name)
             for name, buffer in (("a", a), ("b", b))}
    fork, join = device.create_event(), device.create_event()
    backend = device.backend

    def double() -> None:
        threads.append(("double", threading.current_thread().name))
        views["a"] *= 2

    def copy() -> None:
        threads.append(("copy", threading.current_thread().name))
        views["b"][...] = views["a"]

    backend.capture_begin(origin.handle)
    backend.launch_kernel(origin.handle, "double", double, writes=[(a.address, 32)], context={"node": "double"})
    backend.event_record(fork.handle, origin.handle)
    backend.stream_wait_event(side.handle, fork.handle)
    backend.launch_kernel(side.handle, "copy", copy, reads=[(a.address, 32)], writes=[(b.address, 32)],
                          context={"node": "copy"})
    backend.event_record(join.handle, side.handle)
    backend.stream_wait_event(origin.handle, join.handle)
    return backend.capture_end(origin.handle), (a, b)


class _Replay(NamedTuple):
    threads: list[tuple[str, str]]  # (kernel, thread) per kernel run
    model: Any
    b: Any  # what the side stream's copy writes; ``a`` is kept alive by the model's kernels
    buffers: tuple[Any, Any]
    runner: Any  # the stream that replays the model


def _replay(device) -> _Replay:
    """The fork-join model and a stream to replay it; callers keep ``buffers`` (their ``_kept``)
    alive for as long as the model may run."""
    threads: list[tuple[str, str]] = []
    model, buffers = _fork_join_model(device, threads)  # both kept alive: the model writes them
    return _Replay(threads, model, buffers[1], buffers, device.create_stream())


def test_a_replay_with_nothing_else_in_flight_runs_on_the_replaying_streams_worker(device):
    threads, model, b, _kept, runner = _replay(device)
    for _ in range(2):
        device.backend.model_execute(model, runner.handle, {"run": 1})
        runner.sync()
    np.testing.assert_array_equal(device.download(b, "float32", (8,)), 4 * np.arange(8))  # in capture order
    assert {name for _, name in threads} == {f"aclpipe-{runner.handle.name}"}
    assert [kernel for kernel, _ in threads] == ["double", "copy"] * 2
    device.backend.model_destroy(model)


def test_a_replay_runs_on_the_models_own_streams_when_a_fault_may_hang(device):
    threads, model, b, _kept, runner = _replay(device)
    device.inject_fault("kernel", "no such kernel", hang=True)  # an abort must be able to leave a hang behind
    device.backend.model_execute(model, runner.handle, {"run": 1})
    runner.sync()
    np.testing.assert_array_equal(device.download(b, "float32", (8,)), 2 * np.arange(8))
    names = {name for _, name in threads}
    assert len(names) == 2 and f"aclpipe-{runner.handle.name}" not in names  # one model stream each
    device.backend.release_hangs()
    device.backend.model_destroy(model)


def test_a_fault_inside_a_replay_run_by_the_replaying_stream_is_its_stream_error(device):
    threads, model, b, _kept, runner = _replay(device)
    device.inject_fault("kernel", "copy")
    device.backend.model_execute(model, runner.handle, {"run": 3})
    with pytest.raises(DeviceFault) as caught:
        runner.sync()
    assert caught.value.context["node"] == "copy" and caught.value.context["run"] == 3
    assert [kernel for kernel, _ in threads] == ["double"]  # the faulted kernel did not run
    device.backend.model_execute(model, runner.handle, {"run": 4})  # the next replay runs cleanly
    runner.sync()
    np.testing.assert_array_equal(device.download(b, "float32", (8,)), 4 * np.arange(8))
    device.backend.model_destroy(model)


def test_a_trace_of_a_replay_run_by_the_replaying_stream_names_the_models_streams(device):
    threads, model, _, _kept, runner = _replay(device)
    backend = device.backend
    backend.trace_begin()
    backend.model_execute(model, runner.handle, {"run": 5})
    runner.sync()
    records = backend.trace_end()
    kernels = {record.node: record for record in records if record.kind == "kernel"}
    assert set(kernels) == {"double", "copy"} and all(record.run == 5 for record in kernels.values())
    # Each kernel is the model stream's that captured it, though one thread ran them both.
    assert kernels["double"].stream != kernels["copy"].stream
    assert {kernels["double"].stream, kernels["copy"].stream} <= {inner.name for inner in model.streams.values()}
    assert {name for _, name in threads} == {f"aclpipe-{runner.handle.name}"}
    backend.model_destroy(model)


@pytest.mark.parametrize("timing", [False, True])
def test_an_event_recorded_twice_in_a_capture_is_waited_on_at_each_record_in_every_replay(timing):
    """Without the sanitizer a replay renews its records and waits from a plan made at capture
    end: a wait must take the generation of its event's latest record before it in capture
    order.  With the timing model the model's streams run concurrently, and the origin's slow
    kernel between the two records makes a wait on the first record's generation copy too early."""
    device = aclpipe.open_device("sim", sanitizer=False, timing=timing)
    try:
        origin, side, runner = device.create_stream(), device.create_stream(), device.create_stream()
        a = device.upload(np.arange(8, dtype=np.float32))
        b = device.upload(np.zeros(8, np.float32))
        views = {name: device.backend.memory.tensor(TensorDesc.contiguous((8,), "float32", buffer.address),
                                                    what=name) for name, buffer in (("a", a), ("b", b))}
        copies: list[np.ndarray] = []
        ping, pong = device.create_event(), device.create_event()
        backend = device.backend

        def slow_increment() -> None:
            threading.Event().wait(0.02)
            views["a"] += 1

        def copy() -> None:
            views["b"][...] = views["a"]
            copies.append(views["b"].copy())

        backend.capture_begin(origin.handle)
        for step in range(2):
            if step:
                backend.launch_kernel(origin.handle, "increment", slow_increment, writes=[(a.address, 32)])
            backend.event_record(ping.handle, origin.handle)
            backend.stream_wait_event(side.handle, ping.handle)
            backend.launch_kernel(side.handle, "copy", copy, reads=[(a.address, 32)], writes=[(b.address, 32)])
            backend.event_record(pong.handle, side.handle)
            backend.stream_wait_event(origin.handle, pong.handle)
        model = backend.capture_end(origin.handle)
        for _ in range(3):
            backend.model_execute(model, runner.handle, {"run": 1})
        runner.sync()
        start = np.arange(8, dtype=np.float32)
        expected = [start, start + 1, start + 1, start + 2, start + 2, start + 3]
        for got, want in zip(copies, expected, strict=True):
            np.testing.assert_array_equal(got, want)
        backend.model_destroy(model)
    finally:
        device.close()


def test_a_replay_run_by_one_thread_skips_the_models_own_records_and_waits_unless_traced():
    device = aclpipe.open_device("sim", sanitizer=False)
    try:
        _threads, model, b, _kept, runner = _replay(device)
        backend = device.backend
        shadows = list(model.shadows.values())
        for _ in range(2):
            backend.model_execute(model, runner.handle, {"run": 1})
            runner.sync()
        np.testing.assert_array_equal(device.download(b, "float32", (8,)), 4 * np.arange(8))
        assert [shadow.generation for shadow in shadows] == [0, 0]  # never recorded: capture order ordered them
        backend.trace_begin()
        backend.model_execute(model, runner.handle, {"run": 2})
        runner.sync()
        records = backend.trace_end()
        assert [shadow.generation for shadow in shadows] == [1, 1]
        inner = {stream.name for stream in model.streams.values()}
        assert {record.kind for record in records if record.stream in inner} >= {"kernel", "record", "wait"}
        np.testing.assert_array_equal(device.download(b, "float32", (8,)), 8 * np.arange(8))
        backend.model_destroy(model)
    finally:
        device.close()
