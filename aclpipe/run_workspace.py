"""Workspace strategies for pipeline runs: where each launch's scratch comes from.

``static``
    one region per stream, sized to the largest workspace of that stream's nodes: stream
    order serializes its users, so nothing is ever waited for or returned.
``pool``
    one device region of ``limit`` bytes, sub-allocated first-fit.  A block is taken at
    enqueue and tagged with the timeline value that the stream's *next* completion host
    function will publish; host functions are batched (one per ``batch`` launches per stream,
    and one at the end of each run), so streams do not stall after every node.  A block
    comes back once its lane's counter passes the tag.  When the pool is empty, enqueue
    flushes pending host functions and awaits the earliest tag.
``per-call``
    allocate, launch, wait until the stream passed the launch, free: the naive baseline the
    other two are measured against.

All three hand out addresses only; the pipeline passes them to ``op_launch``.
"""

from __future__ import annotations

import bisect
from collections import deque
from typing import TYPE_CHECKING, Any

from .errors import PlanError

if TYPE_CHECKING:
    from .aio import Timeline
    from .runtime import Device, DeviceBuffer, Stream

__all__ = [
    "RUN_STRATEGIES",
    "PerCallWorkspaces",
    "PooledWorkspaces",
    "RunWorkspaces",
    "StaticWorkspaces",
    "make_run_workspaces",
]

RUN_STRATEGIES = ("pool", "static", "per-call")
_ALIGN = 512


def _round(nbytes: int) -> int:
    return (nbytes + _ALIGN - 1) // _ALIGN * _ALIGN


class RunWorkspaces:
    """Base: ``take`` is the fast path (None: must wait), ``take_waiting`` the slow one."""

    name = ""
    synchronous = False  # per-call: the pipeline synchronizes after each launch

    def __init__(self, device: Device, streams: list[Stream], timeline: Timeline):
        self.device = device
        self.streams = streams
        self.timeline = timeline
        self.waits = 0
        self.peak_in_use = 0
        self.in_use = 0

    def reserve(self, sizes_by_stream: dict[int, int]) -> None:
        """Make room for a program whose largest workspace on stream ``s`` is ``sizes[s]``."""

    def take(self, nbytes: int, lane: int) -> int | None:
        raise NotImplementedError

    async def take_waiting(self, nbytes: int, lane: int) -> int:
        raise NotImplementedError

    def launched(self, address: int, nbytes: int, lane: int) -> None:
        """The launch using ``address`` is enqueued on ``lane``'s stream."""

    async def after_launch(self, address: int, nbytes: int, lane: int) -> None:
        """Only for ``synchronous`` strategies."""

    def abandoned(self, address: int, nbytes: int, lane: int) -> None:
        """The launch meant to use ``address`` raised: take the block back once ``lane`` has
        passed whatever of it was enqueued (never sooner: a wait or the kernel may be queued)."""
        self.launched(address, nbytes, lane)

    def end_run(self) -> None:
        """The run is fully enqueued: publish what is pending."""

    def stats(self) -> dict[str, Any]:
        return {"strategy": self.name, "in_use": self.in_use, "peak_in_use": self.peak_in_use, "waits": self.waits}

    def close(self) -> None:
        """Free device memory; the caller has synchronized every stream."""


class StaticWorkspaces(RunWorkspaces):
    name = "static"

    def __init__(self, device: Device, streams: list[Stream], timeline: Timeline):
        super().__init__(device, streams, timeline)
        self._regions: dict[int, DeviceBuffer] = {}
        self._retired: list[DeviceBuffer] = []

    def reserve(self, sizes_by_stream: dict[int, int]) -> None:
        for lane, size in sizes_by_stream.items():
            current = self._regions.get(lane)
            if size and (current is None or current.nbytes < size):
                if current is not None:
                    # In-flight runs may still use it: freed at close, after every stream synced.
                    self._retired.append(current)
                self._regions[lane] = self.device.alloc(_round(size), label=f"static workspace s{lane}")
        self.in_use = self.peak_in_use = sum(r.nbytes for r in self._regions.values())

    def take(self, nbytes: int, lane: int) -> int | None:
        return self._regions[lane].address

    async def take_waiting(self, nbytes: int, lane: int) -> int:
        return self._regions[lane].address

    def close(self) -> None:
        for region in [*self._regions.values(), *self._retired]:
            region.close()
        self._regions.clear()
        self._retired.clear()


class _Region:
    """One device allocation of the pool with its own free list (blocks never span regions)."""

    def __init__(self, buffer: DeviceBuffer):
        self.buffer = buffer
        self.free: list[tuple[int, int]] = [(0, buffer.nbytes)]  # (offset, size), sorted, coalesced

    def take(self, size: int) -> int | None:
        for index, (offset, free) in enumerate(self.free):
            if free >= size:
                if free == size:
                    del self.free[index]
                else:
                    self.free[index] = (offset + size, free - size)
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


class PooledWorkspaces(RunWorkspaces):
    name = "pool"

    def __init__(self, device: Device, streams: list[Stream], timeline: Timeline, *, limit: int = 0,
                 batch: int = 8):
        super().__init__(device, streams, timeline)
        #: A fixed size when given; otherwise the pool grows as programs with larger workspaces arrive.
        self.fixed_limit = _round(limit) if limit else 0
        self.batch = batch
        self._regions: list[_Region] = []
        self._pending: list[deque[tuple[int, int, int, int]]] = [deque() for _ in streams]  # (tag, region, offset, size)
        self._unflushed = [0] * len(streams)

    @property
    def limit(self) -> int:
        return sum(region.buffer.nbytes for region in self._regions)

    def reserve(self, sizes_by_stream: dict[int, int]) -> None:
        largest = _round(max(sizes_by_stream.values(), default=0))
        if not largest:
            return
        if self.fixed_limit:
            if largest > self.fixed_limit:
                raise PlanError(f"a node needs a {largest}-byte workspace but the workspace pool holds "
                                f"{self.fixed_limit} bytes; pass a larger pool_bytes to Pipeline")
            if not self._regions:
                self._regions.append(_Region(self.device.alloc(self.fixed_limit, label="workspace pool")))
            return
        if largest > max((region.buffer.nbytes for region in self._regions), default=0):
            # Room for every stream's largest workspace, twice over, so two runs overlap.  Earlier
            # regions stay: in-flight runs may hold blocks of them, and later runs can use them.
            size = 2 * sum(_round(s) for s in sizes_by_stream.values())
            self._regions.append(_Region(self.device.alloc(size, label=f"workspace pool {len(self._regions)}")))

    def take(self, nbytes: int, lane: int) -> int | None:
        size = _round(nbytes)
        self._reclaim()
        for region in self._regions:
            offset = region.take(size)
            if offset is not None:
                self.in_use += size
                self.peak_in_use = max(self.peak_in_use, self.in_use)
                return region.buffer.address + offset
        return None

    async def take_waiting(self, nbytes: int, lane: int) -> int:
        self.waits += 1
        for each in range(len(self.streams)):
            self._flush(each)
        while True:
            address = self.take(nbytes, lane)
            if address is not None:
                return address
            pending = [(queue[0][0], index) for index, queue in enumerate(self._pending) if queue]
            if not pending:
                raise PlanError("workspace pool is fragmented beyond use; pass a larger pool_bytes")
            tag, which = min(pending)
            await self.timeline.wait(which, tag)

    def launched(self, address: int, nbytes: int, lane: int) -> None:
        tag = self.timeline.next_value(lane)
        for index, region in enumerate(self._regions):
            offset = address - region.buffer.address
            if 0 <= offset < region.buffer.nbytes:
                self._pending[lane].append((tag, index, offset, _round(nbytes)))
                break
        self._unflushed[lane] += 1
        if self._unflushed[lane] >= self.batch:
            self._flush(lane)

    def end_run(self) -> None:
        for lane in range(len(self.streams)):
            self._flush(lane)

    def _flush(self, lane: int) -> None:
        if self._unflushed[lane]:
            self._unflushed[lane] = 0
            self.timeline.enqueue_advance(self.device.backend, self.streams[lane].handle, lane)

    def _reclaim(self) -> None:
        for lane, queue in enumerate(self._pending):
            if not queue:
                continue
            passed = self.timeline.value(lane)
            while queue and queue[0][0] <= passed:
                _, region, offset, size = queue.popleft()
                self.in_use -= size
                self._regions[region].give_back(offset, size)

    @property
    def outstanding(self) -> int:
        """Blocks taken and not yet back (0 once every run completed and was reclaimed)."""
        self._reclaim()
        return sum(len(queue) for queue in self._pending)

    def stats(self) -> dict[str, Any]:
        outstanding = self.outstanding  # reclaims first, so in_use is current
        return {**super().stats(), "limit": self.limit, "regions": len(self._regions), "outstanding": outstanding}

    def close(self) -> None:
        for region in self._regions:
            region.buffer.close()
        self._regions.clear()


class PerCallWorkspaces(RunWorkspaces):
    name = "per-call"
    synchronous = True

    def __init__(self, device: Device, streams: list[Stream], timeline: Timeline):
        super().__init__(device, streams, timeline)
        self._live: dict[int, DeviceBuffer] = {}
        # (lane, value, buffer): freed once the lane passes value (the wait for it was cancelled).
        self._deferred: list[tuple[int, int, DeviceBuffer]] = []
        self._retired: list[DeviceBuffer] = []  # freed at close

    def take(self, nbytes: int, lane: int) -> int | None:
        self._free_passed()
        buffer = self.device.alloc(nbytes, label="per-call workspace")
        self._live[buffer.address] = buffer
        self.in_use += buffer.nbytes
        self.peak_in_use = max(self.peak_in_use, self.in_use)
        return buffer.address

    async def take_waiting(self, nbytes: int, lane: int) -> int:
        address = self.take(nbytes, lane)
        assert address is not None
        return address

    async def after_launch(self, address: int, nbytes: int, lane: int) -> None:
        buffer = self._live.pop(address)
        # Wait through the timeline, not stream.sync(): a sync would consume the stream's sticky
        # error, so the run that failed would never hear of it and the error would surface, raw,
        # from whichever launch synchronized next.  The host function runs even on a failed
        # stream, so this returns once the device passed (or skipped) the launch.
        try:
            value = self.timeline.enqueue_advance(self.device.backend, self.streams[lane].handle, lane)
        except BaseException:
            self._retired.append(buffer)  # the device may still use it: freed at close
            raise
        try:
            await self.timeline.wait(lane, value)
        except BaseException:
            self._deferred.append((lane, value, buffer))  # cancelled: freed once the lane passes
            raise
        self._free(buffer)

    def abandoned(self, address: int, nbytes: int, lane: int) -> None:
        buffer = self._live.pop(address)
        try:
            value = self.timeline.enqueue_advance(self.device.backend, self.streams[lane].handle, lane)
        except BaseException:
            self._retired.append(buffer)
            raise
        self._deferred.append((lane, value, buffer))

    def _free(self, buffer: DeviceBuffer) -> None:
        self.in_use -= buffer.nbytes
        buffer.close()

    def _free_passed(self) -> None:
        if self._deferred:
            passed = [entry for entry in self._deferred if self.timeline.value(entry[0]) >= entry[1]]
            self._deferred = [entry for entry in self._deferred if entry not in passed]
            for _, _, buffer in passed:
                self._free(buffer)

    def close(self) -> None:
        for buffer in [*self._live.values(), *self._retired, *(entry[2] for entry in self._deferred)]:
            buffer.close()
        self._live.clear()
        self._retired.clear()
        self._deferred.clear()


def make_run_workspaces(name: str, device: Device, streams: list[Stream], timeline: Timeline,
                        pool_bytes: int = 0) -> RunWorkspaces:
    if name == "pool":
        return PooledWorkspaces(device, streams, timeline, limit=pool_bytes)
    if name == "static":
        return StaticWorkspaces(device, streams, timeline)
    if name == "per-call":
        return PerCallWorkspaces(device, streams, timeline)
    raise ValueError(f"workspace must be one of {RUN_STRATEGIES}, got {name!r}")
