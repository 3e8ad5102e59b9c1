"""Lane states: released only after the last host function returned and no task reads the pipe;
parked and watched on the device otherwise; lost when their device closes."""

from __future__ import annotations

import gc
import os
import threading
import time

import anyio
import pytest

import aclpipe
from aclpipe import ClosedResourceError
from aclpipe.runtime.completion import host_function as completion
from aclpipe.runtime.completion import lanes
from aclpipe.runtime.completion.timeline import Timeline, parked_timelines


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request):
    return request.param


def fds_open(state: lanes.LaneState) -> bool:
    try:
        os.fstat(state.read_fd)
        os.fstat(state.write_fd)
    except OSError:
        return False
    return True


def wait_for(condition) -> None:
    """Wait for something a watcher thread does (bounded: a bug fails instead of hanging)."""
    pause = threading.Event()
    for _ in range(6000):
        if condition():
            return
        pause.wait(0.01)
    raise AssertionError("gave up waiting")


def test_a_state_is_not_released_between_the_counter_and_the_last_touch():
    """counter[0] moves before the pipe write; only counter[1] (written after it) lets the pipe go."""
    state = lanes.LaneState(wake=True)
    lane = state.lanes[state.add_lane()]
    lane.enqueued = 1
    state.closed = True
    lane.counter[0] = 1  # the host function stored the value, and is about to write the pipe
    assert not state.releasable() and not lanes.try_release(state)
    assert fds_open(state)
    lane.counter[1] = 1  # ... and now it has returned
    assert lanes.try_release(state) and state.released and state.read_fd == -1


def test_a_state_with_a_task_inside_wait_is_not_released():
    state = lanes.LaneState(wake=True)
    state.add_lane()
    state.closed = True
    state.waiting = 1  # a pump may be blocked reading the pipe
    assert not lanes.try_release(state)
    state.waiting = 0
    assert lanes.try_release(state)


def test_attached_callbacks_run_at_release_before_the_pipe_closes(device):
    stream = device.create_stream()
    timeline = Timeline(1)
    gate = device.backend.latch(stream.handle)
    timeline.enqueue_advance(device.backend, stream.handle, 0)
    released: list[bool] = []
    state = timeline._state
    timeline.close(on_release=lambda: released.append(fds_open(state)))
    assert released == [] and parked_timelines() >= 1  # the stream has not passed the host function
    gate.set()
    wait_for(state.freed.is_set)
    assert released == [True] and state.released and not fds_open(state)


def test_a_collected_timeline_with_host_functions_pending_is_parked_then_released(device):
    stream = device.create_stream()
    timeline = Timeline(1)
    gate = device.backend.latch(stream.handle)
    timeline.enqueue_advance(device.backend, stream.handle, 0)
    state = timeline._state
    del timeline
    gc.collect()
    assert not state.released and fds_open(state)  # the host function will still write into the pipe
    gate.set()
    wait_for(state.freed.is_set)


@pytest.mark.anyio
async def test_closing_the_device_fails_waiters_at_once():
    device = aclpipe.open_device("sim", sanitizer=True)
    stream = device.create_stream()
    timeline = Timeline(1)
    gate = device.backend.latch(stream.handle)
    value = timeline.enqueue_advance(device.backend, stream.handle, 0)
    closer = threading.Thread(target=device.close)
    errors: list[BaseException] = []

    async def waiter() -> None:
        try:
            await timeline.wait(0, value)
        except ClosedResourceError as error:
            errors.append(error)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            group.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()
            closer.start()  # blocks in the backend until the latch opens; the waiter must not
    assert len(errors) == 1 and "sim:0 was closed" in str(errors[0])
    gate.set()
    closer.join()
    assert timeline.lost
    timeline.close()


@pytest.mark.anyio
async def test_a_timeline_without_a_pipe_also_fails_waiters_of_a_closed_device():
    device = aclpipe.open_device("sim", sanitizer=True)
    stream = device.create_stream()
    timeline = Timeline(1, wake=False)
    value = timeline.enqueue_advance(device.backend, stream.handle, 0)
    device.close()
    with anyio.fail_after(30):
        if timeline.value(0) < value:  # the simulator may have run it while closing
            with pytest.raises(ClosedResourceError):
                await timeline.wait(0, value)
    timeline.close()


def test_the_completion_helper_reports_which_implementation_runs():
    assert isinstance(completion.COMPILED, bool) and completion.HOST_FUNC_ADDRESS


def test_the_python_fallback_has_the_same_effects_in_the_same_order():
    ffi, address, keep = completion._fallback()
    counter = ffi.new(f"int64_t[{completion.COUNTER_LENGTH}]")
    read_fd, write_fd = os.pipe()
    try:
        args = ffi.new("aclpipe_advance_args *", {"counter": counter, "value": 3, "wake_fd": write_fd})
        function = ffi.cast("void (*)(void *)", address)
        function(args)
        assert (counter[0], counter[1]) == (3, 3) and os.read(read_fd, 16) == b"\1"
        args.value = 2  # a late host function never moves a lane backwards
        function(args)
        assert (counter[0], counter[1]) == (3, 3)
    finally:
        os.close(read_fd)
        os.close(write_fd)
    assert keep is not None


@pytest.mark.parametrize("implementation", ["compiled", "fallback"])
def test_the_helper_stamps_when_it_passed_each_value_beside_the_value(implementation):
    if implementation == "compiled":
        if not completion.COMPILED:
            pytest.skip("the C completion helper is not built here")
        ffi, address = completion.ffi, completion.HOST_FUNC_ADDRESS
    else:
        ffi, address, _keep = completion._fallback()
    counter = ffi.new(f"int64_t[{completion.COUNTER_LENGTH}]")
    function = ffi.cast("void (*)(void *)", address)
    for value in (5, 5 + completion.STAMPS):  # the second takes the first's place in the ring
        before = time.monotonic_ns()
        function(ffi.new("aclpipe_advance_args *", {"counter": counter, "value": value, "wake_fd": -1}))
        at = 2 + 2 * (value % completion.STAMPS)
        assert before <= counter[at] <= time.monotonic_ns() and counter[at + 1] == value
