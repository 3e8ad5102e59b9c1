"""The workspace interface: blocks, :class:`Workspace`, :class:`WorkspaceStats` and the
:class:`WorkspaceStrategy` base that every strategy shares (see :mod:`aclpipe.runtime.workspaces`)."""

from __future__ import annotations

import bisect
import collections
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import anyio

from ...backends.protocol import align_up
from ...errors import PlanError
from ..completion.timeline import Timeline

if TYPE_CHECKING:
    from ..buffer import DeviceBuffer
    from ..device import Device
    from ..stream import Stream

__all__ = ["NO_WORKSPACE", "Workspace", "WorkspaceStats", "WorkspaceStrategy"]


@dataclass(eq=False)
class _Region:
    """One device allocation a strategy owns, carved into blocks first-fit."""

    buffer: DeviceBuffer
    free: list[tuple[int, int]] = field(default_factory=list)  # (offset, size), sorted, coalesced
    dedicated: bool = False  # made for one pin: freed once nothing in it is held

    def __post_init__(self) -> None:
        self.free = [(0, self.buffer.nbytes)]

    @property
    def idle(self) -> bool:
        return self.free == [(0, self.buffer.nbytes)]

    def carve(self, size: int) -> int | None:
        for index, (offset, room) in enumerate(self.free):
            if room >= size:
                if room == size:
                    del self.free[index]
                else:
                    self.free[index] = (offset + size, room - size)
                return offset
        return None

    def give_back(self, offset: int, size: int) -> None:
        index = bisect.bisect(self.free, (offset, size))
        self.free.insert(index, (offset, size))
        # Coalesce with the neighbours so large workspaces keep fitting.
        if index + 1 < len(self.free) and offset + size == self.free[index + 1][0]:
            self.free[index] = (offset, size + self.free.pop(index + 1)[1])
        if index > 0 and self.free[index - 1][0] + self.free[index - 1][1] == offset:
            previous = self.free.pop(index - 1)
            self.free[index - 1] = (previous[0], previous[1] + self.free[index - 1][1])


@dataclass(eq=False)
class _Block:
    """Workspace memory a strategy hands out: ``size`` bytes at ``offset`` of ``region``."""

    region: _Region
    offset: int
    size: int
    key: Hashable = None
    busy: bool = False  # handed to a caller that has not released it yet
    lane: int | None = None  # the lane of its last release while on its way back
    tag: int = 0  # ... and the value that lane must reach

    @property
    def address(self) -> int:
        return self.region.buffer.address + self.offset

    @property
    def pending(self) -> bool:
        return self.lane is not None


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
    """Counters of one strategy (bytes are device bytes).

    Attributes
    ----------
    strategy:
        The strategy's name.
    in_use:
        Bytes held by callers or by launches the stream has not passed yet.
    peak:
        The highest ``in_use`` seen.
    reserved:
        Device bytes the strategy holds now.
    acquires, allocations:
        Workspaces handed out, and device allocations made for them.
    waits:
        Acquires that had to wait for a launch to finish.
    limit:
        The most device bytes the strategy may hold (None: unbounded).
    outstanding:
        Blocks released after a launch and not back yet (0 once the streams passed every launch
        and the blocks were reclaimed); blocks still held by callers or pinned are not counted.
    """

    strategy: str
    in_use: int = 0
    peak: int = 0
    reserved: int = 0
    acquires: int = 0
    allocations: int = 0
    waits: int = 0
    limit: int | None = None
    outstanding: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class WorkspaceStrategy(ABC):
    """The interface every workspace strategy implements (see the module docstring).

    Parameters
    ----------
    device:
        Where the memory comes from.
    timeline:
        The timeline whose host functions report that streams passed released blocks (the
        pipeline passes its own; by default the strategy makes a private one).
    granularity:
        Carved pieces are rounded up to a multiple of this many bytes.
    """

    name: ClassVar[str] = ""
    #: Releases per stream between two host functions that report them (the pool batches).
    _batch: int = 1
    #: ``release_after`` waits until the stream passed the launch (per-call): async callers use
    #: ``release_after_async``.
    blocking_release: ClassVar[bool] = False
    #: Every launch of a stream gets the same address, so recorded (captured) work stays valid.
    fixed_addresses: ClassVar[bool] = False
    #: :meth:`pin` can hold a workspace at a fixed address for captured work (not per-call: the
    #: naive baseline allocates per launch by definition).
    pinnable: ClassVar[bool] = True
    #: Each owner's pins are blocks of its own (not shared with other owners' pins on the same
    #: stream), so work of two owners may run at once: what captured slots, replayed side by
    #: side on model streams of their own, need (pipeline.program).
    exclusive_pins: ClassVar[bool] = True

    def __init__(self, device: Device, *, timeline: Timeline | None = None, granularity: int = 512):
        if granularity <= 0 or granularity % device.capabilities.memory.granule:
            raise ValueError(f"granularity must be a positive multiple of {device.capabilities.memory.granule} "
                             f"bytes, got {granularity}")
        self.device = device
        self.granularity = granularity
        self._own_timeline = timeline is None
        self.timeline = timeline if timeline is not None else Timeline(1, wake=False)
        self._lock = threading.Condition(threading.RLock())
        self._pending: dict[int, collections.deque[_Block]] = {}  # lane -> blocks on their way back
        self._unpublished: dict[int, tuple[Any, int]] = {}  # lane -> (stream, releases since the last advance)
        self._stats = WorkspaceStats(self.name)
        self._busy = 0  # blocks handed to callers and not released yet
        self._pins: dict[Hashable, dict[Stream, Workspace]] = {}  # owner -> its pinned workspaces
        self._closed = False

    # -- the interface ----------------------------------------------------------------------
    def try_acquire(self, nbytes: int, stream: Stream, key: Hashable | None = None) -> Workspace | None:
        """A workspace of at least ``nbytes`` for a launch on ``stream`` now, or None if that
        would need waiting for another launch.  ``key`` names the executor (``cached`` keeps one
        workspace per key)."""
        if nbytes <= 0:
            with self._lock:
                self._stats.acquires += 1
            return NO_WORKSPACE
        lane = self.timeline.lane_for(stream)
        with self._lock:
            self._reclaim()
            block = self._take(nbytes, lane, key)
            if block is None:
                return None
            block.busy, block.lane = True, None
            self._busy += 1
            self._stats.acquires += 1
            self._stats.peak = max(self._stats.peak, self._stats.in_use)
            return Workspace(block.address, nbytes, block)

    def acquire(self, nbytes: int, stream: Stream, key: Hashable | None = None, *,
                timeout: float | None = None) -> Workspace:
        """Like :meth:`try_acquire`, blocking while no workspace can be had.

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
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError(f"no {self.name} workspace of {nbytes} bytes became free in time "
                                   f"({self._describe_use()}); release workspaces or raise the limit")
            self._wait_blocking(self._target_or_refuse(nbytes, stream, key), remaining)
            workspace = self.try_acquire(nbytes, stream, key)
            if workspace is not None:
                return workspace

    async def acquire_async(self, nbytes: int, stream: Stream, key: Hashable | None = None) -> Workspace:
        """Like :meth:`acquire`, but awaits instead of blocking the event loop."""
        workspace = self.try_acquire(nbytes, stream, key)
        if workspace is not None:
            return workspace
        self._count_wait()
        while True:
            target = self._target_or_refuse(nbytes, stream, key)
            if target is not None:
                await self.timeline.wait(*target)
            else:  # every block is held by a caller: wait for a release, in a worker thread
                await anyio.to_thread.run_sync(self._wait_blocking, None, None, abandon_on_cancel=True)
            workspace = self.try_acquire(nbytes, stream, key)
            if workspace is not None:
                return workspace

    def release_after(self, workspace: Workspace, stream: Stream, *, publish: bool = True) -> None:
        """Give ``workspace`` back once ``stream`` has passed everything enqueued on it so far.

        ``publish=False`` lets the caller batch the host functions that report it (the
        pipeline publishes every ``batch`` releases and at the end of each run).
        """
        block = self._claim(workspace)
        if block is not None:
            self._tag(block, stream, publish)

    async def release_after_async(self, workspace: Workspace, stream: Stream) -> None:
        """:meth:`release_after` for async callers (only ``per-call`` awaits anything)."""
        self.release_after(workspace, stream)

    def abandon(self, workspace: Workspace, stream: Stream) -> None:
        """The launch meant to use ``workspace`` failed: take it back once ``stream`` has passed
        whatever was enqueued (never sooner: a wait or the kernel may be queued), never waiting."""
        block = self._claim(workspace)
        if block is not None:
            self._tag(block, stream, True)

    def release_now(self, workspace: Workspace) -> None:
        """Give ``workspace`` back at once: the caller synchronized the stream (or an event
        recorded) after the last launch that used it.  Costs no device work."""
        block = self._claim(workspace)
        if block is not None:
            with self._lock:
                self._returned(block)
                self._lock.notify_all()

    def pin(self, sizes: Mapping[Stream, int], owner: Hashable) -> dict[Stream, Workspace] | None:
        """Workspaces at fixed addresses for every launch ``owner`` makes, one per stream, held
        until :meth:`unpin` (what a captured program needs: its replays reuse the addresses).

        One block per stream serves all of the owner's launches there, whatever their number,
        because a stream runs its launches one after another; ``sizes[s]`` is the largest
        workspace a launch on ``s`` needs.  Returns None, holding nothing, when the strategy
        cannot pin (per-call) or not without waiting for other launches.
        """
        if not self.pinnable:
            return None
        pinned: dict[Stream, Workspace] = {}
        for stream, nbytes in sizes.items():
            workspace = self._try_pin(nbytes, stream, owner) if nbytes else None
            if nbytes and workspace is None:
                for held in pinned.values():
                    self.release_now(held)  # nothing was launched with them yet
                return None
            if workspace is not None:
                pinned[stream] = workspace
        with self._lock:
            self._pins.setdefault(owner, {}).update(pinned)
        return pinned

    def unpin(self, owner: Hashable, *, passed: bool = False) -> None:
        """Give back ``owner``'s pinned workspaces once their streams passed what is enqueued, or
        at once with ``passed=True`` (the caller knows the streams passed every launch that used
        them: a program closed after its runs completed)."""
        with self._lock:
            pinned = self._pins.pop(owner, {})
        for stream, workspace in pinned.items():
            if passed:
                self.release_now(workspace)
            else:
                self.release_after(workspace, stream)

    def _try_pin(self, nbytes: int, stream: Stream, owner: Hashable) -> Workspace | None:
        return self.try_acquire(nbytes, stream, ("pinned", owner))

    def publish(self, stream: Stream | None = None) -> None:
        """Enqueue the host functions that report batched releases (of ``stream``, or all)."""
        with self._lock:
            lanes = [self.timeline.lane_for(stream)] if stream is not None else list(self._unpublished)
            for lane in lanes:
                self._publish(lane)

    def reserve(self, sizes: Mapping[Stream, int]) -> None:  # noqa: B027 - optional: most strategies need nothing
        """Make room now for launches whose largest workspace on stream ``s`` is ``sizes[s]``."""

    def stats(self) -> WorkspaceStats:
        """A snapshot of the counters (blocks the streams passed are reclaimed first)."""
        with self._lock:
            self._reclaim()
            snapshot = WorkspaceStats(**asdict(self._stats))
            snapshot.outstanding = self._outstanding()
            return snapshot

    def close(self) -> None:
        """Wait until the streams passed every launch that used a workspace, then free them all;
        idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            targets = [(lane, blocks[-1].tag) for lane, blocks in self._pending.items() if blocks]
            for lane in list(self._unpublished):
                self._publish(lane)
        if not self.device.closed:
            for lane, tag in targets:
                self.timeline.wait_blocking(lane, tag)
        with self._lock:
            self._reclaim()
            self._free_everything()
            self._stats.reserved = 0
        if self._own_timeline:
            self.timeline.close()

    # -- what each strategy decides -----------------------------------------------------------
    @abstractmethod
    def _take(self, nbytes: int, lane: int, key: Hashable) -> _Block | None:
        """A block for ``nbytes`` on ``lane`` now (under the lock), or None."""

    @abstractmethod
    def _returned(self, block: _Block) -> None:
        """``block`` is back: no launch uses it any more (under the lock)."""

    @abstractmethod
    def _free_everything(self) -> None:
        """Free every device allocation the strategy holds (under the lock, at close)."""

    def _outstanding(self) -> int:
        return sum(len(blocks) for blocks in self._pending.values())

    def _wait_target(self, nbytes: int, stream: Stream, key: Hashable) -> tuple[int, int] | None:
        """The (lane, value) whose passing may free a block for this request (None: none is
        on its way back)."""
        with self._lock:
            heads = [(blocks[0].tag, lane) for lane, blocks in self._pending.items() if blocks]
            if not heads:
                return None
            tag, lane = min(heads)
            return lane, tag

    # -- shared machinery ---------------------------------------------------------------------
    def _target_or_refuse(self, nbytes: int, stream: Stream, key: Hashable) -> tuple[int, int] | None:
        """What to wait for; raises when nothing can ever free room (no block is held by a
        caller or on its way back, yet none fits: the strategy is fragmented or too small).

        Releases still batched are published first: a waiter for a value no host function
        will ever publish would sleep for ever (any lane's blocks may be the ones that fit).
        """
        self.publish()
        target = self._wait_target(nbytes, stream, key)
        with self._lock:
            if target is None and not self._busy:
                self._reclaim()
                if self._wait_target(nbytes, stream, key) is None and not self._busy:
                    raise PlanError(f"no {self.name} workspace of {nbytes} bytes can be had and none is in use "
                                    f"({self._describe_use()}): the strategy is fragmented or too small; "
                                    "raise its limit (Pipeline pool_bytes)")
        return target

    def _piece(self, nbytes: int) -> int:
        """Bytes a carved piece of ``nbytes`` takes (CANN's padding rule, then the granularity)."""
        return align_up(self.device.capabilities.memory.piece_size(nbytes), self.granularity)

    def _allocate_region(self, nbytes: int, label: str) -> _Region:
        region = _Region(self.device.alloc(nbytes, label=label))
        self._stats.allocations += 1
        self._stats.reserved += nbytes
        return region

    def _free_region(self, region: _Region) -> None:
        self._stats.reserved -= region.buffer.nbytes
        region.buffer.close()

    def _claim(self, workspace: Workspace) -> _Block | None:
        """The block ``workspace`` holds, now marked released (None for :data:`NO_WORKSPACE`,
        which holds no memory); refuses a second release."""
        if workspace._released:
            raise ValueError("this workspace was already released; each acquire gets one release")
        if workspace._block is None:
            return None
        workspace._released = True
        with self._lock:
            workspace._block.busy = False
            self._busy -= 1
        return workspace._block

    def _tag(self, block: _Block, stream: Stream, publish: bool) -> None:
        lane = self.timeline.lane_for(stream)
        with self._lock:
            block.lane, block.tag = lane, self.timeline.next_value(lane)
            self._pending.setdefault(lane, collections.deque()).append(block)
            _, count = self._unpublished.get(lane, (stream, 0))
            self._unpublished[lane] = (stream, count + 1)
            if publish or count + 1 >= self._batch:
                self._publish(lane)
            self._lock.notify_all()

    def _publish(self, lane: int) -> None:
        entry = self._unpublished.pop(lane, None)
        if entry is not None:
            self.timeline.advance(entry[0])

    def _reclaim(self) -> None:
        """Take back every block whose lane has passed its tag (under the lock)."""
        for lane, blocks in self._pending.items():
            passed = self.timeline.value(lane)
            while blocks and blocks[0].tag <= passed:
                block = blocks.popleft()
                if block.lane == lane:  # not handed out again meanwhile (same-stream reuse)
                    block.lane = None
                    self._returned(block)

    def _reuse_on_lane(self, lane: int, size: int, key: Hashable = None) -> _Block | None:
        """A block on its way back from ``lane`` itself: stream order already keeps its last
        launch before the next one, so it can be handed out again at once (under the lock)."""
        for block in self._pending.get(lane, ()):
            if block.lane == lane and block.size >= size and block.key == key:
                block.lane = None  # its entry in the lane's deque is now stale
                return block
        return None

    def _count_wait(self) -> None:
        with self._lock:
            self._stats.waits += 1

    def _wait_blocking(self, target: tuple[int, int] | None, timeout: float | None) -> None:
        if target is not None:
            self.timeline.wait_blocking(*target, timeout)
            return
        with self._lock:  # nothing on its way back: a caller still holds every block
            self._lock.wait(timeout)

    def _describe_use(self) -> str:
        stats = self.stats()
        limit = f" of {stats.limit}" if stats.limit is not None else ""
        return f"{stats.in_use}{limit} bytes in use"
