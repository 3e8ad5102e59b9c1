"""The completion timeline: C host functions advance lanes; tasks await them under asyncio and trio."""

from __future__ import annotations

import time

import anyio
import pytest

from aclpipe.runtime.completion.timeline import HOST_FUNC_ADDRESS, Timeline


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request):
    return request.param


@pytest.mark.anyio
async def test_waiters_resume_when_the_stream_passes_their_value(device):
    stream = device.create_stream()
    timeline = Timeline(1)
    gate = device.backend.latch(stream.handle)
    values = [timeline.enqueue_advance(device.backend, stream.handle, 0) for _ in range(20)]
    done: list[int] = []

    async def waiter(value: int) -> None:
        await timeline.wait(0, value)
        done.append(value)

    async with anyio.create_task_group() as group:
        for value in values:
            group.start_soon(waiter, value)
        await anyio.sleep(0.05)
        assert done == [] and timeline.value(0) == 0  # the latch holds the stream
        gate.set()
    assert sorted(done) == values and timeline.value(0) == 20
    assert timeline.waiting == 0
    timeline.close()


@pytest.mark.anyio
async def test_lanes_are_independent(device):
    first, second = device.create_stream(), device.create_stream()
    timeline = Timeline(2)
    gate = device.backend.latch(first.handle)
    blocked = timeline.enqueue_advance(device.backend, first.handle, 0)
    free = timeline.enqueue_advance(device.backend, second.handle, 1)
    with anyio.fail_after(5):
        await timeline.wait(1, free)
    assert timeline.value(0) < blocked
    gate.set()
    with anyio.fail_after(5):
        await timeline.wait(0, blocked)
    timeline.close()


@pytest.mark.anyio
async def test_a_cancelled_pump_hands_over_to_the_next_waiter(device):
    stream = device.create_stream()
    timeline = Timeline(1)
    gate = device.backend.latch(stream.handle)
    first = timeline.enqueue_advance(device.backend, stream.handle, 0)
    second = timeline.enqueue_advance(device.backend, stream.handle, 0)
    finished: list[str] = []

    async def patient() -> None:
        await timeline.wait(0, second)
        finished.append("patient")

    async with anyio.create_task_group() as group:
        with anyio.move_on_after(0.05):
            group.start_soon(patient)
            await timeline.wait(0, first)  # this task pumps, then is cancelled
        gate.set()
    assert finished == ["patient"] and timeline.value(0) == second
    timeline.close()


@pytest.mark.anyio
async def test_a_waiter_cancelled_while_asleep_is_dropped_and_later_waits_still_wake(device):
    stream = device.create_stream()
    timeline = Timeline(1)
    gate = device.backend.latch(stream.handle)
    value = timeline.enqueue_advance(device.backend, stream.handle, 0)
    with anyio.move_on_after(0.05) as scope:
        await timeline.wait(0, value)  # asleep (asyncio: on a future of the loop) when cancelled
    assert scope.cancelled_caught and timeline.waiting == 0
    woken: list[int] = []

    async def waiter() -> None:
        await timeline.wait(0, value)
        woken.append(value)

    async with anyio.create_task_group() as group:
        group.start_soon(waiter)
        await anyio.sleep(0.02)
        gate.set()
    assert woken == [value] and timeline.waiting == 0
    timeline.close()


@pytest.mark.anyio
async def test_more_wake_ups_than_one_read_drains_leave_later_waits_right(device):
    """Each host function writes a byte; one read drains at most READ_BYTES of them, and what it
    leaves keeps the pipe readable: later waits neither hang nor return before their value."""
    from aclpipe.runtime.completion.loop_reader import READ_BYTES

    stream = device.create_stream()
    timeline = Timeline(1)
    gate = device.backend.latch(stream.handle)
    backlog = [timeline.enqueue_advance(device.backend, stream.handle, 0) for _ in range(READ_BYTES * 3)]
    gate.set()
    with anyio.fail_after(5):
        await timeline.wait(0, backlog[-1])
    for _ in range(3):  # the bytes the first read left behind wake these waits early: they sleep on
        gate = device.backend.latch(stream.handle)
        value = timeline.enqueue_advance(device.backend, stream.handle, 0)
        returned: list[int] = []

        async def wait(value: int = value, returned: list[int] = returned) -> None:
            await timeline.wait(0, value)
            returned.append(timeline.value(0))

        async with anyio.create_task_group() as group:
            group.start_soon(wait)
            await anyio.sleep(0.01)
            assert returned == [] and timeline.value(0) == value - 1
            gate.set()
        assert returned == [value]
    timeline.close()


def test_counters_only_move_forward(device):
    stream = device.create_stream()
    timeline = Timeline(1)
    for _ in range(3):
        timeline.enqueue_advance(device.backend, stream.handle, 0)
    stream.sync()
    assert timeline.value(0) == 3 and timeline.next_value(0) == 4
    assert HOST_FUNC_ADDRESS != 0
    timeline.close()
    with pytest.raises(Exception, match="closed"):
        timeline.enqueue_advance(device.backend, stream.handle, 0)


def test_passed_at_says_when_the_device_passed_a_value_while_its_stamp_is_kept(device):
    from aclpipe.runtime.completion import STAMPS

    stream = device.create_stream()
    timeline = Timeline(1)
    before = time.monotonic_ns()
    first = timeline.enqueue_advance(device.backend, stream.handle, 0)
    stream.sync()
    stamp = timeline.passed_at(0, first)
    assert stamp is not None and before <= stamp <= time.monotonic_ns()
    assert timeline.passed_at(0, first + 1) is None  # not passed yet
    assert timeline.passed_at(0, 0) is None
    for _ in range(STAMPS):
        timeline.enqueue_advance(device.backend, stream.handle, 0)
    stream.sync()
    assert timeline.passed_at(0, first) is None  # a later value took its place
    assert timeline.passed_at(0, first + STAMPS) is not None
    timeline.close()


def test_a_timeline_needs_lanes():
    with pytest.raises(ValueError, match="at least one lane"):
        Timeline(0)
