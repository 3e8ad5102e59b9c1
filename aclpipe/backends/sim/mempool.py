"""The stream-ordered allocator: ``aclrtMemPool*`` (``acl_rt_memory_soma.h``) on the simulated device.

These are :class:`~aclpipe.backends.sim.backend.SimBackend`'s methods of the
:class:`~aclpipe.backends.protocol.StreamOrderedAlloc` sub-protocol, bound as they are (see
:mod:`.core`).  The rules are the runtime's, read from ``hicann/runtime``:

- Only Atlas A2 has it (``docs/zh/api_ref/11-10_ordered_stream_memory_allocation.md``, each
  call's product table); elsewhere every call returns 207000, as ``ApiImplSoma``'s stub does
  (``src/runtime/api/impl/api_impl_stub.cc``).
- A pool is PINNED device memory of this device (``aclrtMemPoolCreateImpl``,
  ``src/acl/aclrt_impl/memory.cpp``) of ``maxSize`` rounded up to 2 MB, or the device's whole
  memory rounded down for 0; more than the device has is 107000
  (``SomaApi::AlignAndValidatePoolSize``, ``src/runtime/feature/soma/soma.cc``).
- ``MallocAsync`` picks the block on the host at once, its size rounded up to 2 MB
  (``ApiImplSoma::MemPoolMallocAsync``, ``DEVICE_POOL_MIN_BLOCK_SIZE``), and enqueues the
  ``SomaMemMng`` AICPU task that maps it in the stream's order.  The sanitizer counts that task
  as a write of the block: a kernel on another stream that is not ordered after it by an event
  is a :class:`~aclpipe.errors.HazardError`.  0 bytes allocates nothing and returns 0
  (``aclrtMemPoolMallocAsyncImpl``); no room left is 507000 (``RT_ERROR_MEM_POOL_ALLOC`` maps to
  ``ACL_ERROR_RT_INTERNAL_ERROR``: ``ErrorcodeManage::GetRtExtErrCode``).
- ``FreeAsync`` takes the block back on the host at once (its bytes leave ``USED_MEM_CURRENT``)
  and enqueues the task that unmaps it, again a write of the block: a kernel of another stream
  still using it unordered is a HazardError, and work after the free fails when it runs (107000,
  the address was freed).  The block is *cached*: ``SegmentManager::TryToReuse`` returns nothing
  in this source, so it is handed out again only after ``TrimTo`` (``stream_mem_pool.cc``).
  An address the pool did not hand out is 107000 (``GetAllocSize`` is 0); a live ``aclrtMalloc``
  address is freed by a host function in the stream's order, as the runtime does.
- ``TrimTo(keep)`` releases cached blocks, smallest first, until the pool reserves ``keep``
  bytes; ``keep`` above the pool's size or below the bytes in use is 507000
  (``SegmentManager::TrimTo``).  Released room may go to any stream next, so the sanitizer
  requires the host to have seen each released block's free run (a synchronize after it).
  Without the sanitizer a block whose free has not run yet stays cached.

Modelling limits: a block is backed by the bytes asked for (the pool's figures count 2 MB
blocks); addresses are never reused (the device's rule), so a block handed out after a trim has
a new address; and a capturing stream refuses the calls with 207000 (the runtime would capture
the AICPU task with the address fixed at capture time, which a later trim may hand out again).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...errors import error_from_code
from ..protocol import MemPoolAttr, align_up
from .stream import KERNEL, Task

if TYPE_CHECKING:
    from .core import SimDevice
    from .memory import Allocation
    from .stream import SimStream

__all__ = ["POOL_BLOCK", "SOMA_TASK_SECONDS", "MemPools", "SimMemPool", "mem_pool_create", "mem_pool_destroy",
           "mem_pool_free_async", "mem_pool_get_attr", "mem_pool_malloc_async", "mem_pool_trim_to"]

#: ``DEVICE_POOL_MIN_BLOCK_SIZE`` and ``DEVICE_POOL_ALIGN_SIZE`` (``stream_mem_pool.hpp``): 2 MB.
POOL_BLOCK = 2 << 20
#: Modelled device time of one ``SomaMemMng`` AICPU task (a map or an unmap): no figure is
#: published; an AICPU task costs several AI Core launches, so the model takes 10 µs.
SOMA_TASK_SECONDS = 10e-6
_POOL_NAMES = itertools.count()


@dataclass(eq=False)
class _Block:
    """One allocation from a pool: ``size`` is what the pool counts (2 MB granules)."""

    allocation: Allocation
    size: int
    stream: str
    cached: bool = False  # FreeAsync was called: back in the pool, not yet trimmed
    unmapped: bool = False  # its free task ran


@dataclass(eq=False)
class SimMemPool:
    """One ``aclrtMemPool``: its room, its counters and its blocks."""

    name: str
    max_size: int
    reserved: int = 0  # busy + cached (RESERVED_MEM_CURRENT)
    used: int = 0  # busy (USED_MEM_CURRENT)
    reserved_high: int = 0
    used_high: int = 0
    cached: list[_Block] = field(default_factory=list)
    destroyed: bool = False

    def describe(self) -> str:
        return (f"memory pool {self.name} ({self.max_size} bytes: {self.used} in use, "
                f"{self.reserved - self.used} cached until aclrtMemPoolTrimTo)")


class MemPools:
    """A device's pools and the blocks they handed out, by address."""

    def __init__(self) -> None:
        self.pools: set[SimMemPool] = set()
        self.busy: dict[int, tuple[SimMemPool, _Block]] = {}
        #: Every address a pool handed out: the pools' region, where a free of anything not busy
        #: is 107000 (the sim never reuses an address, so none leaves it).
        self.handed: set[int] = set()


def _check_supported(device: SimDevice, call: str) -> None:
    if not device.spec.stream_ordered_alloc:
        raise error_from_code(207000, f"{call}: {device.spec.name} has no stream-ordered allocator "
                                      "(11-10_ordered_stream_memory_allocation.md: Atlas A2 only)")


def _pool(device: SimDevice, pool: SimMemPool, call: str) -> SimMemPool:
    if pool not in device.mempools.pools:
        # RT_ERROR_MEM_POOL_NULL: "Memory pool is not created or destroyed" (api_impl_soma.cc).
        raise error_from_code(507000, f"{call}: {pool!r} is not a memory pool of this device (never created, "
                                      "or destroyed)")
    return pool


def _check_stream(device: SimDevice, stream: SimStream, call: str) -> None:
    device._check_stream(stream)
    device.refuse_in_host_function(call)
    if stream.capture is not None:
        raise error_from_code(207000, f"{call} on a capturing stream: the simulator does not capture the "
                                      "stream-ordered allocator (the address would be fixed at capture time)")


def mem_pool_create(device: SimDevice, max_size: int = 0) -> SimMemPool:
    """``aclrtMemPoolCreate``: ``max_size`` rounded up to 2 MB (0: the device's memory)."""
    device._check_open()
    device.refuse_in_host_function("aclrtMemPoolCreate")
    _check_supported(device, "aclrtMemPoolCreate")
    total = device.memory.capacity
    size = total // POOL_BLOCK * POOL_BLOCK if max_size == 0 else align_up(max_size, POOL_BLOCK)
    if max_size < 0 or size > total:
        raise error_from_code(107000, f"aclrtMemPoolCreate: maxSize {max_size} ({size} bytes in 2 MB granules) "
                                      f"exceeds the device's {total} bytes")
    pool = SimMemPool(f"p{next(_POOL_NAMES)}", size)
    device.mempools.pools.add(pool)
    return pool


def mem_pool_destroy(device: SimDevice, pool: SimMemPool) -> None:
    """``aclrtMemPoolDestroy``: its memory goes, so the host must have seen every use of it end."""
    _check_supported(device, "aclrtMemPoolDestroy")
    device.refuse_in_host_function("aclrtMemPoolDestroy")
    _pool(device, pool, "aclrtMemPoolDestroy")
    pools = device.mempools
    blocks = [block for owner, block in pools.busy.values() if owner is pool] + pool.cached
    for block in blocks:
        _host_release(device, block, f"aclrtMemPoolDestroy of {pool.name}")
    for block in blocks:
        pools.busy.pop(block.allocation.start, None)
        _unmap(device, block)
    pools.pools.discard(pool)
    pool.destroyed, pool.cached, pool.reserved, pool.used = True, [], 0, 0


def mem_pool_malloc_async(device: SimDevice, pool: SimMemPool, nbytes: int, stream: SimStream) -> int:
    """``aclrtMemPoolMallocAsync``: the address now, the memory usable in ``stream``'s order."""
    call = "aclrtMemPoolMallocAsync"
    _check_supported(device, call)
    _check_stream(device, stream, call)
    _pool(device, pool, call)
    if nbytes < 0:
        raise error_from_code(107000, f"{call}: size must not be negative, got {nbytes}")
    if nbytes == 0:
        return 0  # aclrtMemPoolMallocAsyncImpl: success, nothing allocated
    size = align_up(nbytes, POOL_BLOCK)
    if pool.reserved + size > pool.max_size:
        raise error_from_code(507000, f"{call}: {nbytes} bytes ({size} in 2 MB granules) do not fit "
                                      f"{pool.describe()}; freed blocks come back only with aclrtMemPoolTrimTo "
                                      "(SegmentManager::TryToReuse reuses nothing)")
    allocation = device.memory.alloc(nbytes, label=f"{pool.name} block")
    block = _Block(allocation, size, stream.name)
    pool.reserved += size
    pool.used += size
    pool.reserved_high = max(pool.reserved_high, pool.reserved)
    pool.used_high = max(pool.used_high, pool.used)
    device.mempools.busy[allocation.start] = (pool, block)
    device.mempools.handed.add(allocation.start)
    task = Task(KERNEL, "SomaMemMng malloc", lambda: None, seconds=SOMA_TASK_SECONDS, cores=0,
                context={"op": call})
    try:
        device.submit_task(stream, task, writes=[(allocation, allocation.start, allocation.size)])
    except BaseException:
        _undo_malloc(device, pool, block)
        raise
    return allocation.start


def _undo_malloc(device: SimDevice, pool: SimMemPool, block: _Block) -> None:
    """The malloc task was refused: the block goes back as if never handed out."""
    device.mempools.busy.pop(block.allocation.start, None)
    pool.reserved -= block.size
    pool.used -= block.size
    device.memory.free(block.allocation.start)


def mem_pool_free_async(device: SimDevice, address: int, stream: SimStream) -> None:
    """``aclrtMemPoolFreeAsync``: back to the pool now, unmapped in ``stream``'s order."""
    call = "aclrtMemPoolFreeAsync"
    _check_supported(device, call)
    _check_stream(device, stream, call)
    found = device.mempools.busy.get(address)
    if found is None:
        _free_plain(device, address, stream, call)
        return
    pool, block = found
    allocation = block.allocation
    task = Task(KERNEL, "SomaMemMng free", lambda: _unmap(device, block), seconds=SOMA_TASK_SECONDS, cores=0,
                context={"op": call})
    device.submit_task(stream, task, writes=[(allocation, allocation.start, allocation.size)])
    del device.mempools.busy[address]
    block.cached = True
    pool.used -= block.size
    pool.cached.append(block)


def _free_plain(device: SimDevice, address: int, stream: SimStream, call: str) -> None:
    """An address no pool handed out: a live ``aclrtMalloc`` block is freed by a host function in
    the stream's order (``ApiImplSoma::MemPoolFreeAsync``: "assuming it's allocated by sync
    api"); anything else is 107000."""
    allocation = None if address in device.mempools.handed else device.memory.starting_at(address)
    if allocation is None:
        raise error_from_code(107000, f"{call}: {address:#x} is not a block a memory pool handed out (or it was "
                                      "freed already) nor an aclrtMalloc address")
    if device.sanitizer is not None:
        clock = device.sanitizer.snapshot(stream.name)
        device.sanitizer.access(allocation, allocation.start, allocation.size, write=True, actor=stream.name,
                                clock=clock, what=f"{call} of {allocation.describe()}")
    memory = device.memory

    def free() -> None:
        memory.free(address)

    device.host_func(stream, free, f"{call} (aclrtFree)")


def _unmap(device: SimDevice, block: _Block) -> None:
    if not block.unmapped:
        block.unmapped = True
        device.memory.free(block.allocation.start)


def _host_release(device: SimDevice, block: _Block, what: str) -> None:
    """The host hands ``block``'s memory back for good: every use of it must be over."""
    if device.sanitizer is not None:
        allocation = block.allocation
        device.sanitizer.host_access(allocation, allocation.start, allocation.size, write=True,
                                     what=f"{what} (releases {allocation.describe()})")


def mem_pool_trim_to(device: SimDevice, pool: SimMemPool, keep: int) -> None:
    """``aclrtMemPoolTrimTo``: release cached blocks until the pool reserves ``keep`` bytes."""
    call = "aclrtMemPoolTrimTo"
    _check_supported(device, call)
    _pool(device, pool, call)
    if keep > pool.max_size or keep < 0:
        raise error_from_code(507000, f"{call}: keep {keep} bytes is more than {pool.describe()} holds")
    if keep >= pool.reserved:
        return
    if keep < pool.used:
        raise error_from_code(507000, f"{call}: keep {keep} bytes is less than the {pool.used} bytes in use of "
                                      f"{pool.describe()} (SegmentManager::TrimTo)")
    # SegmentComparator: smallest first, then lowest address.
    for block in sorted(pool.cached, key=lambda b: (b.size, b.allocation.start)):
        if pool.reserved <= keep:
            break
        _host_release(device, block, call)
        if not block.unmapped:  # no sanitizer to refuse it: the device still needs the block
            continue
        released = min(block.size, pool.reserved - keep)
        pool.reserved -= released
        block.size -= released
        if block.size == 0:
            pool.cached.remove(block)


def mem_pool_get_attr(device: SimDevice, pool: SimMemPool, attr: MemPoolAttr) -> int:
    """``aclrtMemPoolGetAttr``: a counter, or a reuse flag (all off by default)."""
    _check_supported(device, "aclrtMemPoolGetAttr")
    _pool(device, pool, "aclrtMemPoolGetAttr")
    values = {MemPoolAttr.RESERVED_MEM_CURRENT: pool.reserved, MemPoolAttr.RESERVED_MEM_HIGH: pool.reserved_high,
              MemPoolAttr.USED_MEM_CURRENT: pool.used, MemPoolAttr.USED_MEM_HIGH: pool.used_high}
    return values.get(MemPoolAttr(attr), 0)
