"""Completion: per-lane timeline counters advanced by C host functions, awaited from anyio.

Each lane (normally one per stream) owns a monotonic counter.  To learn that a stream
passed a point, the host enqueues :meth:`Timeline.enqueue_advance`: a C host function
(``aclpipe_advance``, compiled at install) that stores the new value and writes one byte
to a wake pipe.  No Python runs on the runtime thread.  On the event loop, awaiting tasks
take turns as the *pump*: one of them waits for the pipe to become readable, drains it,
and wakes every waiter whose value its lane has reached; when the pump is satisfied (or
cancelled) it hands the role to another waiter.  This needs no background task, so it
works under asyncio and trio alike (ARCHITECTURE.md 6).
"""

from __future__ import annotations

import heapq
import itertools
import os
from typing import Any

import anyio

from ._hostfunc import ffi, lib
from .errors import ClosedResourceError

__all__ = ["HOST_FUNC_ADDRESS", "Timeline"]

#: Address of ``aclpipe_advance``: an ``aclrtHostFunc`` (``void (*)(void *)``).
HOST_FUNC_ADDRESS: int = int(ffi.cast("uintptr_t", ffi.addressof(lib, "aclpipe_advance")))


class _Waiter:
    __slots__ = ("event", "live", "promoted", "seq", "value")

    def __init__(self, value: int, seq: int):
        self.value = value
        self.seq = seq
        self.event = anyio.Event()
        self.live = True
        self.promoted = False  # woken to take over as pump, not because its value arrived

    def __lt__(self, other: _Waiter) -> bool:
        return (self.value, self.seq) < (other.value, other.seq)


class Timeline:
    """Monotonic counters, one per lane, that device streams advance and tasks await.

    Parameters
    ----------
    lanes:
        Number of counters (the pipeline uses one per stream).
    """

    def __init__(self, lanes: int):
        if lanes <= 0:
            raise ValueError(f"a timeline needs at least one lane, got {lanes}")
        self.lanes = lanes
        self._counters = ffi.new("int64_t[]", lanes)
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(self._write_fd, False)
        # Args must outlive the host function that reads them: kept until the lane passes them.
        self._args: list[list[tuple[int, Any]]] = [[] for _ in range(lanes)]
        self._next = [0] * lanes
        self._heaps: list[list[_Waiter]] = [[] for _ in range(lanes)]
        self._seq = itertools.count()
        self._pumping = False
        self.closed = False
        self.wakeups = 0

    # -- host side: enqueue ------------------------------------------------------------------
    def value(self, lane: int) -> int:
        """The lane's current counter (what the device has passed)."""
        return int(self._counters[lane])

    def next_value(self, lane: int) -> int:
        """The value the next :meth:`enqueue_advance` on ``lane`` will publish."""
        return self._next[lane] + 1

    def enqueue_advance(self, backend: Any, stream: Any, lane: int) -> int:
        """Enqueue on ``stream`` a host function advancing ``lane``; returns the value to await."""
        if self.closed:
            raise ClosedResourceError("the timeline is closed")
        self._next[lane] += 1
        value = self._next[lane]
        args = ffi.new("aclpipe_advance_args *", {
            "counter": self._counters + lane, "value": value, "wake_fd": self._write_fd})
        self._forget_passed(lane)
        self._args[lane].append((value, args))
        backend.host_func_c(stream, HOST_FUNC_ADDRESS, int(ffi.cast("uintptr_t", args)))
        return value

    def _forget_passed(self, lane: int) -> None:
        passed = self._counters[lane]
        pending = self._args[lane]
        while pending and pending[0][0] <= passed:
            pending.pop(0)

    # -- loop side: await --------------------------------------------------------------------
    async def wait(self, lane: int, value: int) -> None:
        """Return once ``lane`` has reached ``value``."""
        while self._counters[lane] < value:
            if self._pumping:
                promoted = await self._wait_as_follower(lane, value)
                if promoted and self._counters[lane] >= value and not self._pumping:
                    # Promoted to pump, but this task's own value arrived meanwhile: pass the role
                    # on, or the waiters behind it would sleep with nobody reading the pipe.
                    self._promote_one()
                continue
            self._pumping = True
            try:
                while self._counters[lane] < value:
                    await anyio.wait_readable(self._read_fd)
                    self._drain()
                    self._wake_satisfied()
            finally:
                self._pumping = False
                self._promote_one()

    async def drain(self) -> None:
        """Return once every lane has passed everything enqueued on it so far."""
        for lane in range(self.lanes):
            await self.wait(lane, self._next[lane])

    async def _wait_as_follower(self, lane: int, value: int) -> bool:
        """Sleep until woken; returns whether this task was promoted to pump."""
        waiter = _Waiter(value, next(self._seq))
        heapq.heappush(self._heaps[lane], waiter)
        try:
            await waiter.event.wait()
        except BaseException:
            if waiter.live:
                waiter.live = False
            elif not self._pumping:
                self._promote_one()  # promoted but leaving: pass the role on
            raise
        return waiter.promoted

    def _drain(self) -> None:
        try:
            while os.read(self._read_fd, 4096):
                self.wakeups += 1
        except BlockingIOError:
            pass

    def _wake_satisfied(self) -> None:
        for lane, heap in enumerate(self._heaps):
            reached = self._counters[lane]
            while heap and (heap[0].value <= reached or not heap[0].live):
                waiter = heapq.heappop(heap)
                if waiter.live:
                    waiter.live = False
                    waiter.event.set()

    def _promote_one(self) -> None:
        self._wake_satisfied()
        for heap in self._heaps:
            while heap:
                waiter = heapq.heappop(heap)
                if waiter.live:
                    waiter.live = False
                    waiter.promoted = True
                    waiter.event.set()
                    return

    @property
    def waiting(self) -> int:
        return sum(1 for heap in self._heaps for waiter in heap if waiter.live)

    def close(self) -> None:
        """Close the wake pipe.  Call only once no stream can still advance this timeline."""
        if self.closed:
            return
        self.closed = True
        os.close(self._read_fd)
        os.close(self._write_fd)
