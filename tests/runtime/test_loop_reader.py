"""The asyncio loop's persistent registration of a timeline's wake pipe (runtime/loop_reader.py)."""

from __future__ import annotations

import asyncio
import gc
import os

import anyio
import pytest

from aclpipe.runtime.completion.timeline import Timeline


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


class _CountingLoop(asyncio.SelectorEventLoop):
    """A loop that counts reader registrations."""

    def __init__(self) -> None:
        super().__init__()
        self.added = 0
        self.removed = 0

    def add_reader(self, fd, callback, *args):  # type: ignore[no-untyped-def]
        self.added += 1
        return super().add_reader(fd, callback, *args)

    def remove_reader(self, fd):  # type: ignore[no-untyped-def]
        self.removed += 1
        return super().remove_reader(fd)


def _run(coroutine_function, *args):
    loop = _CountingLoop()
    try:
        loop.run_until_complete(coroutine_function(*args))
    finally:
        loop.close()
    return loop


async def _waits(device, timeline: Timeline, stream, count: int) -> None:
    for _ in range(count):
        value = timeline.enqueue_advance(device.backend, stream.handle, 0)
        await timeline.wait(0, value)


def test_the_pipe_is_registered_once_for_many_waits_and_unregistered_on_close(device):
    stream = device.create_stream()
    timeline = Timeline(1)

    async def main() -> None:
        await _waits(device, timeline, stream, 20)
        fd = timeline._reader._fd
        assert fd >= 0 and _is_open(fd)
        timeline.close()
        assert not _is_open(fd)  # closed on the loop's own thread: at once

    loop = _run(main)
    assert (loop.added, loop.removed) == (1, 1)
    assert timeline.wakeups >= 1


def test_a_second_loop_takes_the_registration_over_and_the_first_duplicate_is_closed(device):
    stream = device.create_stream()
    timeline = Timeline(1)
    first = _run(_waits, device, timeline, stream, 3)
    old = timeline._reader._fd
    second = _run(_waits, device, timeline, stream, 3)  # the first loop is closed by now
    assert first.added == second.added == 1
    assert not _is_open(old) or old == timeline._reader._fd  # the number may have been reused
    timeline.close()
    assert timeline._reader._fd == -1


def test_a_dropped_timeline_unregisters_through_its_loop(device):
    stream = device.create_stream()

    async def main() -> None:
        timeline = Timeline(1)
        await _waits(device, timeline, stream, 2)
        fd = timeline._reader._fd
        del timeline
        gc.collect()
        await asyncio.sleep(0)  # the finalizer handed the removal to the loop's queue
        await asyncio.sleep(0)
        assert not _is_open(fd)

    loop = _run(main)
    assert loop.added == loop.removed == 1
    stream.sync()


def test_waiting_on_a_closed_timeline_makes_no_new_registration(device):
    stream = device.create_stream()
    timeline = Timeline(1)
    value = timeline.enqueue_advance(device.backend, stream.handle, 0)
    timeline.close()

    async def main() -> None:
        await timeline.wait(0, value)  # the pump path: nothing left registered behind it

    loop = _run(main)
    assert loop.added == loop.removed  # anyio's wait_readable registers and removes per wait
    assert timeline._reader._fd == -1


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_many_waiters_on_many_lanes_all_wake(device, backend):
    streams = [device.create_stream() for _ in range(3)]
    timeline = Timeline(3)

    async def main() -> None:
        async with anyio.create_task_group() as group:
            for round_ in range(5):
                for lane, stream in enumerate(streams):
                    value = timeline.enqueue_advance(device.backend, stream.handle, lane)
                    group.start_soon(timeline.wait, lane, value)
                    if round_ % 2:
                        group.start_soon(timeline.wait, lane, value)
        assert all(timeline.value(lane) == 5 for lane in range(3))

    anyio.run(main, backend=backend)
    timeline.close()


def test_a_loop_that_cannot_watch_descriptors_leaves_no_duplicate_open(device):
    """Without add_reader (Windows' proactor loop) the timeline falls back to the pump (anyio
    watches the pipe another way there); no duplicate descriptor is left behind."""

    class _NoReaders(asyncio.SelectorEventLoop):
        def add_reader(self, fd, callback, *args):  # type: ignore[no-untyped-def]
            raise NotImplementedError

    stream = device.create_stream()
    timeline = Timeline(1)
    loop = _NoReaders()
    before = len(os.listdir("/proc/self/fd"))
    try:
        loop.run_until_complete(_waits(device, timeline, stream, 3))
        assert timeline.value(0) == 3 and timeline._reader._fd == -1
    finally:
        loop.close()
    assert len(os.listdir("/proc/self/fd")) <= before
    stream.sync()
    timeline.close()
