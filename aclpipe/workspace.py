"""Workspace strategies: where the scratch memory of a launch comes from, and when it goes back.

Phase one says how many bytes of workspace a launch needs; the caller must keep them, and
nobody else may write them, until the stream has passed the launch (ARCHITECTURE.md 1).
Three strategies keep that rule at different costs:

``per-call`` (:class:`PerCallWorkspace`)
    allocate, run, synchronize, free: the naive baseline, one allocation and one full stream
    synchronization per launch.
``cached`` (:class:`CachedWorkspace`)
    one workspace per executor key, reused by later calls with the same key.  A workspace last
    used on another stream whose launch may still be in flight is never handed out: the
    strategy tracks the stream and an event recorded after the last use, reuses at once on
    the same stream (stream order serializes the users), reuses across streams once the event
    has completed, and otherwise allocates another one (up to ``max_per_key``) or waits
    (polling the events, since no host function reports them).
``pool`` (:class:`WorkspacePool`)
    a pool of device blocks bounded in bytes.  A block is taken at enqueue and returned when
    the stream has passed the launch: :meth:`~WorkspacePool.release_after` records an event and
    enqueues a host function that hands the block back and wakes waiters.  The same stream may
    take a released block again at once (stream order); another stream only after it came
    back.  When the pool is exhausted, :meth:`~WorkspacePool.acquire` blocks and
    :meth:`~WorkspacePool.acquire_async` awaits until a block returns.

Every strategy has the same interface (``acquire(nbytes, stream, key)``,
``await acquire_async(...)``, ``release_after(workspace, stream)``, ``release_now(workspace)``
for callers that synchronized already, ``stats()``, ``close()``) so the runner and, later, the
pipeline can take any of them.

Why a block returned by a host function is also checked through its event before another
stream gets it: the host function is the wake-up, the completed event is the proof of
ordering that the host (and the simulator's sanitizer) can check; they always agree because
the event is recorded before the host function in stream order.

Async waiters poll with :func:`anyio.sleep` and exponential backoff (50 us up to 5 ms) instead
of being woken from the callback thread: a runtime thread never enters the event loop, and
the later timeline-counter wake-up (``aclpipe.aio``) can replace the polling without changing
this interface.
"""

from __future__ import annotations

import threading
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from .errors import BackendError

if TYPE_CHECKING:
    from .runtime import Device, DeviceBuffer, Event, Stream

__all__ = ["Workspace", "WorkspaceStats", "WorkspaceStrategy", "PerCallWorkspace", "CachedWorkspace",
           "WorkspacePool", "make_workspace_strategy", "workspace_strategy", "STRATEGIES"]

STRATEGIES = ("per-call", "cached", "pool")
_FIRST_POLL_S = 50e-6
_MAX_POLL_S = 5e-3


@dataclass(eq=False)
class _Block:
    """Device memory owned by a strategy, and what it knows of the block's last use."""

    buffer: DeviceBuffer
    nbytes: int
    event: Event | None = None
    stream: Stream | None = None  # stream of the last launch that used the block
    busy: bool = False  # handed to a caller that has not called release_after yet
    ticket: int = 0  # release_after calls so far
    passed: int = 0  # the newest ticket whose stream position is known to be passed

    @property
    def in_flight(self) -> bool:
        return self.busy or self.passed < self.ticket


@dataclass(eq=False)
class Workspace:
    """Scratch memory handed to one launch: pass ``address`` and ``nbytes`` to phase two.

    A zero-byte request gets :data:`NO_WORKSPACE` (address 0), which needs no release.
    """

    address: int
    nbytes: int
    _block: _Block | None = field(default=None, repr=False)
    _released: bool = field(default=False, repr=False)


NO_WORKSPACE = Workspace(0, 0)


@dataclass
class WorkspaceStats:
    """Counters of one strategy (bytes are device bytes)."""

    strategy: str
    in_use: int = 0  # held by callers or by launches the stream has not passed
    peak: int = 0  # the highest in_use seen
    reserved: int = 0  # device memory the strategy holds now
    acquires: int = 0
    allocations: int = 0
    waits: int = 0  # acquires that had to wait for a launch to finish
    limit: int | None = None


class WorkspaceStrategy(ABC):
    """The interface every workspace strategy implements."""

    name: str = ""
    #: True when :meth:`release_after` blocks until the stream passed the launch (``per-call``):
    #: async callers release such a workspace after they awaited completion instead.
    blocking_release: bool = False

    def __init__(self, device: Device):
        self.device = device
        self._lock = threading.Condition()
        self._stats = WorkspaceStats(self.name)
        self._closed = False

    @abstractmethod
    def try_acquire(self, nbytes: int, stream: Stream, key: Hashable | None = None) -> Workspace | None:
        """A workspace of at least ``nbytes`` for a launch on ``stream`` now, or None if that
        would need waiting for another launch."""

    @abstractmethod
    def release_after(self, workspace: Workspace, stream: Stream) -> None:
        """Give ``workspace`` back once ``stream`` has passed everything enqueued so far."""

    @abstractmethod
    def release_now(self, workspace: Workspace) -> None:
        """Give ``workspace`` back at once: the caller has synchronized the stream (or an event
        recorded) after the last launch that used it, so the host knows the device is done.
        Costs no device work, unlike :meth:`release_after`."""

    def acquire(self, nbytes: int, stream: Stream, key: Hashable | None = None, *,
                timeout: float | None = None) -> Workspace:
        """A workspace for a launch on ``stream``, blocking while none can be had.

        ``key`` names the executor (the ``cached`` strategy keeps one workspace per key).

        Raises
        ------
        TimeoutError
            When ``timeout`` seconds passed without a workspace.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        workspace = self.try_acquire(nbytes, stream, key)
        if workspace is not None:
            return workspace
        self._count_wait()
        delay = _FIRST_POLL_S
        while True:
            # Pool blocks come back with a notification; cached workspaces only by their
            # events completing, which nobody reports: hence timed waits with backoff.
            self._wait_for_release(deadline, nbytes, delay)
            delay = min(delay * 2, _MAX_POLL_S)
            workspace = self.try_acquire(nbytes, stream, key)
            if workspace is not None:
                return workspace

    async def acquire_async(self, nbytes: int, stream: Stream, key: Hashable | None = None) -> Workspace:
        """Like :meth:`acquire`, but awaits (polling with backoff) instead of blocking the loop."""
        workspace = self.try_acquire(nbytes, stream, key)
        delay = _FIRST_POLL_S
        if workspace is None:
            self._count_wait()
        while workspace is None:
            await anyio.sleep(delay)
            delay = min(delay * 2, _MAX_POLL_S)
            workspace = self.try_acquire(nbytes, stream, key)
        return workspace

    def _wait_for_release(self, deadline: float | None, nbytes: int, delay: float) -> None:
        with self._lock:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError(f"no {self.name} workspace of {nbytes} bytes became free in time "
                                   f"({self._describe_use()}); release workspaces or raise the limit")
            self._lock.wait(delay if remaining is None else min(remaining, delay))

    def _describe_use(self) -> str:
        stats = self.stats()
        limit = f" of {stats.limit}" if stats.limit is not None else ""
        return f"{stats.in_use}{limit} bytes in use"

    def _count_wait(self) -> None:
        with self._lock:
            self._stats.waits += 1

    def _claim_release(self, workspace: Workspace) -> _Block | None:
        """The block ``workspace`` holds, now marked released (None for :data:`NO_WORKSPACE`,
        which holds no memory); refuses a second release."""
        if workspace._released:
            raise ValueError("this workspace was already released; each acquire gets one release_after")
        if workspace._block is None:
            return None
        workspace._released = True
        return workspace._block

    def _acquire_nothing(self) -> Workspace:
        """A zero-byte request: counted, and answered with :data:`NO_WORKSPACE`."""
        with self._lock:
            self._stats.acquires += 1
        return NO_WORKSPACE

    def _record_last_use(self, block: _Block, stream: Stream) -> None:
        """Record ``block``'s event on ``stream`` now, at its release, rather than when another
        stream asks: a record placed later would also wait for whatever the stream does meanwhile."""
        if block.event is None:
            block.event = self.device.create_event()
        stream.record(block.event)

    def _allocate(self, nbytes: int) -> _Block:
        buffer = self.device.alloc(nbytes, label=f"{self.name} workspace")
        with self._lock:
            self._stats.allocations += 1
            self._stats.reserved += nbytes
        return _Block(buffer, nbytes)

    def _free(self, block: _Block) -> None:
        if block.event is not None:
            _finished(block.event)  # tells the host (and the sanitizer) that the device is done
        block.buffer.close()
        with self._lock:
            self._stats.reserved -= block.nbytes

    def _track_in_use(self, delta: int) -> None:
        with self._lock:
            self._stats.in_use += delta
            self._stats.peak = max(self._stats.peak, self._stats.in_use)

    def stats(self) -> WorkspaceStats:
        """A snapshot of the counters."""
        with self._lock:
            return WorkspaceStats(**vars(self._stats))

    def close(self) -> None:
        """Wait for every launch that uses a workspace of this strategy, then free them all."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            blocks = self._take_blocks()
        for block in blocks:
            if block.event is not None:
                _finished(block.event, wait=True)
            self._free(block)

    @abstractmethod
    def _take_blocks(self) -> list[_Block]:
        """Every block the strategy holds, forgotten by it (:meth:`close` calls this under the lock)."""


def _finished(event: Event, wait: bool = False) -> bool:
    """Whether ``event``'s stream passed it; a failed stream passed it too (its error belongs
    to whoever synchronizes that stream)."""
    try:
        if wait:
            event.sync()
            return True
        return event.is_done
    except BackendError:
        return True


class PerCallWorkspace(WorkspaceStrategy):
    """Allocate per launch; :meth:`release_after` synchronizes the stream and frees."""

    name = "per-call"
    blocking_release = True

    def try_acquire(self, nbytes: int, stream: Stream, key: Hashable | None = None) -> Workspace:
        if nbytes <= 0:
            return self._acquire_nothing()
        with self._lock:
            self._stats.acquires += 1
        block = self._allocate(nbytes)
        self._track_in_use(nbytes)
        return Workspace(block.buffer.address, nbytes, block)

    def release_after(self, workspace: Workspace, stream: Stream) -> None:
        """Synchronize ``stream`` and free; the stream's error (if any) is raised here."""
        block = self._claim_release(workspace)
        if block is None:
            return
        try:
            stream.sync()
        finally:
            self._free(block)
            self._track_in_use(-block.nbytes)

    def release_now(self, workspace: Workspace) -> None:
        """Free at once (the caller synchronized)."""
        block = self._claim_release(workspace)
        if block is None:
            return
        self._free(block)
        self._track_in_use(-block.nbytes)

    def _take_blocks(self) -> list[_Block]:
        return []  # every block belongs to a caller until its release frees it


class CachedWorkspace(WorkspaceStrategy):
    """One workspace per executor key, never shared by launches that may overlap.

    Parameters
    ----------
    device:
        Where to allocate.
    max_per_key:
        Workspaces one key may hold for launches in flight on different streams; beyond it,
        an acquire waits for the oldest launch to finish.
    """

    name = "cached"

    def __init__(self, device: Device, *, max_per_key: int = 4):
        super().__init__(device)
        if max_per_key < 1:
            raise ValueError(f"max_per_key must be at least 1, got {max_per_key}")
        self.max_per_key = max_per_key
        self._slots: dict[Hashable, list[_Block]] = {}

    def try_acquire(self, nbytes: int, stream: Stream, key: Hashable | None = None) -> Workspace | None:
        if nbytes <= 0:
            return self._acquire_nothing()
        slot_key = ("bytes", nbytes) if key is None else key
        with self._lock:
            slots = self._slots.setdefault(slot_key, [])
            block = self._reusable(slots, nbytes, stream)
            if block is None and len(slots) >= self.max_per_key and any(not s.busy for s in slots):
                return None
            if block is not None:
                block.busy = True
                self._stats.acquires += 1
        if block is None:
            # Every slot is held by a caller (or there is room for one more): allocate.
            block = self._allocate(nbytes)
            block.busy = True
            with self._lock:
                self._slots.setdefault(slot_key, []).append(block)
                self._stats.acquires += 1
        self._track_in_use(block.nbytes)
        return Workspace(block.buffer.address, nbytes, block)

    @staticmethod
    def _reusable(slots: list[_Block], nbytes: int, stream: Stream) -> _Block | None:
        for block in slots:
            if block.busy or block.nbytes < nbytes:
                continue
            # Same stream: stream order puts this launch after the last one.  Other stream:
            # only once the last launch is known to be done (the event query tells the host).
            if block.stream is None or block.stream is stream or block.event is None or _finished(block.event):
                return block
        return None

    def release_after(self, workspace: Workspace, stream: Stream) -> None:
        block = self._claim_release(workspace)
        if block is None:
            return
        self._record_last_use(block, stream)
        with self._lock:
            block.stream = stream
            block.busy = False
            self._stats.in_use -= block.nbytes
            self._lock.notify_all()

    def release_now(self, workspace: Workspace) -> None:
        block = self._claim_release(workspace)
        if block is None:
            return
        with self._lock:
            block.stream = None  # the host knows the last use is done: any stream may take it
            block.busy = False
            self._stats.in_use -= block.nbytes
            self._lock.notify_all()

    def _take_blocks(self) -> list[_Block]:
        blocks = [block for slots in self._slots.values() for block in slots]
        self._slots.clear()
        return blocks


class WorkspacePool(WorkspaceStrategy):
    """A pool of device blocks bounded in bytes, returned by host functions.

    Parameters
    ----------
    device:
        Where to allocate.
    limit:
        The most device bytes the pool may hold.
    granularity:
        Requests are rounded up to a multiple of this, so that blocks fit more requests.
    """

    name = "pool"

    def __init__(self, device: Device, limit: int = 64 << 20, *, granularity: int = 512):
        super().__init__(device)
        if limit <= 0 or granularity <= 0:
            raise ValueError(f"limit and granularity must be positive, got {limit} and {granularity}")
        self.limit = limit
        self.granularity = granularity
        self._blocks: list[_Block] = []
        self._stats.limit = limit

    def _round(self, nbytes: int) -> int:
        return -(-nbytes // self.granularity) * self.granularity

    def try_acquire(self, nbytes: int, stream: Stream, key: Hashable | None = None) -> Workspace | None:
        if nbytes <= 0:
            return self._acquire_nothing()
        size = self._round(nbytes)
        if size > self.limit:
            raise ValueError(f"a workspace of {nbytes} bytes can never fit a pool limited to {self.limit} "
                             "bytes; raise the limit or use the 'per-call' strategy")
        with self._lock:
            block = self._best_fit(size, stream)
            if block is not None:
                self._take(block)
                return Workspace(block.buffer.address, nbytes, block)
            spare = self._spare_for(size)
            if spare is None:
                return None
            self._stats.reserved += size  # reserve now so that no other thread overshoots
        try:
            for old in spare:
                self._free(old)
            block = self._allocate(size)
        finally:
            with self._lock:
                self._stats.reserved -= size  # _allocate counts what it really got
        with self._lock:
            self._blocks.append(block)
            self._take(block)
        return Workspace(block.buffer.address, nbytes, block)

    def _best_fit(self, size: int, stream: Stream) -> _Block | None:
        best = None
        for block in self._blocks:
            if block.busy or block.nbytes < size or (best is not None and block.nbytes >= best.nbytes):
                continue
            if block.stream is stream or not block.in_flight:
                best = block
        if best is not None and best.stream is not stream and best.event is not None:
            _finished(best.event)  # the host learns the block's last use is done
        return best

    def _spare_for(self, size: int) -> list[_Block] | None:
        """Idle blocks to free so that ``size`` more bytes fit the limit (None: cannot)."""
        free_room = self.limit - self._stats.reserved
        if free_room >= size:
            return []
        idle = sorted((b for b in self._blocks if not b.in_flight), key=lambda b: b.nbytes)
        spare: list[_Block] = []
        for block in idle:
            spare.append(block)
            free_room += block.nbytes
            if free_room >= size:
                for old in spare:
                    self._blocks.remove(old)
                return spare
        return None

    def _take(self, block: _Block) -> None:
        was_in_flight = block.in_flight
        block.busy = True
        self._stats.acquires += 1
        if not was_in_flight:
            self._stats.in_use += block.nbytes
            self._stats.peak = max(self._stats.peak, self._stats.in_use)

    def release_after(self, workspace: Workspace, stream: Stream) -> None:
        block = self._claim_release(workspace)
        if block is None:
            return
        self._record_last_use(block, stream)
        with self._lock:
            block.ticket += 1
            ticket = block.ticket
            block.stream = stream
            block.busy = False

        def give_back() -> None:
            # Runs on the callback thread: only bookkeeping, never a device call.
            with self._lock:
                if ticket > block.passed:
                    block.passed = ticket
                    if not block.in_flight:
                        self._stats.in_use -= block.nbytes
                self._lock.notify_all()

        stream.host_func(give_back, name="workspace pool release")

    def release_now(self, workspace: Workspace) -> None:
        block = self._claim_release(workspace)
        if block is None:
            return
        with self._lock:
            block.ticket += 1
            block.passed = block.ticket  # the caller synchronized: the stream passed it
            block.stream = None
            block.busy = False
            self._stats.in_use -= block.nbytes
            self._lock.notify_all()

    def _take_blocks(self) -> list[_Block]:
        blocks, self._blocks = self._blocks, []
        return blocks


def make_workspace_strategy(device: Device, name: str, **options: Any) -> WorkspaceStrategy:
    """A new strategy by name: ``"per-call"``, ``"cached"`` or ``"pool"`` (options go to it)."""
    classes: dict[str, type[WorkspaceStrategy]] = {
        "per-call": PerCallWorkspace, "cached": CachedWorkspace, "pool": WorkspacePool}
    if name not in classes:
        raise ValueError(f"unknown workspace strategy {name!r}: expected one of {', '.join(STRATEGIES)}")
    return classes[name](device, **options)


_SHARED: weakref.WeakKeyDictionary[Device, dict[str, WorkspaceStrategy]] = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def workspace_strategy(device: Device, name: str) -> WorkspaceStrategy:
    """The strategy ``name`` shared by every runner on ``device`` (created on first use)."""
    with _SHARED_LOCK:
        per_device = _SHARED.setdefault(device, {})
        strategy = per_device.get(name)
        if strategy is None:
            strategy = per_device[name] = make_workspace_strategy(device, name)
        return strategy
