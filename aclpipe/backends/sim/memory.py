"""Simulated device memory and pinned host memory.

Device memory lives in its own opaque address range: a device address is an integer that
means nothing to the host, and host code reaches device bytes only through copies.  Each
allocation is rounded like ``aclrtMalloc`` (``hicann/runtime``
``docs/zh/api_ref/11-01_device_memory_malloc_and_free.md``: the size up to 32 bytes plus 32
bytes, the start 64-byte aligned), is poisoned when fresh and again when freed, and
addresses are never reused, so a stale address always fails loudly instead of aliasing a
newer buffer.

Pinned host buffers (``aclrtMallocHost``) are plain numpy memory at real host addresses,
registered so that async copies can find them.
"""

from __future__ import annotations

import bisect
import collections
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import DeviceOutOfMemory, error_from_code
from ...tensor import TensorDesc

__all__ = ["ALIGNMENT", "DEVICE_BASE", "POISON_BYTE", "Access", "Allocation", "DeviceMemory", "Region", "live_bytes"]

DEVICE_BASE = 0x12C0_0000_0000  # an NPU-like range far from host heap and mmap addresses
ALIGNMENT = 32
START_ALIGNMENT = 64  # aclrtMalloc: "the start address is 64-byte aligned" (11-01)
POISON_BYTE = 0xFF  # all-ones: NaN in every float dtype, -1 in every signed int
_HOST_ALIGNMENT = 64
#: Allocations from this size up are checked against the host's available memory first.
_CHECKED_BYTES = 64 << 20


def _host_backed(nbytes: int, what: str) -> np.ndarray:
    """``nbytes`` of poison in host memory, which holds every simulated allocation (device
    memory as well as pinned host buffers, which CANN keeps page-locked, so resident).  An
    allocation the host cannot hold is refused with 207001 before numpy is asked: filling more
    than the host has would not fail cleanly, the kernel would kill the process."""
    if nbytes >= _CHECKED_BYTES:
        available = _host_available_bytes()
        if available is not None and nbytes > available:
            raise DeviceOutOfMemory(207001, f"{what}: the simulator keeps it in host memory, which has {available} "
                                            "bytes available; lower the batch size or the pipeline depth",
                                    requested=nbytes)
    try:
        return np.full(nbytes, POISON_BYTE, dtype=np.uint8)
    except MemoryError:
        raise DeviceOutOfMemory(207001, f"{what}: the host could not provide the memory the simulator keeps it "
                                        "in; lower the batch size or the pipeline depth", requested=nbytes) from None


def _host_available_bytes() -> int | None:
    """The host's available memory (Linux ``MemAvailable``, else free pages), None if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


@dataclass(eq=False)
class Allocation:
    start: int
    size: int  # bytes the caller asked for
    data: np.ndarray  # uint8, rounded size
    host: bool = False
    alive: bool = True
    label: str = ""
    sanitizer_state: Any = field(default=None, repr=False)

    @property
    def end(self) -> int:
        return self.start + self.data.nbytes

    def describe(self) -> str:
        kind = "pinned host buffer" if self.host else "device allocation"
        label = f" '{self.label}'" if self.label else ""
        return f"{kind}{label} at {self.start:#x} ({self.size} bytes)"


_NO_BYTES = np.zeros(0, np.uint8)  # what a closed device's allocations hold


#: ``(address, nbytes)`` of one region a kernel reads or writes.
Access = tuple[int, int]
#: ``(allocation, address, nbytes)``: a region checked against its allocation.
Region = tuple[Allocation, int, int]


def live_bytes(allocation: Allocation, offset: int, nbytes: int, what: str) -> Any:
    """The bytes a copy or memset touches; a freed allocation is the DMA engine's fault."""
    if not allocation.alive:
        # 25-01_aclError.md: ACL_ERROR_RT_SYS_DMA; 507053 is an uncorrectable memory error (UCE).
        raise error_from_code(507013, f"{what}: {allocation.describe()} was freed while the device still used "
                                      "it (use after free)")
    return allocation.data[offset:offset + nbytes]


def _round(nbytes: int) -> int:
    return ((nbytes + ALIGNMENT - 1) // ALIGNMENT) * ALIGNMENT + ALIGNMENT


class DeviceMemory:
    """Address space of one simulated device plus its pinned host buffers."""

    def __init__(self, capacity: int, base: int = DEVICE_BASE, window: int = 1 << 40):
        self.capacity = capacity
        self.in_use = 0
        self.peak = 0
        self._lock = threading.Lock()
        # Several devices in one process each own a window of addresses (see peer.py).
        self.base = base
        self._end = base + window
        self._next = base
        self._starts: list[int] = []  # sorted starts of live device allocations
        self._by_start: dict[int, Allocation] = {}
        # (start, size, description) of recent frees, for messages about stale addresses.
        self._freed: collections.deque[tuple[int, int, str]] = collections.deque(maxlen=4096)
        self._host: dict[int, Allocation] = {}
        self._host_starts: list[int] = []
        #: The allocation the last lookup found: launches of one program mostly hit one arena,
        #: so most lookups are one range check instead of a search.
        self._last: Allocation | None = None
        #: The allocations :meth:`kernel_regions` found last, newest first (see there).
        self._recent: list[Allocation] = []

    # -- device allocations ------------------------------------------------------------
    def alloc(self, nbytes: int, label: str = "") -> Allocation:
        if nbytes <= 0:
            raise error_from_code(107000, f"cannot allocate {nbytes} bytes: size must be positive")
        rounded = _round(nbytes)
        with self._lock:
            if self.in_use + rounded > self.capacity:
                raise DeviceOutOfMemory(207001, requested=nbytes, in_use=self.in_use, limit=self.capacity)
            if self._next + rounded > self._end:  # addresses are never reused: the window can run out
                raise DeviceOutOfMemory(207001, "this simulated device used up its address window; open a new one")
            start = self._next
            # Leave a guard gap so that an overrun never lands in the next allocation.
            self._next += -(-(rounded + 4096) // START_ALIGNMENT) * START_ALIGNMENT
            self.in_use += rounded
            self.peak = max(self.peak, self.in_use)
        try:
            data = _host_backed(rounded, f"device allocation of {nbytes} bytes")
        except DeviceOutOfMemory:
            with self._lock:
                self.in_use -= rounded
            raise
        allocation = Allocation(start, nbytes, data, label=label)
        with self._lock:
            bisect.insort(self._starts, start)
            self._by_start[start] = allocation
        return allocation

    def free(self, address: int) -> Allocation:
        with self._lock:
            allocation = self._by_start.pop(address, None)
            if allocation is None:
                raise error_from_code(207002, self._unknown(address, "free"))
            del self._starts[bisect.bisect_left(self._starts, address)]
            self._freed.append((allocation.start, allocation.size, allocation.describe()))
            self.in_use -= allocation.data.nbytes
        allocation.alive = False
        allocation.data.fill(POISON_BYTE)
        return allocation

    # -- pinned host -----------------------------------------------------------------------
    def alloc_host(self, nbytes: int, label: str = "") -> Allocation:
        if nbytes <= 0:
            raise error_from_code(107000, f"cannot allocate {nbytes} host bytes: size must be positive")
        raw = _host_backed(nbytes + _HOST_ALIGNMENT, f"pinned host allocation of {nbytes} bytes")
        shift = (-raw.ctypes.data) % _HOST_ALIGNMENT
        data = raw[shift:shift + nbytes]
        allocation = Allocation(data.ctypes.data, nbytes, data, host=True, label=label)
        with self._lock:
            bisect.insort(self._host_starts, allocation.start)
            self._host[allocation.start] = allocation
        return allocation

    def free_host(self, address: int) -> Allocation:
        with self._lock:
            allocation = self._host.pop(address, None)
            if allocation is None:
                raise error_from_code(107000, f"{address:#x} is not a pinned host buffer from alloc_host")
            del self._host_starts[bisect.bisect_left(self._host_starts, address)]
        allocation.alive = False
        allocation.data.fill(POISON_BYTE)
        return allocation

    # -- lookups ---------------------------------------------------------------------------
    def is_device(self, address: int) -> bool:
        return self.base <= address < self._next

    def _containing(self, address: int) -> Allocation | None:
        """The live allocation whose bytes include ``address``: a device allocation for an address
        in the device range, else a pinned host buffer."""
        last = self._last
        if last is not None and last.alive and last.start <= address < last.start + last.size:
            return last
        with self._lock:
            if self.is_device(address):
                starts, table = self._starts, self._by_start
            else:
                starts, table = self._host_starts, self._host
            index = bisect.bisect_right(starts, address) - 1
            allocation = table[starts[index]] if index >= 0 else None
        if allocation is None or address >= allocation.start + allocation.size:
            return None
        self._last = allocation
        return allocation

    def find(self, address: int, nbytes: int, *, what: str) -> tuple[Allocation, int]:
        """The live allocation (device or pinned host) holding ``[address, address+nbytes)``."""
        allocation = self._containing(address)
        if allocation is None:
            raise error_from_code(107000, self._unknown(address, what))
        offset = address - allocation.start
        if offset + nbytes > allocation.size:
            raise error_from_code(
                107000,
                f"{what}: {nbytes} bytes at {address:#x} run past the end of {allocation.describe()} "
                f"by {offset + nbytes - allocation.size} bytes",
            )
        return allocation, offset

    def find_device(self, address: int, nbytes: int, *, what: str, aligned: bool = False) -> Allocation:
        last = self._last
        # The common case first (a kernel binds several regions of one arena in a row): the same
        # checks as below, on the allocation found last.
        if (last is not None and last.alive and last.start <= address < (end := last.start + last.size)
                and address + nbytes <= end and self.base <= address < self._next
                and not (aligned and address % ALIGNMENT)):
            return last
        if not self.is_device(address):
            kind = "a pinned host buffer" if self._containing(address) is not None else "not device memory"
            raise error_from_code(
                107000, f"{what}: address {address:#x} is {kind}; kernels take device addresses "
                "(copy host data to a DeviceBuffer first)")
        if aligned and address % ALIGNMENT:
            raise error_from_code(107008, f"{what}: address {address:#x} is not {ALIGNMENT}-byte aligned")
        return self.find(address, nbytes, what=what)[0]

    def kernel_regions(self, accesses: Iterable[tuple[int, int]], label: str,
                       kind: str) -> tuple[Region, ...]:
        """``(allocation, address, nbytes)`` for each ``(address, nbytes)`` a kernel declares:
        :meth:`find_device` with ``aligned=True`` (an empty region counts as one byte), whose
        errors say ``"<label> <kind>"``.

        The few allocations found last are tried first: a program binds one kernel per node and
        slot, whose regions mostly lie in the slot's arena and a few constants, so looking up
        only the last one would miss at every switch between the two."""
        regions = []
        recent = self._recent
        base, top = self.base, self._next
        for address, nbytes in accesses:
            end = address + (nbytes if nbytes > 1 else 1)
            for allocation in recent:  # the same checks as find_device's, on each recent one
                if allocation.start <= address and end <= allocation.start + allocation.size and allocation.alive:
                    break
            else:
                allocation = None
            if allocation is None or address % ALIGNMENT or not base <= address < top:
                allocation = self.find_device(address, end - address, what=f"{label} {kind}", aligned=True)
                # Replaced whole, never changed in place: another thread may be walking the old list.
                recent = self._recent = [allocation, *[known for known in recent if known is not allocation][:3]]
            regions.append((allocation, address, nbytes))
        return tuple(regions)

    def bytes_at(self, address: int, nbytes: int, *, what: str) -> np.ndarray:
        allocation, offset = self.find(address, nbytes, what=what)
        return allocation.data[offset:offset + nbytes]

    def tensor(self, desc: TensorDesc, *, what: str) -> np.ndarray:
        """A strided numpy view of the tensor's elements in device memory (reads and writes)."""
        allocation = self.find_device(desc.address, desc.extent_bytes, what=what)
        itemsize = desc.dtype.itemsize
        offset = desc.address - allocation.start
        flat = allocation.data[offset:offset + max(desc.extent_bytes, 0)]
        if desc.numel == 0:
            return np.empty(desc.shape, dtype=desc.dtype.numpy)
        # ndarray over the allocation's bytes: numpy checks the strided extent fits the buffer
        # (cheaper than as_strided, which goes through __array_interface__).
        return np.ndarray(desc.shape, desc.dtype.numpy, buffer=flat, offset=desc.offset * itemsize,
                          strides=tuple(s * itemsize for s in desc.strides))

    def _unknown(self, address: int, what: str) -> str:
        for start, size, description in reversed(self._freed):
            if start <= address < start + size:
                return f"{what}: {address:#x} lies in {description}, which was already freed"
        if self.is_device(address):
            return f"{what}: {address:#x} is not inside any live device allocation"
        return f"{what}: {address:#x} is neither device memory nor a pinned host buffer"

    def starting_at(self, address: int, *, host: bool = False) -> Allocation | None:
        """The live allocation (pinned host buffer if ``host``) that starts at ``address``, if any."""
        with self._lock:
            return (self._host if host else self._by_start).get(address)

    def drop_storage(self) -> None:
        """Let go of every allocation's bytes (the device closed: nothing reads them any more).
        The allocations stay listed, for whoever checks what was left open; their storage goes
        now, not when the backend's objects are next collected (they refer to each other)."""
        with self._lock:
            for allocation in [*self._by_start.values(), *self._host.values()]:
                allocation.data = _NO_BYTES
                allocation.sanitizer_state = None
            self._last = None
            self._recent = []

    def live_allocations(self) -> list[Allocation]:
        with self._lock:
            return list(self._by_start.values())

    def live_host_buffers(self) -> list[Allocation]:
        with self._lock:
            return list(self._host.values())
