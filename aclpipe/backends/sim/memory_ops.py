"""Memory calls: device and pinned host allocations, host access, and async copies and memsets.

These are :class:`~aclpipe.backends.sim.backend.SimBackend`'s memory methods, bound as they are
(see :mod:`.core`); the address space itself is :mod:`.memory`, copies between devices
:mod:`.peer`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...errors import DeviceOutOfMemory, error_from_code
from ..protocol import MemcpyKind
from .engines import Cost
from .stream import COPY, MEMSET, Task

if TYPE_CHECKING:
    from .core import SimDevice
    from .stream import SimStream

__all__ = ["D2D_ALIGNMENT", "check_copy_rules", "host_access", "mem_alloc", "mem_alloc_host", "mem_free",
           "mem_free_host", "mem_info", "mem_peak", "memcpy_async", "memcpy_sync", "memset_async", "memset_sync"]

#: ``aclrtMemcpyAsync`` restriction in ``include/external/acl/acl_rt.h``: "for on-chip
#: device-to-device memory copy, both the source and destination addresses must be 64-byte aligned".
D2D_ALIGNMENT = 64


def mem_alloc(device: SimDevice, nbytes: int, label: str = "") -> int:
    """``aclrtMalloc``: ``nbytes`` of device memory; its opaque address."""
    device._check_open()
    device.refuse_in_host_function("aclrtMalloc")
    rule = device.faults.check("alloc", label, None)
    if rule is not None:
        raise DeviceOutOfMemory(rule.code or 207001, requested=nbytes, in_use=device.memory.in_use,
                                limit=device.memory.capacity)
    return device.memory.alloc(nbytes, label).start


def mem_free(device: SimDevice, address: int) -> None:
    """``aclrtFree``: the sanitizer refuses a free the host has not ordered after the last use."""
    device._check_open()
    device.refuse_in_host_function("aclrtFree")
    # Only a live allocation's start is checked: anything else (a double free, an interior
    # address) must fail in memory.free with ACL's free error, sanitizer on or off.
    allocation = device.memory.starting_at(address)
    if device.sanitizer is not None and allocation is not None:
        device.sanitizer.host_access(allocation, allocation.start, allocation.size, write=True,
                                     what=f"free of {allocation.describe()}")
    device.memory.free(address)


def mem_alloc_host(device: SimDevice, nbytes: int, label: str = "") -> tuple[int, Any]:
    """``aclrtMallocHost``: a pinned host buffer; its address and numpy bytes."""
    device._check_open()
    device.refuse_in_host_function("aclrtMallocHost")
    allocation = device.memory.alloc_host(nbytes, label)
    return allocation.start, allocation.data


def mem_free_host(device: SimDevice, address: int) -> None:
    """``aclrtFreeHost``, checked like :func:`mem_free`."""
    device.refuse_in_host_function("aclrtFreeHost")
    allocation = device.memory.starting_at(address, host=True)
    if device.sanitizer is not None and allocation is not None:
        device.sanitizer.host_access(allocation, allocation.start, allocation.size, write=True,
                                     what=f"free of {allocation.describe()}")
    device.memory.free_host(address)


def mem_info(device: SimDevice) -> tuple[int, int]:
    """``aclrtGetMemInfo``: ``(free, total)`` device bytes."""
    return device.memory.capacity - device.memory.in_use, device.memory.capacity


def mem_peak(device: SimDevice) -> int | None:
    """The most device bytes allocated at once since the device opened."""
    return device.memory.peak


def host_access(device: SimDevice, address: int, nbytes: int, *, write: bool, what: str) -> None:
    """Check a host read or write of a pinned buffer for happens-before (sanitizer on only)."""
    if device.sanitizer is None:
        return
    allocation, _ = device.memory.find(address, nbytes, what=what)
    device.sanitizer.host_access(allocation, address, nbytes, write=write, what=what)


def memcpy_async(device: SimDevice, dst: int, src: int, nbytes: int, kind: MemcpyKind, stream: SimStream,
                 context: Mapping[str, Any] | None = None) -> None:
    """``aclrtMemcpyAsync``: the kind must match the buffers; a copy to or from another
    device's memory goes over the peer link (:mod:`.peer`)."""
    device._check_stream(stream)
    kind = MemcpyKind(kind)
    if kind == MemcpyKind.DEVICE_TO_DEVICE and device.peers.crosses(dst, src):
        device.peers.copy(dst, src, nbytes, stream, context)
        return
    what = f"memcpy {kind.name}"
    device._check_copy_rules(dst, src, kind, what)
    src_device, dst_device = kind in (MemcpyKind.DEVICE_TO_HOST, MemcpyKind.DEVICE_TO_DEVICE), kind in (
        MemcpyKind.HOST_TO_DEVICE, MemcpyKind.DEVICE_TO_DEVICE)
    memory = device.memory
    for address, on_device, role in ((src, src_device, "source"), (dst, dst_device, "destination")):
        if memory.is_device(address) != on_device:
            expected = "device memory" if on_device else "a pinned host buffer"
            raise error_from_code(107000, f"{what}: the {role} {address:#x} is not {expected}; "
                                          "the kind must match the buffers")
    src_alloc, src_off = memory.find(src, nbytes, what=f"{what} source")
    dst_alloc, dst_off = memory.find(dst, nbytes, what=f"{what} destination")
    engine = {MemcpyKind.HOST_TO_DEVICE: "h2d", MemcpyKind.DEVICE_TO_HOST: "d2h"}.get(kind, "compute")
    name = f"{engine} copy of {nbytes} bytes"
    live_bytes = device._live_bytes

    def run() -> None:
        source = live_bytes(src_alloc, src_off, nbytes, f"{what} source")
        target = live_bytes(dst_alloc, dst_off, nbytes, f"{what} destination")
        target[...] = source

    task = Task(COPY, name, run, engine=engine, seconds=device.engines.copy_seconds(nbytes, engine),
                context=dict(context or {}))
    device.submit_task(stream, task, reads=[(src_alloc, src, nbytes)], writes=[(dst_alloc, dst, nbytes)])


def check_copy_rules(device: SimDevice, dst: int, src: int, kind: MemcpyKind, what: str) -> None:
    """The copy rules of the product: an async host-to-host copy where the form has one, and
    64-byte aligned device-to-device copies."""
    if kind == MemcpyKind.HOST_TO_HOST and not device.spec.async_host_copies:
        # 11-03_memory_copy_and_set.md, aclrtMemcpyAsync constraints: in the EP form an async
        # host-to-host copy returns ACL_ERROR_RT_FEATURE_NOT_SUPPORT.
        raise error_from_code(207000, f"{what}: {device.spec.name} (EP form) has no asynchronous host-to-host "
                                      "copy (11-03_memory_copy_and_set.md); copy on the host with numpy")
    if kind == MemcpyKind.DEVICE_TO_DEVICE and (dst % D2D_ALIGNMENT or src % D2D_ALIGNMENT):
        raise error_from_code(107008, f"{what}: on-chip device-to-device copies need 64-byte aligned source and "
                                      f"destination (acl_rt.h, aclrtMemcpyAsync), got src {src:#x}, dst {dst:#x}")


def memset_async(device: SimDevice, address: int, value: int, nbytes: int, stream: SimStream) -> None:
    """``aclrtMemsetAsync``: ``nbytes`` of device memory set to ``value``'s low byte."""
    device._check_stream(stream)
    allocation = device.memory.find_device(address, nbytes, what="memset")
    offset = address - allocation.start
    live_bytes = device._live_bytes

    def run() -> None:
        live_bytes(allocation, offset, nbytes, "memset")[...] = value & 0xFF

    task = Task(MEMSET, f"memset of {nbytes} bytes", run,
                seconds=Cost(bytes=nbytes).seconds(device.spec, device.spec.ai_cores))
    device.submit_task(stream, task, reads=[], writes=[(allocation, address, nbytes)])


# -- synchronous copies (aclrtMemcpy, aclrtMemset) --------------------------------------------------
def memcpy_sync(device: SimDevice, dst: int, src: int, nbytes: int, kind: MemcpyKind) -> None:
    """``aclrtMemcpy``: copy now, on the calling thread, ordered with no stream (the sanitizer
    checks both sides as host accesses).  Refused while a capture forbids it (see
    :meth:`.capture.Captures.check_blocking_call`): ``ApiImpl::MemCopySync`` checks the capture
    mode first."""
    device._check_open()
    device.refuse_in_host_function("aclrtMemcpy")
    kind = MemcpyKind(kind)
    what = f"aclrtMemcpy({kind.name})"
    device.captures.check_blocking_call(what)
    on_device = {MemcpyKind.HOST_TO_HOST: (False, False), MemcpyKind.HOST_TO_DEVICE: (False, True),
                 MemcpyKind.DEVICE_TO_HOST: (True, False), MemcpyKind.DEVICE_TO_DEVICE: (True, True)}[kind]
    regions = []
    for address, want, role, write in ((src, on_device[0], "source", False), (dst, on_device[1], "destination", True)):
        if device.memory.is_device(address) != want:
            expected = "device memory" if want else "a pinned host buffer"
            raise error_from_code(107000, f"{what}: the {role} {address:#x} is not {expected}; the kind must match "
                                          "the buffers")
        allocation, offset = device.memory.find(address, nbytes, what=f"{what} {role}")
        if device.sanitizer is not None:
            device.sanitizer.host_access(allocation, address, nbytes, write=write, what=f"{what} {role}")
        regions.append((allocation, offset))
    (src_alloc, src_off), (dst_alloc, dst_off) = regions
    target = device._live_bytes(dst_alloc, dst_off, nbytes, f"{what} destination")
    target[...] = device._live_bytes(src_alloc, src_off, nbytes, f"{what} source")


def memset_sync(device: SimDevice, address: int, value: int, nbytes: int) -> None:
    """``aclrtMemset``: set ``nbytes`` of device memory now; refused like :func:`memcpy_sync`
    while a capture forbids it (``ApiImpl::MemSetSync``)."""
    device._check_open()
    device.refuse_in_host_function("aclrtMemset")
    device.captures.check_blocking_call("aclrtMemset")
    allocation = device.memory.find_device(address, nbytes, what="aclrtMemset")
    if device.sanitizer is not None:
        device.sanitizer.host_access(allocation, address, nbytes, write=True, what="aclrtMemset")
    device._live_bytes(allocation, address - allocation.start, nbytes, "aclrtMemset")[...] = value & 0xFF
