"""Completion hand-off the pipeline relies on: every awaiting task resumes once its value arrives."""

from __future__ import annotations

import time

import anyio
import anyio.lowlevel
import pytest

from aclpipe.runtime.completion.timeline import Timeline

pytestmark = pytest.mark.anyio


async def test_a_promoted_waiter_whose_value_arrived_hands_the_pump_on(device):
    """The pump (value 1) leaves and promotes the next waiter (value 2); the device reaches 3
    before that waiter runs.  It must pass the role on, or the waiter for 3 sleeps for ever."""
    stream = device.create_stream()
    timeline = Timeline(1)
    first_gate = device.backend.latch(stream.handle)
    values = [timeline.enqueue_advance(device.backend, stream.handle, 0)]
    second_gate = device.backend.latch(stream.handle)
    values += [timeline.enqueue_advance(device.backend, stream.handle, 0) for _ in range(2)]
    done: list[int] = []

    async def pump() -> None:
        await timeline.wait(0, values[0])
        # Still in the step that promoted the next waiter: let the device run to the end
        # while the loop is held, so the promoted waiter finds its value already there.
        second_gate.set()
        deadline = time.monotonic() + 10
        while timeline.value(0) < values[2] and time.monotonic() < deadline:
            time.sleep(0.001)  # noqa: ASYNC251 - blocking the loop on purpose
        done.append(values[0])

    async def follower(value: int) -> None:
        await timeline.wait(0, value)
        done.append(value)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(pump)
            await anyio.sleep(0.01)  # the first task is now the pump
            group.start_soon(follower, values[1])
            await anyio.sleep(0.01)
            group.start_soon(follower, values[2])
            await anyio.sleep(0.01)
            first_gate.set()
    assert sorted(done) == values and timeline.waiting == 0
    timeline.close()


async def test_many_waiters_on_many_lanes_all_resume(device):
    streams = [device.create_stream() for _ in range(3)]
    timeline = Timeline(3)
    gates = [device.backend.latch(stream.handle) for stream in streams]
    targets = [(lane, timeline.enqueue_advance(device.backend, stream.handle, lane))
               for _ in range(30) for lane, stream in enumerate(streams)]
    done: list[tuple[int, int]] = []

    async def waiter(lane: int, value: int) -> None:
        await timeline.wait(lane, value)
        done.append((lane, value))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            for lane, value in reversed(targets):
                group.start_soon(waiter, lane, value)
            await anyio.sleep(0.01)
            for gate in gates:
                gate.set()
                await anyio.lowlevel.checkpoint()
    assert sorted(done) == sorted(targets) and timeline.waiting == 0
    timeline.close()
