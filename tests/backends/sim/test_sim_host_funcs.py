"""Host functions: on the device's one host-function thread, in stream order, blocking their stream."""

from __future__ import annotations

import threading

import pytest

import aclpipe
from aclpipe import DeviceFault
from aclpipe.backends.sim.engines import Cost


def test_every_stream_of_a_device_runs_its_host_functions_on_the_devices_one_thread(device):
    """ApiImpl::LaunchHostFunc (src/runtime/api/impl/api_impl.cc): one callback thread per context."""
    first, second, threads = device.create_stream(), device.create_stream(), {}
    for stream in (first, second):
        for _ in range(2):
            stream.host_func(lambda stream=stream: threads.setdefault(stream.name, set()).add(threading.get_ident()))
        stream.sync()
    assert threads[first.name] == threads[second.name] == {device.backend.host_thread_ident}
    with aclpipe.open_device("sim:1") as other:
        other_stream = other.create_stream()
        other_stream.host_func(lambda: None)
        other_stream.sync()
        assert other.backend.host_thread_ident != device.backend.host_thread_ident


def test_host_functions_of_different_streams_run_one_at_a_time_in_the_order_reached(device):
    first, second, order = device.create_stream(), device.create_stream(), []
    started, overlapped = threading.Event(), threading.Event()

    def hold() -> None:
        order.append("first")
        started.set()
        overlapped.wait(0.2)  # a second stream's host function, run at the same time, would set it

    first.host_func(hold)
    first.host_func(lambda: order.append("first again"))
    assert started.wait(10)
    second.host_func(lambda: (overlapped.set(), order.append("second")))  # reached while hold runs
    first.sync()
    second.sync()
    assert order == ["first", "second", "first again"]


def test_a_c_host_function_of_another_stream_waits_for_a_blocked_host_function(device):
    """The completion helper runs on its stream's worker, yet one at a time with the Python ones."""
    from aclpipe.runtime.timeline import Timeline

    blocked, other = device.create_stream(), device.create_stream()
    gate, started = threading.Event(), threading.Event()
    blocked.host_func(lambda: (started.set(), gate.wait(10)))
    assert started.wait(10)
    timeline = Timeline(1, wake=False)
    value = timeline.enqueue_advance(device.backend, other.handle, 0)
    assert not timeline.wait_blocking(0, value, 0.2)  # held behind the other stream's host function
    gate.set()
    assert timeline.wait_blocking(0, value, 10)
    blocked.sync()
    other.sync()
    timeline.close()


def test_host_functions_run_in_stream_order_between_kernels(device):
    stream, order = device.create_stream(), []
    for index in range(6):
        if index % 2:
            stream.host_func(lambda index=index: order.append(index))
        else:
            device.backend.launch_kernel(stream.handle, "k", lambda index=index: order.append(index), cost=Cost())
    stream.sync()
    assert order == list(range(6))


def test_the_stream_waits_until_the_host_function_returns(device):
    stream, started, gate, ran = device.create_stream(), threading.Event(), threading.Event(), []

    def blocker():
        started.set()
        gate.wait(10)

    stream.host_func(blocker)
    device.backend.launch_kernel(stream.handle, "after", lambda: ran.append("after"), cost=Cost())
    assert started.wait(10)
    assert ran == [] and not stream.is_done
    gate.set()
    stream.sync()
    assert ran == ["after"]


def test_a_raising_host_function_fails_its_stream_at_sync(device):
    stream = device.create_stream()

    def broken():
        raise KeyError("missing")

    stream.host_func(broken)
    with pytest.raises(DeviceFault, match="broken raised KeyError") as caught:
        stream.sync()
    assert isinstance(caught.value.__cause__, KeyError)
    assert caught.value.code == 507000
    stream.host_func(lambda: None)
    stream.sync()


def test_host_functions_still_run_on_a_failed_stream(device):
    # so that whoever waits for completion through one hears about the failure
    stream, ran = device.create_stream(), []
    device.inject_fault("kernel", "doomed")
    device.backend.launch_kernel(stream.handle, "doomed", lambda: ran.append("kernel"), cost=Cost())
    stream.host_func(lambda: ran.append("host"))
    with pytest.raises(DeviceFault):
        stream.sync()
    assert ran == ["host"]


def test_a_c_host_function_runs_when_its_stream_reaches_it_and_blocks_what_follows(device):
    """aclpipe's completion helper (C, no Python) runs in stream order, on the stream's worker."""
    from aclpipe.runtime.timeline import Timeline

    stream, order = device.create_stream(), []
    timeline = Timeline(1, wake=False)
    gate = device.backend.latch(stream.handle)
    value = timeline.enqueue_advance(device.backend, stream.handle, 0)
    stream.host_func(lambda: order.append(timeline.value(0)))  # sees the counter already raised
    assert timeline.value(0) < value  # held behind the latch
    gate.set()
    stream.sync()
    assert order == [value] and timeline.value(0) == value
    assert device.backend.host_thread_ident is not None  # the Python one went to the device's host thread
    timeline.close()


@pytest.mark.parametrize("call", ["alloc", "free", "alloc_host", "stream_sync", "event_sync", "device_sync",
                                  "memset", "record", "host_func"])
def test_a_host_function_may_not_allocate_free_synchronize_or_launch(device, call):
    """12_execution_control.md: a callback must not call resource allocation or release, stream or
    device synchronize, or task launch interfaces (the context's one thread may deadlock)."""
    from aclpipe.errors import HazardError

    stream, other = device.create_stream(), device.create_stream()
    backend, buffer, seen = device.backend, device.alloc(64), []
    event = other.record()
    calls = {"alloc": lambda: backend.mem_alloc(64), "free": lambda: backend.mem_free(buffer.address),
             "alloc_host": lambda: backend.mem_alloc_host(64), "stream_sync": lambda: other.sync(10),
             "event_sync": lambda: event.sync(10), "device_sync": lambda: device.sync(10),
             "memset": lambda: other.memset(buffer, 0), "record": lambda: other.record(),
             "host_func": lambda: other.host_func(lambda: None)}

    def calls_back_in() -> None:
        try:
            calls[call]()
        except HazardError as error:
            seen.append(error)

    stream.host_func(calls_back_in)
    stream.sync()
    assert len(seen) == 1 and "from inside a host function" in str(seen[0])
    other.sync()
    buffer.close()  # the refused free left it allocated
