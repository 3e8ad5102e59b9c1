"""Simulated streams: in-order execution on a worker thread, concurrency between streams."""

from __future__ import annotations

import threading

import pytest

from aclpipe import ClosedResourceError, DeviceFault, InvalidArgumentError
from aclpipe.backends.sim.engines import Cost
from aclpipe.testing import latch


def kernel(device, stream, fn, name="k", buffer=None):
    writes = [(buffer.address, buffer.nbytes)] if buffer is not None else []
    device.backend.launch_kernel(stream.handle, name, fn, writes=writes, cost=Cost())


def test_tasks_run_in_enqueue_order_on_one_worker_thread(device):
    stream, seen = device.create_stream(), []
    for index in range(20):
        kernel(device, stream, lambda index=index: seen.append((index, threading.get_ident())))
    stream.sync()
    assert [index for index, _ in seen] == list(range(20))
    threads = {ident for _, ident in seen}
    assert len(threads) == 1 and threading.get_ident() not in threads


def test_streams_have_their_own_workers(device):
    first, second, seen = device.create_stream(), device.create_stream(), {}
    kernel(device, first, lambda: seen.setdefault("first", threading.get_ident()))
    kernel(device, second, lambda: seen.setdefault("second", threading.get_ident()))
    first.sync()
    second.sync()
    assert seen["first"] != seen["second"]


def test_a_held_stream_does_not_block_another(device):
    held, free = device.create_stream(), device.create_stream()
    with latch(held):
        held_done = held.record()
        buffer = device.alloc(64)
        free.memset(buffer, 1)
        free.sync(timeout=10)  # completes while the other stream is still held
        assert not held_done.is_done
    held.sync()


def test_kernels_on_two_streams_are_inside_their_bodies_at_the_same_time(device):
    # Evidence of concurrency without timing: each kernel waits for the other to start.
    first, second = device.create_stream(), device.create_stream()
    started = {"first": threading.Event(), "second": threading.Event()}
    met = []

    def body(me, other):
        def run():
            started[me].set()
            met.append(started[other].wait(timeout=10))
        return run

    kernel(device, first, body("first", "second"))
    kernel(device, second, body("second", "first"))
    first.sync()
    second.sync()
    assert met == [True, True]


def test_host_enqueue_returns_before_the_work_runs(device):
    stream = device.create_stream()
    with latch(stream):
        ran = []
        kernel(device, stream, lambda: ran.append(1))
        assert ran == []
    stream.sync()
    assert ran == [1]


def test_sync_timeout_is_acl_stream_sync_timeout(device):
    stream = device.create_stream()
    with latch(stream), pytest.raises(DeviceFault) as caught:
        stream.sync(timeout=0.05)
    assert caught.value.code == 507046
    stream.sync()


def test_destroyed_stream_and_foreign_stream_are_refused(device):
    import aclpipe

    stream = device.create_stream()
    handle = stream.handle
    stream.close()
    with pytest.raises(ClosedResourceError):
        device.backend.stream_sync(handle)
    with aclpipe.open_device("sim") as other:
        foreign = other.create_stream()
        with pytest.raises(aclpipe.InvalidArgumentError, match="another device"):
            device.backend.stream_sync(foreign.handle)


def test_stream_limit():
    import aclpipe

    with aclpipe.open_device("sim", max_streams=2) as device:
        streams = [device.create_stream(), device.create_stream()]
        with pytest.raises(aclpipe.BackendError, match="allows 2 streams") as caught:
            device.create_stream()
        assert caught.value.code == 207008
        streams[0].close()
        device.create_stream()


def test_tasks_made_without_the_constructor_read_like_constructed_ones():
    from dataclasses import fields

    from aclpipe.backends.sim.stream import KERNEL, RECORD, Task, bare_task, kernel_task, sync_task

    def run():
        return None

    made = {"kernel": (kernel_task("k", run, 1.5, 2, {"node": "n"}), Task(KERNEL, "k", run, seconds=1.5, cores=2,
                                                                         context={"node": "n"})),
            "sync": (sync_task(RECORD, "r", None, 3, inherit=False),  # type: ignore[arg-type]
                     Task(RECORD, "r", event=None, generation=3, inherit=False)),
            "bare": (bare_task(RECORD, "b", generation=4, adopt_error=True),
                     Task(RECORD, "b", generation=4, adopt_error=True))}
    for quick, constructed in made.values():
        assert {f.name: getattr(quick, f.name) for f in fields(Task)} == \
               {f.name: getattr(constructed, f.name) for f in fields(Task)}
    first, second = kernel_task("k", run, 0.0, 1, {}), kernel_task("k", run, 0.0, 1, {})
    assert first.snapshot is not second.snapshot  # each task its own clock, as default_factory gives
    with pytest.raises(TypeError, match="no field 'generaton'"):
        bare_task(RECORD, "typo", generaton=1)


@pytest.mark.parametrize("timeout_ms", [0, -2])
def test_a_synchronize_timeout_is_minus_one_or_positive(device, timeout_ms):
    """api_error.cc, ApiErrorDecorator::StreamSynchronize/EventSynchronize/DeviceSynchronize: a
    0 ms (or below -1) timeout is an invalid value, not a poll."""
    backend, stream = device.backend, device.create_stream()
    event = stream.record()
    for call, args in ((backend.stream_sync, (stream.handle,)), (backend.event_sync, (event.handle,)),
                       (backend.device_sync, ())):
        with pytest.raises(InvalidArgumentError) as caught:
            call(*args, timeout_ms)
        assert caught.value.code == 107000 and "poll with a query" in str(caught.value)
    backend.stream_sync(stream.handle, 1)


def test_the_default_streams_count_against_the_products_stream_limit():
    """06_stream_management.md, aclrtCreateStream: N = the maximum - the streams that exist, the
    default stream included; a device holds two (context.cc, Context::Setup per context)."""
    import aclpipe

    with aclpipe.open_device("sim", spec="atlas-200i-a2", sanitizer=False) as device:
        capabilities = device.capabilities
        assert (capabilities.device_streams, capabilities.default_streams, capabilities.max_streams) == (512, 2, 510)
        streams = [device.backend.stream_create() for _ in range(510)]
        with pytest.raises(aclpipe.BackendError, match="less the 2 default streams") as caught:
            device.backend.stream_create()
        assert caught.value.code == 207008
        for stream in streams:
            device.backend.stream_destroy(stream)
