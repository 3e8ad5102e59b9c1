"""Host functions: on their stream's own thread, in stream order, blocking their stream."""

from __future__ import annotations

import threading

import pytest

from aclpipe import DeviceFault
from aclpipe.backends.sim.engines import Cost


def test_each_stream_runs_its_host_functions_on_a_thread_of_its_own(device):
    first, second, threads = device.create_stream(), device.create_stream(), {}
    for stream in (first, second):
        for _ in range(2):
            stream.host_func(lambda stream=stream: threads.setdefault(stream.name, set()).add(threading.get_ident()))
        stream.sync()
    assert threads[first.name] == {first.handle.host_thread_ident}
    assert threads[second.name] == {second.handle.host_thread_ident}
    assert first.handle.host_thread_ident != second.handle.host_thread_ident


def test_host_functions_of_different_streams_overlap(device):
    """12_execution_control.md: each stream's host functions run on the thread registered for it."""
    first, second = device.create_stream(), device.create_stream()
    both = threading.Barrier(2, timeout=10)
    first.host_func(both.wait)
    second.host_func(both.wait)  # would deadlock on one thread per device
    first.sync()
    second.sync()


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
    assert stream.handle.host_thread_ident is not None  # the Python one went to the stream's host thread
    timeline.close()
