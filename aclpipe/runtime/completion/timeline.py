"""Completion: per-lane timeline counters advanced by C host functions.

Each lane (normally one per stream) owns a monotonic counter.  To learn that a stream
passed a point, the host enqueues :meth:`Timeline.enqueue_advance`: a C host function
(``aclpipe_advance``, compiled at install from :mod:`aclpipe.runtime._hostfunc_build`; see
:mod:`aclpipe.runtime.completion`) that stores the new value and writes one byte to a wake
pipe.  No Python runs on the runtime thread (ARCHITECTURE.md 3.2, 6).

Waiting:

- ``await timeline.wait(lane, value)`` on the event loop.  Under asyncio the pipe stays
  registered with the loop while the timeline lives (:class:`~aclpipe.runtime.completion.loop_reader.LoopReader`):
  its callback drains the pipe and wakes every waiter whose value its lane has reached, so a
  wait costs no selector calls.  Under trio, awaiting tasks take turns as the *pump*: one of
  them waits for the pipe to become readable (trio keeps the descriptor registered between
  waits), drains it and wakes the others; when the pump is satisfied (or cancelled) it hands
  the role to another waiter.  Neither needs a background task.  A timeline made with
  ``wake=False`` has no pipe: its async waits block a worker thread
  (:func:`anyio.to_thread.run_sync`) on :meth:`wait_blocking` instead.
- :meth:`Timeline.wait_blocking` from any thread: it records an event on the lane's stream
  behind the host function that publishes the value and synchronizes it, so it never polls.

Lifetime.  The counters, the host functions' arguments and the wake pipe are what a host
function touches on a runtime thread, so they must outlive every host function already
enqueued, whatever happens to the Python objects: they live in a
:class:`~aclpipe.runtime.completion.lanes.LaneState`, released only once the device has passed (and
returned from) every host function enqueued and no task waits; until then a closed or
collected timeline's state is parked and watched (see :mod:`aclpipe.runtime.completion.lanes`).  An
owner may attach its own device memory to that release (:meth:`Timeline.close`).

Closing the device.  Lanes whose work went to a device that is closed with that work not
done are *lost*: their waiters get :class:`ClosedResourceError` at once.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import os
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio

from ...errors import ClosedResourceError
from .host_function import HOST_FUNC_ADDRESS, STAMPS, ffi
from .lanes import LaneState, parked_states, retire, sweep, try_release
from .loop_reader import READ_BYTES, LoopReader

if TYPE_CHECKING:
    from ...backends.protocol import Backend
    from ..stream import Stream

__all__ = ["HOST_FUNC_ADDRESS", "Timeline", "parked_timelines"]


def parked_timelines() -> int:
    """How many closed timelines still wait for the device to pass their host functions."""
    return parked_states()


class _Waiter:
    """A task asleep until its lane reaches ``value``: on an anyio event, or (asyncio's reader
    path) on a bare future of the loop, which wakes it without the event layers."""

    __slots__ = ("event", "future", "live", "promoted", "seq", "value")

    def __init__(self, value: int, seq: int, future: asyncio.Future[None] | None = None):
        self.value = value
        self.seq = seq
        self.future = future
        self.event = anyio.Event() if future is None else None
        self.live = True
        self.promoted = False  # woken to take over as pump, not because its value arrived

    def wake(self) -> None:
        if self.future is not None:
            if not self.future.done():  # a cancelled waiter's future is done already
                self.future.set_result(None)
        else:
            assert self.event is not None
            self.event.set()

    async def sleep(self) -> None:
        if self.future is not None:
            await self.future
        else:
            assert self.event is not None
            await self.event.wait()

    def __lt__(self, other: _Waiter) -> bool:
        return (self.value, self.seq) < (other.value, other.seq)


class Timeline:
    """Monotonic counters, one per lane, that device streams advance and the host awaits.

    Parameters
    ----------
    lanes:
        Number of counters to start with (the pipeline uses one per stream); :meth:`add_lane`
        and :meth:`lane_for` add more.
    wake:
        Give the timeline a wake pipe, so that tasks on one event loop await it without
        threads (the pipeline's).  Without one, async waits block a worker thread.
    """

    def __init__(self, lanes: int = 1, *, wake: bool = True):
        if lanes <= 0:
            raise ValueError(f"a timeline needs at least one lane, got {lanes}")
        sweep()
        self._state = LaneState(wake)
        for _ in range(lanes):
            self._state.add_lane()
        self._lanes = self._state.lanes  # shared list: add_lane appends to it
        self._by_stream: weakref.WeakKeyDictionary[Stream, int] = weakref.WeakKeyDictionary()
        self._heaps: list[list[_Waiter]] = [[] for _ in range(lanes)]
        self._seq = itertools.count()
        self._pumping = False
        self.closed = False
        self._wakeups = 0
        self._reader = (LoopReader(self._state.read_fd, self, Timeline._wake_satisfied)
                        if self._state.read_fd >= 0 else None)
        self._finalizer = weakref.finalize(self, _retire, self._state, self._reader)

    @property
    def lanes(self) -> int:
        return len(self._lanes)

    def add_lane(self) -> int:
        """A new lane; returns its index."""
        lane = self._state.add_lane()
        self._heaps.append([])
        return lane

    def assign(self, stream: Stream, lane: int) -> None:
        """Make ``lane`` the lane of ``stream`` (the pipeline numbers its streams itself)."""
        if not 0 <= lane < len(self._lanes):
            raise ValueError(f"lane {lane} does not exist: the timeline has {len(self._lanes)}")
        self._by_stream[stream] = lane

    def lane_for(self, stream: Stream) -> int:
        """The lane of ``stream``, added on first use (lanes of dropped streams are not reused)."""
        lane = self._by_stream.get(stream)
        if lane is None:
            with self._state.lock:
                lane = self._by_stream.get(stream)
                if lane is None:
                    lane = self._by_stream[stream] = self.add_lane()
        return lane

    # -- host side: enqueue ------------------------------------------------------------------
    def value(self, lane: int) -> int:
        """The lane's current counter (what the device has passed)."""
        return int(self._lanes[lane].counter[0])

    def passed_at(self, lane: int, value: int) -> int | None:
        """When the device passed ``value`` on ``lane``: ``time.monotonic_ns()`` as its host
        function started, or None when it has not passed it yet, or when a value
        :data:`~aclpipe.runtime.completion.STAMPS` or more later was passed since (its stamp
        took the place)."""
        counter = self._lanes[lane].counter
        if value <= 0 or counter[0] < value:
            return None
        at = 2 + 2 * (value % STAMPS)
        before, stamp, after = counter[at + 1], counter[at], counter[at + 1]
        return int(stamp) if before == value == after else None

    def next_value(self, lane: int) -> int:
        """The value the next :meth:`enqueue_advance` on ``lane`` will publish."""
        return self._lanes[lane].enqueued + 1

    def enqueue_advance(self, backend: Backend, stream: Any, lane: int,
                        copies: tuple[Any, object] | None = None) -> int:
        """Enqueue on ``stream`` (a backend handle) a host function advancing ``lane``; returns
        the value to await.  ``copies``: ``(table, keep)``, a :meth:`HostCopies.fresh` table the
        host function copies before it publishes, and what its destinations live in."""
        if self.closed:
            raise ClosedResourceError("the timeline is closed")
        state = self._lanes[lane]
        # Under the lock: a value read by next_value() before this call must be published by a
        # host function enqueued after that read (threads may share a stream's lane).
        with self._state.lock:
            value = state.enqueued + 1
            args = ffi.new("aclpipe_advance_args *", {
                "counter": state.counter, "value": value, "wake_fd": self._state.write_fd})
            if copies is not None:
                args.ncopies, args.copies = len(copies[0]), copies[0]
            state.forget_passed()
            # The args (with the copies' table and destinations) must outlive the host function
            # that reads them: kept until the lane passes.
            state.pending.append((value, args if copies is None else (args, copies)))
            backend.host_func_c(stream, HOST_FUNC_ADDRESS, int(ffi.cast("uintptr_t", args)))
            state.enqueued = value
            state.backend, state.stream = backend, stream
            state.lost = None  # new work on a device that is open again (a reopened backend)
        return value

    def advance(self, stream: Stream) -> tuple[int, int]:
        """Enqueue an advance of ``stream``'s lane; returns ``(lane, value)``."""
        lane = self.lane_for(stream)
        return lane, self.enqueue_advance(stream.device.backend, stream.handle, lane)

    # -- any thread: block ---------------------------------------------------------------------
    def wait_blocking(self, lane: int, value: int, timeout: float | None = None) -> bool:
        """Block until ``lane`` has reached ``value``; False when ``timeout`` seconds passed first.

        An event recorded now on the lane's stream lies behind the host function that publishes
        ``value`` (enqueued earlier), and host functions block their stream until they return,
        so once the event completes the counter has moved.  A stream error does not stop the
        wait: it belongs to whoever synchronizes that stream.
        """
        return self._state.wait_blocking(lane, value, timeout)

    # -- loop side: await --------------------------------------------------------------------
    async def wait(self, lane: int, value: int) -> None:
        """Return once ``lane`` has reached ``value``.

        Raises
        ------
        ClosedResourceError
            The lane's device was closed before it got there (the work is abandoned).
        """
        if self._lanes[lane].counter[0] >= value:
            return
        state, reader = self._state, self._reader
        loop = asyncio._get_running_loop()  # None under trio (low-level asyncio API, public)
        with state.lock:
            state.waiting += 1  # the pipe stays open while this task may read it
            # Decided under the lock close() takes: a closed timeline makes no new registration
            # (nobody would be left to remove it), and the one it has stays while tasks wait.
            use_reader = reader is not None and loop is not None and (
                not self.closed or reader.registered_on(loop))
        try:
            if reader is None:
                await self._wait_in_thread(lane, value)
            elif use_reader:
                assert loop is not None
                await self._wait_with_reader(reader, loop, lane, value)
            else:
                await self._wait_on_pipe(lane, value)
        finally:
            with state.lock:
                state.waiting -= 1
                last = state.closed and not state.waiting
                if last and reader is not None:
                    reader.close()  # closed while this task waited: unregister now
            if last:
                try_release(state)  # it may be the last user

    async def _wait_in_thread(self, lane: int, value: int) -> None:
        state = self._lanes[lane]
        while state.value < value:
            self._check_lost(lane, value)
            await anyio.to_thread.run_sync(self.wait_blocking, lane, value, abandon_on_cancel=True)

    async def _wait_with_reader(self, reader: LoopReader, loop: asyncio.AbstractEventLoop, lane: int,
                                value: int) -> None:
        """asyncio: sleep until the loop's reader finds the lane at ``value`` (or lost).  No
        await comes between reading the counter and queueing the waiter, and the host
        function stores the counter before it writes the pipe, so no wake-up is missed."""
        if not reader.ensure(loop):
            await self._wait_on_pipe(lane, value)
            return
        counter = self._lanes[lane].counter
        while counter[0] < value:
            self._check_lost(lane, value)
            future = loop.create_future()
            waiter = _Waiter(value, next(self._seq), future)
            heapq.heappush(self._heaps[lane], waiter)
            try:
                await future  # not waiter.sleep(): one coroutine frame fewer to resume, cold
            except BaseException:
                waiter.live = False
                raise

    @property
    def wakeups(self) -> int:
        """How many times a waiting task found the pipe written (wake-ups, not host functions)."""
        return self._wakeups + (self._reader.wakeups if self._reader is not None else 0)

    async def _wait_on_pipe(self, lane: int, value: int) -> None:
        counter = self._lanes[lane].counter
        while counter[0] < value:
            self._check_lost(lane, value)
            if self._pumping:
                promoted = await self._wait_as_follower(lane, value)
                if promoted and (counter[0] >= value or self._lanes[lane].lost) and not self._pumping:
                    # Promoted to pump, but this task is done meanwhile: pass the role on, or the
                    # waiters behind it would sleep with nobody reading the pipe.
                    self._promote_one()
                continue
            self._pumping = True
            try:
                while counter[0] < value and self._lanes[lane].lost is None:
                    await anyio.wait_readable(self._state.read_fd)
                    self._drain()
                    self._wake_satisfied()
            finally:
                self._pumping = False
                self._promote_one()

    def _check_lost(self, lane: int, value: int) -> None:
        reason = self._lanes[lane].lost
        if reason is not None and self._lanes[lane].value < value:
            raise ClosedResourceError(f"{reason}: lane {lane} will not reach {value}")

    async def drain(self) -> None:
        """Return once every lane has passed everything enqueued on it so far."""
        for lane, state in enumerate(self._lanes):
            await self.wait(lane, state.enqueued)

    async def _wait_as_follower(self, lane: int, value: int) -> bool:
        """Sleep until woken; returns whether this task was promoted to pump."""
        waiter = _Waiter(value, next(self._seq))
        heapq.heappush(self._heaps[lane], waiter)
        try:
            await waiter.sleep()
        except BaseException:
            if waiter.live:
                waiter.live = False
            elif not self._pumping:
                self._promote_one()  # promoted but leaving: pass the role on
            raise
        return waiter.promoted

    def _drain(self) -> None:
        # One read: a byte written after it leaves the pipe readable, so the pump's next wait
        # returns at once (a second read would only cost a syscall and an exception per wake).
        try:
            if os.read(self._state.read_fd, READ_BYTES):
                self._wakeups += 1
        except BlockingIOError:
            pass

    def _wake_satisfied(self) -> None:
        for lane, heap in enumerate(self._heaps):
            if not heap:  # the usual lane: nobody waits on it
                continue
            reached = self._lanes[lane].counter[0]
            lost = self._lanes[lane].lost is not None
            while heap and (lost or heap[0].value <= reached or not heap[0].live):
                waiter = heapq.heappop(heap)
                if waiter.live:
                    waiter.live = False
                    waiter.wake()

    def _promote_one(self) -> None:
        if not any(self._heaps):  # nobody to wake or promote (a lone pump leaving)
            return
        self._wake_satisfied()
        for heap in self._heaps:
            while heap:
                waiter = heapq.heappop(heap)
                if waiter.live:
                    waiter.live = False
                    waiter.promoted = True
                    waiter.wake()
                    return

    @property
    def waiting(self) -> int:
        return sum(1 for heap in self._heaps for waiter in heap if waiter.live)

    @property
    def passed_everything(self) -> bool:
        """Whether every lane has passed everything enqueued on it."""
        return self._state.all_passed()

    @property
    def lost(self) -> bool:
        """Whether a lane's device was closed with work on it not done."""
        return any(lane.lost is not None for lane in self._lanes)

    def close(self, on_release: Callable[[], None] | None = None) -> None:
        """Refuse further advances.  The pipe and counters are released once the device has
        passed every host function already enqueued and no task waits (at once when that is
        so already); ``on_release`` runs first then, on whichever thread releases: an owner
        hands over memory the device may still touch this way (the pipeline does when it is
        dropped, or its ``aclose`` is cancelled, with runs in flight)."""
        if self.closed:
            if on_release is not None:
                raise ClosedResourceError("the timeline is already closed: nothing can be attached to it")
            return
        self.closed = True
        self._finalizer.detach()
        with self._state.lock:
            if self._reader is not None and not self._state.waiting:
                self._reader.close()  # else the last waiter leaving does
        retire(self._state, on_release)


def _retire(state: LaneState, reader: LoopReader | None) -> None:
    """A collected timeline's finalizer: unregister its pipe from the loop, then retire it."""
    if reader is not None:
        reader.close(defer=True)
    retire(state)
