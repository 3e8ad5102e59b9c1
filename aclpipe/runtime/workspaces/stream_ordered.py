"""The ``stream-ordered`` strategy: each workspace from ``aclrtMemPoolMallocAsync`` on the launch's
stream right before it, back with ``aclrtMemPoolFreeAsync`` right after (see
:mod:`aclpipe.runtime.workspaces`).

CANN's own answer to what the host-function release does (``11-10_ordered_stream_memory_allocation.md``
of ``hicann/runtime``): the stream itself maps and unmaps the block in its order, so no host
function reports that the launch is over and nothing on the host ever waits for a block.  It
exists on Atlas A2 only (elsewhere choosing it is refused, naming the strategies to use).

What the runtime's source adds (:class:`~aclpipe.backends.protocol.StreamOrderedAlloc`): every
block takes 2 MB of the pool's room, and a freed block is cached, not reused, until
``aclrtMemPoolTrimTo``.  So the strategy trims when an allocation finds the pool full, once the
host has seen the frees run: it records an event behind them on each stream that freed, waits for
those events (in a worker thread for async callers), trims to the bytes still in use and tries
again.  Only then does anything wait, about once per ``max_size / 2 MB`` launches.  Trimming
cannot wait less: ``TrimTo`` releases cached blocks by size and address, not by age, so every
free must have run, and a block handed out again before its free ran would be unmapped under its
new user.  The pool is bounded (64 MiB by default, like ``pool``'s limit) because cached blocks
keep their device memory mapped until trimmed: an unbounded pool would take the device's memory
from everything else before its first trim.

Captured programs and launch tables need fixed addresses, which this strategy never gives (it
does not pin): the address is picked on the host when ``MallocAsync`` is called, so a captured
``MallocAsync`` would replay one address the pool may hand out again after a trim, and the
simulator does not capture it.  A pipeline using it runs its programs node by node.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any

import anyio

from ...backends.protocol import MemPoolAttr, StreamOrderedAlloc, stream_ordered_alloc
from ...errors import BackendError, error_from_code
from ..completion.timeline import Timeline
from .base import NO_WORKSPACE, Workspace, WorkspaceStats, WorkspaceStrategy

if TYPE_CHECKING:
    from ..device import Device
    from ..stream import Stream

__all__ = ["StreamOrderedWorkspace"]

#: The pool's size unless told: 32 blocks of 2 MB (see the module docstring).
DEFAULT_MAX_SIZE = 64 << 20
#: ``RT_ERROR_MEM_POOL_ALLOC`` reaches the caller as ``ACL_ERROR_RT_INTERNAL_ERROR``.
_POOL_FULL = 507000


class StreamOrderedWorkspace(WorkspaceStrategy):
    """Workspaces from the stream-ordered allocator: ``MallocAsync`` before each launch,
    ``FreeAsync`` after it, both on the launch's stream.

    Parameters
    ----------
    device:
        Where to allocate; its backend must have ``capabilities.stream_ordered_alloc``.
    max_size:
        The pool's size in bytes (rounded up to 2 MB by the runtime); 0 (what the pipeline passes
        without ``pool_bytes``): 64 MiB.
    timeline:
        See :class:`WorkspaceStrategy` (this strategy publishes nothing on it).

    Raises
    ------
    aclpipe.errors.BackendError
        ``ACL_ERROR_RT_FEATURE_NOT_SUPPORT`` (207000) when the device has no stream-ordered allocator.
    """

    name = "stream-ordered"
    #: Addresses differ from launch to launch (see the module docstring): nothing is pinned.
    pinnable = False

    def __init__(self, device: Device, *, max_size: int = DEFAULT_MAX_SIZE, timeline: Timeline | None = None):
        allocator = stream_ordered_alloc(device.backend)
        if allocator is None:
            raise error_from_code(207000, f"the 'stream-ordered' workspace strategy needs aclrtMemPoolMallocAsync, "
                                          f"which {device.backend.describe()} does not have: CANN offers it on Atlas "
                                          "A2 only (11-10_ordered_stream_memory_allocation.md); use 'pool' (blocks "
                                          "returned by batched host functions) or 'static' instead")
        if max_size < 0:
            raise ValueError(f"max_size must be positive (0: {DEFAULT_MAX_SIZE} bytes), got {max_size}")
        max_size = max_size or DEFAULT_MAX_SIZE
        super().__init__(device, timeline=timeline)
        self._allocator: StreamOrderedAlloc = allocator
        self._pool: Any = allocator.mem_pool_create(max_size)
        self._stats.limit = max_size
        self._live: dict[int, Stream] = {}  # address -> the stream it was allocated on
        self._freed_on: dict[int, Stream] = {}  # id -> a stream that freed since the last trim
        self.trims = 0

    # -- the interface ----------------------------------------------------------------------
    def try_acquire(self, nbytes: int, stream: Stream, key: Hashable | None = None) -> Workspace | None:
        """A block of ``nbytes`` usable in ``stream``'s order, or None when the pool is full
        until a trim (which :meth:`acquire` and :meth:`acquire_async` make)."""
        with self._lock:
            self._stats.acquires += 1
            if nbytes <= 0:
                return NO_WORKSPACE
            try:
                address = self._allocator.mem_pool_malloc_async(self._pool, nbytes, stream.handle)
            except BackendError as error:
                if error.code == _POOL_FULL and self._freed_on:
                    self._stats.acquires -= 1
                    return None
                raise
            self._live[address] = stream
            self._stats.allocations += 1
            self._stats.in_use += nbytes
            self._stats.peak = max(self._stats.peak, self._stats.in_use)
            return Workspace(address, nbytes)

    def acquire(self, nbytes: int, stream: Stream, key: Hashable | None = None, *,
                timeout: float | None = None) -> Workspace:
        """Like :meth:`try_acquire`; a full pool is trimmed first (waiting for the frees to run)."""
        workspace = self.try_acquire(nbytes, stream, key)
        if workspace is None:
            self._count_wait()
            self._trim(timeout)
            workspace = self._acquire_or_raise(nbytes, stream, key)
        return workspace

    async def acquire_async(self, nbytes: int, stream: Stream, key: Hashable | None = None) -> Workspace:
        """Like :meth:`acquire`, waiting for the frees in a worker thread."""
        workspace = self.try_acquire(nbytes, stream, key)
        if workspace is None:
            self._count_wait()
            await anyio.to_thread.run_sync(self._trim, None)
            workspace = self._acquire_or_raise(nbytes, stream, key)
        return workspace

    def release_after(self, workspace: Workspace, stream: Stream, *, publish: bool = True) -> None:
        """``FreeAsync`` on ``stream``: back once the stream passed what is enqueued on it."""
        if self._claim_address(workspace):
            self._free(workspace, stream)

    def abandon(self, workspace: Workspace, stream: Stream) -> None:
        """The launch failed: ``FreeAsync`` on ``stream``, after whatever did get enqueued."""
        self.release_after(workspace, stream)

    def release_now(self, workspace: Workspace) -> None:
        """The caller synchronized: ``FreeAsync`` on the stream that allocated it (it is idle)."""
        if self._claim_address(workspace):
            self._free(workspace, self._live[workspace.address])

    def stats(self) -> WorkspaceStats:
        """The counters; ``reserved`` is the pool's ``RESERVED_MEM_CURRENT`` (2 MB per block
        handed out and not trimmed yet)."""
        with self._lock:
            snapshot = super().stats()
            if not self._closed:
                snapshot.reserved = self._allocator.mem_pool_get_attr(self._pool, MemPoolAttr.RESERVED_MEM_CURRENT)
            return snapshot

    def pool_high(self) -> int:
        """The most bytes the pool reserved at once (``RESERVED_MEM_HIGH``, 2 MB granules)."""
        with self._lock:
            return 0 if self._closed else self._allocator.mem_pool_get_attr(self._pool, MemPoolAttr.RESERVED_MEM_HIGH)

    def close(self) -> None:
        """Wait until the streams ran every free, then destroy the pool; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if not self.device.closed:
            self._wait_for_frees(None)
            self._allocator.mem_pool_destroy(self._pool)
        with self._lock:
            self._live.clear()
            self._stats.reserved = 0
        if self._own_timeline:
            self.timeline.close()

    # -- what the base class would decide (unused here) -------------------------------------
    def _take(self, nbytes: int, lane: int, key: Hashable) -> None:
        raise NotImplementedError("the stream-ordered strategy allocates in try_acquire")

    def _returned(self, block: object) -> None:
        """Blocks come back in stream order: nothing is reclaimed on the host."""

    def _free_everything(self) -> None:
        """The pool goes with :meth:`close`."""

    def reserve(self, sizes: Mapping[Stream, int]) -> None:
        """Nothing to reserve: the pool grows to its size as launches ask."""

    # -- machinery ----------------------------------------------------------------------------
    def _claim_address(self, workspace: Workspace) -> bool:
        """Mark ``workspace`` released; False for :data:`NO_WORKSPACE`, which holds nothing."""
        if workspace._released:
            raise ValueError("this workspace was already released; each acquire gets one release")
        if workspace.address == 0:
            return False
        workspace._released = True
        return True

    def _free(self, workspace: Workspace, stream: Stream) -> None:
        with self._lock:
            self._allocator.mem_pool_free_async(workspace.address, stream.handle)
            self._live.pop(workspace.address, None)
            self._stats.in_use -= workspace.nbytes
            self._freed_on[id(stream)] = stream

    def _acquire_or_raise(self, nbytes: int, stream: Stream, key: Hashable | None) -> Workspace:
        workspace = self.try_acquire(nbytes, stream, key)
        if workspace is None:  # every cached block was trimmed and it still does not fit
            raise error_from_code(_POOL_FULL, f"no stream-ordered workspace of {nbytes} bytes fits the pool with "
                                              f"{self._stats.in_use} bytes in use even after a trim; pass a larger "
                                              "max_size, or use the 'pool' strategy")
        return workspace

    def _trim(self, timeout: float | None) -> None:
        """Let the host see every free run, then give the cached blocks back to the pool.  A free
        made by another thread while this one waited is waited for too before the trim: TrimTo
        releases every cached block, whichever stream freed it."""
        while True:
            self._wait_for_frees(timeout)
            with self._lock:
                if self._freed_on:
                    continue
                used = self._allocator.mem_pool_get_attr(self._pool, MemPoolAttr.USED_MEM_CURRENT)
                self._allocator.mem_pool_trim_to(self._pool, used)
                self.trims += 1
                return

    def _wait_for_frees(self, timeout: float | None) -> None:
        """An event recorded behind the frees of every stream that freed, waited for.  A failed
        stream's error stays on the stream for its owner (an event wait does not take it)."""
        with self._lock:
            streams, self._freed_on = list(self._freed_on.values()), {}
        for stream in streams:
            if stream.closed:
                continue
            event = stream.record()
            try:
                event.sync(timeout)
            except BackendError:
                pass  # the stream failed; its frees ran or were dropped with it
            finally:
                event.close()
