"""The four strategies: static, pool, cached and per-call (see :mod:`aclpipe.runtime.workspaces`)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING

from ...errors import PlanError
from ..completion.timeline import Timeline
from .base import Workspace, WorkspaceStrategy, _Block, _Region

if TYPE_CHECKING:
    from ..device import Device
    from ..stream import Stream

__all__ = ["CachedWorkspace", "PerCallWorkspace", "StaticWorkspace", "WorkspacePool"]


class StaticWorkspace(WorkspaceStrategy):
    """One region per stream, sized to the largest workspace seen there; never waits."""

    name = "static"
    fixed_addresses = True
    exclusive_pins = False  # every pin on a stream is that stream's one region

    def __init__(self, device: Device, *, timeline: Timeline | None = None, granularity: int = 512):
        super().__init__(device, timeline=timeline, granularity=granularity)
        self._regions: dict[int, _Block] = {}
        self._retired: list[_Region] = []  # outgrown regions: in-flight launches may still use them
        self._streams: dict[int, Stream] = {}  # lane -> the stream whose launches use its region

    def reserve(self, sizes: Mapping[Stream, int]) -> None:
        with self._lock:
            for stream, nbytes in sizes.items():
                if nbytes:
                    self._region_for(self.timeline.lane_for(stream), nbytes)

    def _region_for(self, lane: int, nbytes: int) -> _Block:
        size = self._piece(nbytes)
        block = self._regions.get(lane)
        if block is None or block.size < size:
            if block is not None:
                self._retired.append(block.region)
                self._stats.in_use -= block.size
            region = self._allocate_region(size, f"static workspace lane {lane}")
            block = self._regions[lane] = _Block(region, 0, size)
            self._stats.in_use += size
        return block

    def _take(self, nbytes: int, lane: int, key: Hashable) -> _Block | None:
        return self._region_for(lane, nbytes)

    def _tag(self, block: _Block, stream: Stream, publish: bool) -> None:
        """Nothing to give back: the stream's next launch is ordered after this one.  The stream
        is remembered so that :meth:`close` can wait for it."""
        with self._lock:
            self._streams[self.timeline.lane_for(stream)] = stream

    def close(self) -> None:
        """Wait until every stream that used a region passed its launches, then free them."""
        with self._lock:
            streams, self._streams = list(self._streams.values()), {}
        if not self.device.closed and not self._closed:
            for stream in streams:
                if not stream.closed:
                    self.timeline.wait_blocking(*self.timeline.advance(stream))
        super().close()

    def _returned(self, block: _Block) -> None:
        """The region stays its stream's."""

    def _free_everything(self) -> None:
        for region in [*(block.region for block in self._regions.values()), *self._retired]:
            self._free_region(region)
        self._regions.clear()
        self._retired.clear()
        self._stats.in_use = 0


class WorkspacePool(WorkspaceStrategy):
    """Device regions bounded by ``limit`` bytes, carved first-fit, returned by host functions.

    Parameters
    ----------
    device:
        Where to allocate.
    limit:
        The most device bytes the pool may hold; ``None``: grow as :meth:`reserve` asks.
    granularity:
        Requests are rounded up to a multiple of this, so that blocks fit more requests.
    batch:
        Releases per stream between two host functions that report them (1: one each).
    timeline:
        See :class:`WorkspaceStrategy`.
    """

    name = "pool"

    def __init__(self, device: Device, limit: int | None = 64 << 20, *, granularity: int = 512, batch: int = 1,
                 timeline: Timeline | None = None):
        super().__init__(device, timeline=timeline, granularity=granularity)
        if limit is not None and limit <= 0:
            raise ValueError(f"limit must be positive (or None), got {limit}")
        if batch < 1:
            raise ValueError(f"batch must be at least 1, got {batch}")
        self.limit = limit
        self._batch = batch
        self._stats.limit = limit
        self._regions: list[_Region] = []

    def reserve(self, sizes: Mapping[Stream, int]) -> None:
        """Room for every stream's largest workspace twice over (two runs overlap), in one
        region; earlier regions stay (in-flight runs may hold blocks of them)."""
        pieces = [self._piece(nbytes) for nbytes in sizes.values() if nbytes]
        if not pieces:
            return
        largest = max(pieces)
        with self._lock:
            if self.limit is not None:
                if largest > self.limit:
                    raise PlanError(f"a node needs a {largest}-byte workspace but the workspace pool holds "
                                    f"{self.limit} bytes; pass a larger pool_bytes to Pipeline")
                if not self._regions:
                    self._regions.append(self._allocate_region(self.limit, "workspace pool"))
                return
            if largest > max((region.buffer.nbytes for region in self._regions), default=0):
                self._regions.append(self._allocate_region(2 * sum(pieces), f"workspace pool {len(self._regions)}"))
                self._stats.limit = self._stats.reserved

    def _try_pin(self, nbytes: int, stream: Stream, owner: Hashable) -> Workspace | None:
        """A pool that grows with its programs (no limit) makes room for a pin in a region of its
        own.  A bounded pool pins nothing: a pin holds its block until unpinned, so pinned blocks
        of idle programs could leave the launches that take blocks run by run waiting for room
        that never comes back."""
        if self.limit is not None:
            return None
        workspace = super()._try_pin(nbytes, stream, owner)
        if workspace is None:
            with self._lock:
                size = self._piece(nbytes)
                region = self._allocate_region(size, f"workspace pool {len(self._regions)} (pinned)")
                region.dedicated = True
                self._regions.append(region)
                self._stats.limit = self._stats.reserved
            workspace = super()._try_pin(nbytes, stream, owner)
        return workspace

    def _take(self, nbytes: int, lane: int, key: Hashable) -> _Block | None:
        size = self._piece(nbytes)
        if self.limit is not None and size > self.limit:
            raise ValueError(f"a workspace of {nbytes} bytes ({size} with CANN's padding) can never fit a pool "
                             f"limited to {self.limit} bytes; raise the limit or use the 'per-call' strategy")
        block = self._carve(size)
        if block is None:
            block = self._reuse_on_lane(lane, size)  # still counted in in_use
            if block is not None:
                return block
        if block is None and self.limit is not None and self._make_room(size):
            self._regions.append(self._allocate_region(size, "workspace pool block"))
            block = self._carve(size)
        if block is not None:
            self._stats.in_use += block.size
        return block

    def _carve(self, size: int) -> _Block | None:
        for region in self._regions:
            offset = region.carve(size)
            if offset is not None:
                return _Block(region, offset, size)
        return None

    def _make_room(self, size: int) -> bool:
        """Free idle regions until ``size`` more bytes fit the limit; False when they cannot."""
        assert self.limit is not None
        room = self.limit - self._stats.reserved
        if room >= size:
            return True
        idle = sorted((r for r in self._regions if r.idle), key=lambda r: r.buffer.nbytes)
        spare: list[_Region] = []
        for region in idle:
            spare.append(region)
            room += region.buffer.nbytes
            if room >= size:
                for old in spare:
                    self._regions.remove(old)
                    self._free_region(old)
                return True
        return False

    def _returned(self, block: _Block) -> None:
        self._stats.in_use -= block.size
        region = block.region
        region.give_back(block.offset, block.size)
        if region.dedicated and region.idle and region in self._regions:
            # Made for a pin that is over: a pool sized by its programs holds what the programs
            # held now pin, not the most they ever pinned at once.
            self._regions.remove(region)
            self._free_region(region)
            self._stats.limit = self._stats.reserved

    def _free_everything(self) -> None:
        for region in self._regions:
            self._free_region(region)
        self._regions.clear()


class CachedWorkspace(WorkspaceStrategy):
    """One workspace per executor key, never shared by launches that may overlap.

    Parameters
    ----------
    device:
        Where to allocate.
    max_per_key:
        Workspaces one key may hold for launches in flight on different streams; beyond it,
        an acquire waits for the oldest launch to finish.
    timeline:
        See :class:`WorkspaceStrategy`.
    """

    name = "cached"

    def __init__(self, device: Device, *, max_per_key: int = 4, timeline: Timeline | None = None):
        super().__init__(device, timeline=timeline)
        if max_per_key < 1:
            raise ValueError(f"max_per_key must be at least 1, got {max_per_key}")
        self.max_per_key = max_per_key
        self._by_key: dict[Hashable, list[_Block]] = {}

    def _take(self, nbytes: int, lane: int, key: Hashable) -> _Block | None:
        key = ("bytes", nbytes) if key is None else key
        blocks = self._by_key.setdefault(key, [])
        block = self._reuse_on_lane(lane, nbytes, key)
        if block is None:
            block = next((b for b in blocks if not b.busy and not b.pending and b.size >= nbytes), None)
            if block is not None:
                self._stats.in_use += block.size
        if block is None and (len(blocks) < self.max_per_key or all(b.busy for b in blocks)):
            # Room for one more, or every workspace of the key is held by a caller: allocate.
            block = _Block(self._allocate_region(nbytes, "cached workspace"), 0, nbytes, key)
            blocks.append(block)
            self._stats.in_use += nbytes
        return block

    def _wait_target(self, nbytes: int, stream: Stream, key: Hashable) -> tuple[int, int] | None:
        key = ("bytes", nbytes) if key is None else key
        with self._lock:
            pending = [(b.tag, b.lane) for b in self._by_key.get(key, ()) if b.lane is not None]
            if not pending:
                return None
            tag, lane = min(pending)
            return lane, tag

    def _returned(self, block: _Block) -> None:
        self._stats.in_use -= block.size

    def _free_everything(self) -> None:
        for blocks in self._by_key.values():
            for block in blocks:
                self._free_region(block.region)
        self._by_key.clear()


class PerCallWorkspace(WorkspaceStrategy):
    """Allocate per launch; :meth:`release_after` waits until the stream passed it, then frees."""

    name = "per-call"
    blocking_release = True
    pinnable = False

    def __init__(self, device: Device, *, timeline: Timeline | None = None):
        super().__init__(device, timeline=timeline)
        self._live: set[_Block] = set()

    def _take(self, nbytes: int, lane: int, key: Hashable) -> _Block | None:
        block = _Block(self._allocate_region(nbytes, "per-call workspace"), 0, nbytes)
        self._live.add(block)
        self._stats.in_use += nbytes
        return block

    def release_after(self, workspace: Workspace, stream: Stream, *, publish: bool = True) -> None:
        """Wait until ``stream`` passed everything enqueued so far, then free."""
        target = self._mark_passing(workspace, stream)
        if target is not None:
            self.timeline.wait_blocking(*target)
            self._free_passed()

    async def release_after_async(self, workspace: Workspace, stream: Stream) -> None:
        """Await until ``stream`` passed everything enqueued so far, then free.  Cancelled, the
        workspace is freed later, once the stream passed it."""
        target = self._mark_passing(workspace, stream)
        if target is not None:
            await self.timeline.wait(*target)
            self._free_passed()

    def _mark_passing(self, workspace: Workspace, stream: Stream) -> tuple[int, int] | None:
        """Tag ``workspace``'s block with the stream's next timeline value and publish it; returns
        the (lane, value) to wait for (None for :data:`NO_WORKSPACE`)."""
        block = self._claim(workspace)
        if block is None:
            return None
        self._tag(block, stream, True)
        assert block.lane is not None
        return block.lane, block.tag

    def _free_passed(self) -> None:
        with self._lock:
            self._reclaim()

    def _returned(self, block: _Block) -> None:
        self._live.discard(block)
        self._stats.in_use -= block.size
        self._free_region(block.region)

    def _free_everything(self) -> None:
        for block in list(self._live):
            self._returned(block)
