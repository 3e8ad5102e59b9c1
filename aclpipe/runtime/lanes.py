"""Lane state: what completion host functions touch on runtime threads, and how long it lives.

A :class:`~aclpipe.runtime.timeline.Timeline` keeps its counters, the host functions'
arguments and its wake pipe in a :class:`LaneState`, because a host function already
enqueued may run at any later time on a runtime thread, whatever happens to the Python
objects.  The rules:

- A state is *released* (its pipe closed, its wait events destroyed, the callbacks its
  owner attached run) only once it is closed, every lane's ``counter[1]`` (written by the
  host function as its very last touch) has reached everything enqueued, and no task is
  inside ``Timeline.wait`` (a pump may be blocked reading the pipe).  Anything earlier could
  let a host function write into a closed, perhaps reused, descriptor.
- A state closed (or collected) before that is *parked*: a watcher thread waits on the
  device for its lanes (an event recorded behind their last host functions), then releases
  it.  Nothing polls.  A device that never gets there (a hung one) keeps the state, and
  whatever its owner attached, for the life of the process: a leak, never a write into
  freed memory.
- When a device is closed, every lane whose work went to it and is not done yet is marked
  *lost*: waiters stop waiting and get :class:`ClosedResourceError` at once, instead of
  waiting for host functions that may never run.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import AclpipeError, BackendError
from .completion import COUNTER_LENGTH, ffi
from .event import timeout_ms

if TYPE_CHECKING:
    from ..backends.protocol import Backend

__all__ = ["Lane", "LaneState", "device_closed", "parked_states", "retire", "sweep"]


@dataclass(eq=False)
class Lane:
    """One lane: its counters and what its host functions need until the device passes them."""

    #: cdata int64_t[COUNTER_LENGTH]: [0] what the device passed, [1] host functions fully returned,
    #: [2 + v % STAMPS] when value v was passed (monotonic ns)
    counter: Any
    enqueued: int = 0  # the newest value enqueued
    #: (value, args cdata, with the copies' table and destinations if any) per host function not passed
    pending: collections.deque[tuple[int, Any]] = field(default_factory=collections.deque)
    backend: Backend | None = None  # where the lane's latest host function went
    stream: Any = None  # that stream's handle
    event: Any = None  # reused by wait_blocking: recorded behind the host functions
    lost: str | None = None  # set when the lane's device was closed with work not done

    @property
    def value(self) -> int:
        return int(self.counter[0])

    @property
    def returned(self) -> int:
        return int(self.counter[1])

    def forget_passed(self) -> None:
        # The host function reads its args before it moves counter[0]: passed args may go.
        passed = self.counter[0]
        pending = self.pending
        while pending and pending[0][0] <= passed:
            pending.popleft()


_LIVE: weakref.WeakSet[LaneState] = weakref.WeakSet()  # every state not yet released (device_closed)
_PARKED: list[LaneState] = []  # closed, waiting for the device; kept alive here
# Guards both: states are made, parked and released on any thread.  Reentrant because a
# collected timeline's finalizer (which parks) may run inside any allocation, this module's own
# critical sections included; the operations under it tolerate that interleaving.
_PARKED_LOCK = threading.RLock()


class LaneState:
    """Everything runtime threads may touch (counters, host-function args, the wake pipe), and
    the bookkeeping that decides when it may be released."""

    def __init__(self, wake: bool):
        self.lanes: list[Lane] = []
        self.read_fd, self.write_fd = os.pipe() if wake else (-1, -1)
        if wake:
            os.set_blocking(self.read_fd, False)
            os.set_blocking(self.write_fd, False)
        self.lock = threading.RLock()  # lanes are added, advanced and marked lost from any thread
        self.waiting = 0  # tasks inside Timeline.wait: one of them may be reading the pipe
        self.closed = False
        self.released = False  # claimed for release (set as it starts)
        self.freed = threading.Event()  # set once release() has finished: callbacks run, pipe closed
        self.on_release: list[Callable[[], None]] = []
        with _PARKED_LOCK:
            _LIVE.add(self)

    def add_lane(self) -> int:
        with self.lock:
            self.lanes.append(Lane(ffi.new(f"int64_t[{COUNTER_LENGTH}]")))
            return len(self.lanes) - 1

    def all_passed(self) -> bool:
        return all(lane.value >= lane.enqueued for lane in self.lanes)

    def all_returned(self) -> bool:
        return all(lane.returned >= lane.enqueued for lane in self.lanes)

    def wake(self) -> None:
        """Wake whoever pumps the pipe (under the lock: the pipe may not be closed meanwhile)."""
        with self.lock:
            if self.read_fd >= 0 and not self.released:
                try:
                    os.write(self.write_fd, b"\0")
                except BlockingIOError:
                    pass  # a full pipe wakes the reader anyway

    def mark_lost(self, backend: Backend, reason: str) -> None:
        """The device behind ``backend`` is closing: lanes with work on it not done are lost."""
        with self.lock:
            lost = [lane for lane in self.lanes if lane.backend is backend and lane.value < lane.enqueued]
            for lane in lost:
                lane.lost = reason
        if lost:
            self.wake()

    def wait_blocking(self, index: int, value: int, timeout: float | None = None) -> bool:
        """Block until lane ``index`` has reached ``value``; False when ``timeout`` passed first.

        An event recorded now on the lane's stream lies behind the host function that publishes
        ``value`` (enqueued earlier), and host functions block their stream until they return,
        so once the event completes both counters have moved.  A stream error does not stop the
        wait: it belongs to whoever synchronizes that stream.
        """
        lane = self.lanes[index]
        if lane.value >= value:
            return True
        if value > lane.enqueued:
            raise ValueError(f"lane {index} will never reach {value}: only {lane.enqueued} is enqueued")
        self.sync_behind(index, timeout)
        return lane.value >= value

    def sync_behind(self, index: int, timeout: float | None = None) -> None:
        """Wait until the lane's stream has passed, and returned from, every host function
        enqueued on it so far (``counter[1]`` is then up to date), or ``timeout`` passed."""
        lane = self.lanes[index]
        backend, stream = lane.backend, lane.stream
        if backend is None:
            return  # nothing was ever enqueued on this lane
        with self.lock:
            if lane.event is None:
                lane.event = backend.event_create(False)
            event = lane.event
            backend.event_record(event, stream)
        try:
            # Rounded up to >= 1 ms: a shrinking remainder must never become the 0 the runtime refuses.
            backend.event_sync(event, timeout_ms(timeout))
        except BackendError:
            pass  # a timeout (the caller checks the counters) or the stream's error (not ours to consume)

    def releasable(self) -> bool:
        return self.closed and not self.released and self.waiting == 0 and self.all_returned()

    def release(self) -> None:
        """Run the attached callbacks, destroy the wait events, close the pipe (once)."""
        first: BaseException | None = None
        for callback in self.on_release:
            try:
                callback()
            except BaseException as error:  # noqa: BLE001 - the pipe must be closed whatever happens
                first = first or error
        self.on_release.clear()
        for lane in self.lanes:
            if lane.event is not None and lane.backend is not None and not lane.backend.closed:
                try:
                    lane.backend.event_destroy(lane.event)
                except AclpipeError:
                    pass  # the device is going away; nothing waits on it any more
            lane.event = None
            lane.pending.clear()
        with self.lock:
            if self.read_fd >= 0:
                os.close(self.read_fd)
                os.close(self.write_fd)
                self.read_fd = self.write_fd = -1
        self.freed.set()
        if first is not None:
            raise first




def try_release(state: LaneState) -> bool:
    """Release ``state`` now if nothing can touch it any more; True when it is released."""
    with state.lock:
        if state.released:
            return True
        if not state.releasable():
            return False
        state.released = True  # claimed: whoever got here first releases it
    with _PARKED_LOCK:
        with contextlib.suppress(ValueError):  # not parked (released where it was closed)
            _PARKED.remove(state)
        _LIVE.discard(state)
    state.release()
    return True


def retire(state: LaneState, on_release: Callable[[], None] | None = None) -> None:
    """Close ``state``: release it now if nothing can touch it any more, else park it and watch
    the device until then.  ``on_release`` runs first, at release (on whichever thread
    releases: this one, the watcher, or the last waiter leaving)."""
    sweep()
    with state.lock:
        state.closed = True
        if on_release is not None:
            state.on_release.append(on_release)
    if try_release(state):
        return
    with _PARKED_LOCK:
        if state in _PARKED:
            return
        _PARKED.append(state)
    threading.Thread(target=_watch, args=(state,), name="aclpipe-lane-watcher", daemon=True).start()


def _watch(state: LaneState) -> None:
    """Wait on the device until every lane of ``state`` has passed what was enqueued, then
    release it (a loop task still waiting releases it when it leaves instead)."""
    for index, lane in enumerate(list(state.lanes)):
        if lane.returned >= lane.enqueued:
            continue
        try:
            # Not wait_blocking: counter[0] may have moved while the host function is still returning.
            state.sync_behind(index)
        except AclpipeError:
            return  # the device was closed under it: a later sweep releases the state
    try_release(state)


def sweep() -> None:
    """Release every parked state the device has passed."""
    with _PARKED_LOCK:
        parked = list(_PARKED)
    for state in parked:
        try_release(state)


def parked_states() -> int:
    """How many closed states still wait for the device to pass their host functions."""
    sweep()
    with _PARKED_LOCK:
        return len(_PARKED)


def device_closed(backend: Backend, name: str) -> None:
    """Called as the device behind ``backend`` closes: waiters for work on it stop waiting."""
    reason = f"device {name} was closed while work on it was in flight"
    with _PARKED_LOCK:
        states = list(_LIVE)
    for state in states:
        state.mark_lost(backend, reason)
