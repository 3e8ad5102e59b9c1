"""Happens-before checking with vector clocks, one clock per stream plus one for the host.

The sanitizer checks the *program*, not the luck of one run's timing: every access is
checked when it is enqueued, against the ordering that streams, events, waits and
synchronizations guarantee.  Rules (ARCHITECTURE.md 3.1):

- each task enqueued on stream *s* ticks ``clock[s][s]``; an enqueue also merges the host's
  clock into the stream's (the host did everything before it enqueued the task);
- ``record`` snapshots the stream's clock into the event; ``wait`` merges the snapshot;
- a stream or event synchronization merges into the host clock; so does a host function
  once it has returned (the host is told through it);
- two accesses to overlapping bytes, at least one a write, must be ordered: the earlier
  one's ``(actor, tick)`` must be covered by the later actor's clock.  Otherwise
  :class:`HazardError` names both;
- kernels may touch the bytes after each output and workspace, up to its CANN piece size
  ``ALIGN_UP(len, 32) + 32`` (``hicann/runtime`` ``docs/zh/api_ref/11-01_device_memory_malloc_and_free.md``,
  ``aclrtMalloc`` constraints).  Those *padding writes* count as writes, and a read of bytes
  whose latest write was another task's padding (no later real write covers them) is a
  :class:`HazardError` too: the neighbour was placed without the padding the rule asks for;
- an executor is a region of its own: its launches read it, ``aclDestroyAclOpExecutor``
  writes it from the host, so destroying one whose launch may still run is caught.

Accesses are tracked per allocation and byte: bytes with the same history share one segment
of a sorted map (:mod:`.intervals`), which keeps their last write and, per actor, their last
read since: a later read by the same actor is ordered after an earlier one, so the older
record can go.  A checked write is ordered after everything its bytes saw, so it replaces
their history.  An access costs a bisection plus the segments it overlaps, not a scan of the
allocation's every range, so checking a run grows linearly with the graph.

Several devices.  The host is one: every device's sanitizer shares one host clock (and one
lock), and stream names are unique in the process, so a clock may carry ticks of streams of
several devices.  A peer copy that one device's stream makes into another device's memory,
and a wait on another device's event, are then checked like any other access and wait.  A
stream that is destroyed has finished all its work under the host's eyes (its worker was
joined): it is *retired*, its ticks count as known to everyone and leave the host clock, so
the shared clock holds only live streams.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from ...errors import HazardError
from .intervals import Segment, SegmentMap
from .memory import Allocation

__all__ = ["HOST", "Clock", "Sanitizer"]

HOST = "host"
Clock = dict[str, int]


class Access:
    """One recorded access.  A plain class with slots, not a dataclass: one is made per access
    checked, and a frozen dataclass's ``__init__`` costs several times as much."""

    __slots__ = ("actor", "end", "padding", "start", "tick", "what", "write")

    def __init__(self, start: int, end: int, write: bool, actor: str, tick: int, what: str,
                 padding: bool = False) -> None:
        self.start = start
        self.end = end
        self.write = write
        self.actor = actor
        self.tick = tick
        self.what = what
        self.padding = padding  # bytes past a kernel's output it may touch (the 32-byte rule)

    def describe(self) -> str:
        kind = "padding write" if self.padding else "write" if self.write else "read"
        where = "on the host" if self.actor == HOST else f"on stream {self.actor}"
        return f"{kind} of bytes [{self.start:#x}, {self.end:#x}) by {self.what} {where} (tick {self.tick})"


#: Shared by every device's sanitizer: the host's clock, the lock guarding all clocks, and the
#: streams retired so far (see the module docstring).
_LOCK = threading.Lock()
_HOST_CLOCK: Clock = {HOST: 0}
_RETIRED: set[str] = set()


def _merge(into: Clock, other: Clock) -> None:
    for actor, tick in other.items():
        if into.get(actor, 0) < tick:
            into[actor] = tick


def _check(segment: Segment[Access], access: Access, clock: Clock, allocation: Allocation) -> None:
    """Raise if ``access`` is not ordered after an earlier access of ``segment``'s bytes it
    conflicts with (its last write; for a write, also its reads), or reads bytes that another
    task last touched as padding.  The common case, an ordered access, returns after a few
    comparisons: this runs for every access the simulator makes."""
    last = segment.last_write
    if last is not None and last.actor != access.actor and clock.get(last.actor, 0) < last.tick \
            and last.actor not in _RETIRED:
        raise _race(allocation, access, last)
    if access.write:
        for read in segment.reads.values():
            if read.actor != access.actor and clock.get(read.actor, 0) < read.tick and read.actor not in _RETIRED:
                raise _race(allocation, access, read)
    elif last is not None and last.padding:
        raise _garbage(allocation, access, last)


def _race(allocation: Allocation, access: Access, previous: Access) -> HazardError:
    return HazardError(
        f"data race on {allocation.describe()}: {access.describe()} is not ordered after "
        f"{previous.describe()}; add an event wait between the streams or synchronize first",
        first=previous.describe(), second=access.describe())


def _garbage(allocation: Allocation, access: Access, padding: Access) -> HazardError:
    """A read of bytes another task last touched as padding reads garbage."""
    lo, hi = max(padding.start, access.start), min(padding.end, access.end)
    return HazardError(
        f"{access.describe()} reads bytes [{lo:#x}, {hi:#x}) of {allocation.describe()} that {padding.what} "
        f"on {padding.actor} may have overwritten: kernels touch up to ALIGN_UP(len, 32) + 32 bytes of each "
        "output (CANN 11-01, aclrtMalloc), so pieces carved from one allocation need that padding",
        first=padding.describe(), second=access.describe())


class Sanitizer:
    """Vector-clock race detector for one device."""

    def __init__(self) -> None:
        self._lock = _LOCK
        self._clocks: dict[str, Clock] = {HOST: _HOST_CLOCK}
        self.checked = 0

    # -- clocks ------------------------------------------------------------------------------
    def add_stream(self, stream: str) -> None:
        with self._lock:
            self._clocks[stream] = {stream: 0}

    def retire(self, stream: str) -> None:
        """``stream`` was destroyed after finishing all its work (see the module docstring)."""
        with self._lock:
            self._clocks.pop(stream, None)
            _HOST_CLOCK.pop(stream, None)
            _RETIRED.add(stream)

    def enqueue(self, stream: str) -> Clock:
        """Tick ``stream`` for a new task enqueued by the host; returns the task's clock (a copy)."""
        with self._lock:
            clock = self._clocks[stream]
            _merge(clock, self._clocks[HOST])
            clock[stream] = clock.get(stream, 0) + 1
            return dict(clock)

    def snapshot(self, stream: str) -> Clock:
        with self._lock:
            clock = self._clocks[stream]
            _merge(clock, self._clocks[HOST])
            return dict(clock)

    def wait(self, stream: str, snapshot: Clock) -> None:
        with self._lock:
            _merge(self._clocks[stream], snapshot)

    def host_learns(self, snapshot: Clock) -> None:
        """The host now knows everything ``snapshot`` covers (a sync returned, a callback ran)."""
        with self._lock:
            _merge(self._clocks[HOST], snapshot)

    def host_tick(self) -> Clock:
        with self._lock:
            clock = self._clocks[HOST]
            clock[HOST] += 1
            return dict(clock)

    # -- accesses ----------------------------------------------------------------------------
    def access(self, allocation: Allocation, start: int, nbytes: int, *, write: bool, actor: str,
               clock: Clock, what: str) -> None:
        """Check one access made with ``clock`` by ``actor`` and remember it."""
        self.access_all([(allocation, start, nbytes, write)], actor=actor, clock=clock, what=what)

    def access_all(self, regions: Sequence[tuple[Allocation, int, int, bool]], *, actor: str, clock: Clock,
                   what: str, padding: Sequence[tuple[Allocation, int, int]] = ()) -> None:
        """Check every ``(allocation, start, nbytes, write)`` of one task, and the ``padding``
        bytes it may touch past its outputs, then remember them all.

        Nothing is remembered when any check fails, so a refused launch leaves no trace."""
        tick = clock.get(actor, 0)
        accesses = [(allocation, Access(start, start + nbytes, write, actor, tick, what))
                    for allocation, start, nbytes, write in regions if nbytes > 0]
        if padding:
            accesses += [(allocation, Access(start, start + nbytes, True, actor, tick, what, padding=True))
                         for allocation, start, nbytes in padding if nbytes > 0]
        with self._lock:
            self.checked += len(accesses)
            for allocation, access in accesses:
                segments: SegmentMap[Access] | None = allocation.sanitizer_state
                if segments is not None:
                    for segment in segments.overlapping(access.start, access.end):
                        _check(segment, access, clock, allocation)
            for allocation, access in accesses:
                segments = allocation.sanitizer_state
                if segments is None:
                    segments = allocation.sanitizer_state = SegmentMap()
                # Every earlier access to these bytes is ordered before a write that passed its
                # check, and whatever is ordered after the write is after them too: the write's
                # history replaces theirs.  Only a retired stream's accesses may be unordered,
                # and those never race (see _check).
                if access.write:
                    segments.write(access.start, access.end, access)
                else:
                    segments.read(access.start, access.end, actor, access)

    def host_access(self, allocation: Allocation, start: int, nbytes: int, *, write: bool, what: str) -> None:
        self.access(allocation, start, nbytes, write=write, actor=HOST, clock=self.host_tick(), what=what)

    def stats(self) -> dict[str, Any]:
        return {"checked": self.checked, "actors": len(self._clocks)}
