"""A stream-ordered caching allocator over device memory (policy written once, over any backend).

``pool = MemoryPool(device)``; ``buf = pool.allocate(nbytes, stream)``; enqueue work on
``stream``; ``pool.free(buf)``.  Freeing does not wait for the device: the block goes back to
the free list of the stream it was last used on, and an event is recorded there.  That is
enough for safety because

- on the *same* stream, later work runs after everything enqueued before the free (stream
  order), so the block can be handed out again at once;
- on *another* stream, the new owner's stream first waits on the event recorded at the free,
  so its work is ordered after every use on the old stream.  The sanitizer sees that wait.

Cross-stream reuse prefers blocks whose event has already completed (the wait then costs
nothing); a block still in flight on another stream is taken only when a new allocation
would fail, because its wait can stall the new stream behind unrelated work.

Sizes are rounded to a size class (``round_to`` bytes; above 1 MiB, four classes per power
of two) and a request takes the smallest cached block of its class or larger, up to twice
its class, so small requests do not pin large blocks.

Out of memory (the device's, or the pool's own ``limit``): take any cached block that fits,
even one in flight on another stream; then release every cached block to the device
(synchronizing each block's event first, so the device is done with it) and retry once;
then raise :class:`DeviceOutOfMemory` with ``requested``, ``in_use`` and ``limit``.
"""

from __future__ import annotations

import bisect
import contextlib
import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Self

import numpy as np

from ..errors import AclpipeError, BackendError, ClosedResourceError, DeviceOutOfMemory
from .buffer import DeviceBuffer
from .event import Event
from .stream import Stream

if TYPE_CHECKING:
    from .device import Device

__all__ = ["MemoryPool", "PoolBuffer", "PoolStats"]

_LARGE = 1 << 20  # above this, size classes grow geometrically
_CLASSES_PER_DOUBLING = 4
_MAX_WASTE = 2  # a cached block serves requests down to half its size
_ALIGNMENT = 32  # device addresses handed to kernels must be 32-byte aligned


@dataclass(frozen=True)
class PoolStats:
    """What a :class:`MemoryPool` holds and how it has fared; sizes in bytes."""

    allocated: int  #: held from the device: in use plus cached
    cached: int  #: on free lists, ready for reuse
    in_use: int  #: handed out and not yet freed
    peak: int  #: the highest ``allocated`` so far
    hits: int  #: requests served from a free list
    misses: int  #: requests that allocated a new block
    cross_stream_reuses: int  #: hits that took a block freed on another stream
    oom_recoveries: int  #: allocations that succeeded only after releasing the cache
    blocks: int  #: device allocations held


class _Block:
    """One device allocation the pool owns; ``stream``/``event`` are its last free's."""

    __slots__ = ("event", "memory", "owner", "size", "stream")

    def __init__(self, memory: DeviceBuffer, size: int, stream: Stream):
        self.memory = memory
        self.size = size
        self.stream = stream  # the allocating stream while in use, the freeing stream once cached
        self.event: Event | None = None
        self.owner: weakref.ref[PoolBuffer] | None = None


def _block_size(block: _Block) -> int:
    return block.size


class PoolBuffer(DeviceBuffer):
    """A block of a :class:`MemoryPool`, usable wherever a :class:`DeviceBuffer` is.

    ``nbytes`` is what was asked for (the block may be larger); ``stream`` is the stream it
    was allocated for.  ``close()`` (or garbage collection) returns it to the pool on that
    stream; ``pool.free(buffer, other_stream)`` returns it on the stream that used it last.
    """

    def __init__(self, pool: MemoryPool, block: _Block, nbytes: int, stream: Stream):
        # No DeviceBuffer.__init__: the memory belongs to the pool's block, and dropping this
        # buffer must hand the block back to the pool, not free it on the device.
        self.device = pool.device
        self.address = block.memory.address
        self.nbytes = nbytes
        self.label = "pool"
        self.pool = pool
        self.stream = stream
        self._block = block
        self._finalizer = weakref.finalize(self, pool._release, block, stream, True)

    def close(self, stream: Stream | None = None) -> None:
        """Return the block to the pool, ordered after the work on ``stream`` (default: the
        allocating stream); idempotent."""
        if stream is not None:
            self.pool._check_stream(stream, "free")
        if self._finalizer.detach() is not None:
            self.pool._release(self._block, stream or self.stream)

    free = close

    def __repr__(self) -> str:
        state = "returned" if self.closed else f"at {self.address:#x}"
        return (f"<PoolBuffer {self.nbytes} bytes ({self._block.size}-byte block) {state} "
                f"for stream {self.stream.name} on {self.device.name}>")


class MemoryPool:
    """Stream-ordered caching allocator (see the module docstring).

    Parameters
    ----------
    device:
        The device whose memory is pooled.
    limit:
        Most bytes the pool may hold from the device (in use plus cached); ``None``: only the
        device's capacity bounds it.
    round_to:
        Size-class granularity in bytes; a positive multiple of 32.
    """

    def __init__(self, device: Device, *, limit: int | None = None, round_to: int = 512):
        if not isinstance(round_to, int) or round_to <= 0 or round_to % _ALIGNMENT:
            raise ValueError(f"round_to must be a positive multiple of {_ALIGNMENT} bytes, got {round_to!r}")
        if limit is not None and (not isinstance(limit, int) or limit <= 0):
            raise ValueError(f"limit must be a positive number of bytes or None, got {limit!r}")
        self.device = device
        self.limit = limit
        self.round_to = round_to
        self._lock = threading.RLock()  # re-entrant: a buffer collected inside a pool call frees
        self._blocks: dict[int, _Block] = {}  # every block held, by address
        self._free: dict[Stream, list[_Block]] = {}  # per stream, sorted by size
        self._spare_events: list[Event] = []
        self._counts = {"allocated": 0, "cached": 0, "in_use": 0, "peak": 0, "hits": 0, "misses": 0,
                        "cross_stream_reuses": 0, "oom_recoveries": 0}
        self._finalizer = weakref.finalize(self, _release_everything, device, self._blocks, self._lock)

    # -- public ---------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def size_class(self, nbytes: int) -> int:
        """The block size a request of ``nbytes`` gets."""
        rounded = -(-nbytes // self.round_to) * self.round_to
        if rounded <= _LARGE:
            return rounded
        step = (1 << (rounded - 1).bit_length()) // (2 * _CLASSES_PER_DOUBLING)
        by_class = -(-rounded // step) * step
        return -(-by_class // self.round_to) * self.round_to

    def allocate(self, nbytes: int, stream: Stream) -> PoolBuffer:
        """A buffer of at least ``nbytes`` for work on ``stream``.

        Raises
        ------
        DeviceOutOfMemory
            When neither the cache nor the device (nor ``limit``) can supply the block.
        """
        self._check_open()
        nbytes = _positive_size(nbytes)
        self._check_stream(stream, "allocate")
        size = self.size_class(nbytes)
        with self._lock:
            block = self._take_cached(size, stream, pending=False) or self._allocate_block(size, nbytes, stream)
            block.stream = stream
            self._counts["in_use"] += block.size
            buffer = PoolBuffer(self, block, nbytes, stream)
            block.owner = weakref.ref(buffer)
            return buffer

    def free(self, buffer: PoolBuffer, stream: Stream | None = None) -> None:
        """Return ``buffer`` to the pool after the work enqueued so far on ``stream``.

        ``stream`` is the stream that used the buffer last (default: the one it was allocated
        for).  Work on other streams that used it must be ordered before that stream's current
        end (an event wait), or the next user races with it; the sanitizer reports that.

        Raises
        ------
        ValueError
            The buffer belongs to another pool, or was already freed.
        """
        if not isinstance(buffer, PoolBuffer) or buffer.pool is not self:
            raise ValueError(f"{buffer!r} was not allocated by this pool")
        if stream is not None:
            self._check_stream(stream, "free")
        if buffer._finalizer.detach() is None:
            raise ValueError(f"{buffer!r} was already returned to the pool (double free)")
        self._release(buffer._block, stream or buffer.stream)

    def stats(self) -> PoolStats:
        with self._lock:
            return PoolStats(**self._counts, blocks=len(self._blocks))

    def trim(self) -> int:
        """Release every cached block to the device (waiting until the device is done with
        each); returns the bytes released."""
        self._check_open()
        with self._lock:
            return self._release_cached()

    def close(self) -> None:
        """Wait for the device and release every block, in use or cached; buffers still out
        become closed.  Idempotent."""
        self._finalizer()
        with self._lock:
            self._free.clear()
            self._spare_events.clear()
            self._counts.update(allocated=0, cached=0, in_use=0)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        stats = self.stats()
        return (f"<MemoryPool on {self.device.name}: {stats.in_use} bytes in use, {stats.cached} cached"
                f"{'' if self.limit is None else f', limit {self.limit}'}{' closed' if self.closed else ''}>")

    # -- checks -----------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise ClosedResourceError(f"the memory pool on {self.device.name} is closed")

    def _check_stream(self, stream: Stream, what: str) -> None:
        if not isinstance(stream, Stream):
            raise TypeError(f"MemoryPool.{what} needs a Stream, got {type(stream).__name__}")
        if stream.device is not self.device:
            raise ValueError(f"MemoryPool.{what}: {stream!r} belongs to {stream.device.name}, "
                             f"the pool to {self.device.name}")

    # -- taking blocks ------------------------------------------------------------------------------
    def _take_cached(self, size: int, stream: Stream, *, pending: bool) -> _Block | None:
        """A cached block for ``stream``: its own free list first, then other streams' blocks
        whose free has completed (or any, when ``pending``), made safe with an event wait."""
        block = self._best_fit(self._free.get(stream, []), size, pending=True, waste=not pending)
        if block is not None:
            return self._hand_out(block, stream)
        candidates = []
        for other, blocks in self._free.items():
            if other is not stream:
                found = self._best_fit(blocks, size, pending=pending, waste=not pending)
                if found is not None:
                    candidates.append(found)
        if not candidates:
            return None
        block = min(candidates, key=_block_size)
        assert block.event is not None
        stream.wait(block.event)  # stream order on the old stream is no longer enough
        self._counts["cross_stream_reuses"] += 1
        return self._hand_out(block, stream)

    @staticmethod
    def _best_fit(blocks: list[_Block], size: int, *, pending: bool, waste: bool) -> _Block | None:
        start = bisect.bisect_left(blocks, size, key=_block_size)
        for block in blocks[start:]:
            if waste and block.size > _MAX_WASTE * size:
                return None
            if pending or block.event is None or block.event.is_done:
                return block
        return None

    def _hand_out(self, block: _Block, stream: Stream) -> _Block:
        self._free[block.stream].remove(block)
        if block.event is not None:
            # Safe to re-record later: waits already enqueued keep the generation they saw.
            self._spare_events.append(block.event)
            block.event = None
        self._counts["cached"] -= block.size
        self._counts["hits"] += 1
        return block

    def _allocate_block(self, size: int, nbytes: int, stream: Stream) -> _Block:
        try:
            return self._new_block(size, stream)
        except DeviceOutOfMemory as first:
            block = self._take_cached(size, stream, pending=True)
            if block is not None:
                return block
            self._release_cached()
            try:
                block = self._new_block(size, stream)
            except DeviceOutOfMemory:
                raise self._out_of_memory(nbytes, size) from first
            self._counts["oom_recoveries"] += 1
            return block

    def _new_block(self, size: int, stream: Stream) -> _Block:
        counts = self._counts
        if self.limit is not None and counts["allocated"] + size > self.limit:
            raise DeviceOutOfMemory(207001, f"the pool limit of {self.limit} bytes is reached",
                                    requested=size, in_use=counts["allocated"], limit=self.limit)
        memory = self.device.alloc(size, label="pool block")
        block = _Block(memory, size, stream)
        self._blocks[memory.address] = block
        counts["allocated"] += size
        counts["peak"] = max(counts["peak"], counts["allocated"])
        counts["misses"] += 1
        return block

    def _out_of_memory(self, nbytes: int, size: int) -> DeviceOutOfMemory:
        limit = self.limit if self.limit is not None else self.device.mem_info().total
        in_use = self._counts["in_use"]
        detail = (f"memory pool on {self.device.name}: requested {nbytes} bytes (a {size}-byte block) with "
                  f"{in_use} bytes in use of {limit} after releasing every cached block; free pool buffers, "
                  "raise the pool limit or lower the batch size")
        return DeviceOutOfMemory(207001, detail, requested=nbytes, in_use=in_use, limit=limit)

    # -- returning blocks ---------------------------------------------------------------------------
    def _release(self, block: _Block, stream: Stream, collected: bool = False) -> None:
        """Put ``block`` on ``stream``'s free list behind an event recorded there now."""
        with self._lock:
            if self.closed or block.memory.closed:
                return  # close() already released it
            self._counts["in_use"] -= block.size
            try:
                event = stream.record(self._spare_events.pop() if self._spare_events else None)
            except AclpipeError:
                # The stream (or device) is gone, so no event can order the next user: give the
                # block back to the device instead of caching it.
                del self._blocks[block.memory.address]
                self._counts["allocated"] -= block.size
                with contextlib.suppress(AclpipeError) if collected else contextlib.nullcontext():
                    block.memory.close()
                return
            block.stream, block.event, block.owner = stream, event, None
            bisect.insort(self._free.setdefault(stream, []), block, key=_block_size)
            self._counts["cached"] += block.size

    def _release_cached(self) -> int:
        released = 0
        for blocks in self._free.values():
            while blocks:
                block = blocks.pop()
                del self._blocks[block.memory.address]
                self._counts["cached"] -= block.size
                self._counts["allocated"] -= block.size
                released += block.size
                _wait_for_device(block)
                block.memory.close()
        return released


def _positive_size(nbytes: int) -> int:
    if not isinstance(nbytes, (int, np.integer)) or isinstance(nbytes, bool):
        raise TypeError(f"nbytes must be an integer, got {type(nbytes).__name__}")
    if nbytes <= 0:
        raise ValueError(f"nbytes must be positive, got {nbytes}")
    return int(nbytes)


def _wait_for_device(block: _Block) -> None:
    """Block until the device is done with ``block``: its free's event, or (still in use) the
    current end of the stream it was allocated for."""
    event = block.event
    if event is None:
        with contextlib.suppress(AclpipeError):
            event = block.stream.record()
    if event is None:
        return
    # A failed stream still completes its events (carrying the error): its tasks were skipped,
    # so the device is done with the block either way; the stream keeps its own sticky error.
    # An event already closed only happens at interpreter exit, where finalizers run newest
    # first (the pool's events before the pool), after the exit hook synchronized the device.
    with contextlib.suppress(BackendError, ClosedResourceError):
        event.sync()


def _release_everything(device: Device, blocks: dict[int, _Block], lock: threading.RLock) -> None:
    """The pool's finalizer (close or collection): wait for and free every block."""
    first: AclpipeError | None = None
    with lock:
        for block in list(blocks.values()):
            owner = block.owner() if block.owner is not None else None
            if owner is not None:
                owner._finalizer.detach()  # the buffer is dead now; it must not come back
            if not device.closed:
                _wait_for_device(block)
            try:
                block.memory.close()
            except AclpipeError as error:  # e.g. HazardError: report it, but free the rest first
                first = first or error
        blocks.clear()
    if first is not None:
        raise first
