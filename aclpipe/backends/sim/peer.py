"""Several simulated devices in one process: address windows, peer access, peer-link copies.

Addresses.  CANN gives every device's memory its own virtual addresses in the process
(``aclrtPointerGetAttributes`` tells from an address alone which device holds it:
``docs/zh/api_ref/11-05_unified_addressing.md`` of ``hicann/runtime``).  Each open simulated
device therefore gets its own window of device addresses (:func:`claim_window`), and
:func:`owner_of` finds the device an address belongs to.

Peer access (``docs/zh/api_ref/04_device_management.md``, ``aclrtDeviceCanAccessPeer``,
``aclrtDeviceEnablePeerAccess``, ``aclrtDeviceDisablePeerAccess``):

- a device and its peer must differ, and both must exist;
- enabling is per device and one way: after device 0 enables peer 1, work on device 0 may
  reach device 1's memory, not the reverse; ``flags`` is reserved and must be 0;
- a copy between two devices' memory (``aclrtMemcpyAsync`` with ``ACL_MEMCPY_DEVICE_TO_DEVICE``,
  ``docs/zh/api_ref/11-03_memory_copy_and_set.md``: "query with aclrtDeviceCanAccessPeer, enable
  with aclrtDeviceEnablePeerAccess, then copy") is refused unless the stream's device enabled
  access to the other device.  A pipeline stage therefore *pushes* its results: the copy runs on
  the producing device's stream, into the consumer's memory, over the link the producer enabled.

Timing: a peer copy holds the link from its device to the peer (one link per ordered pair, as
in the full mesh of an 8-NPU server) for ``copy_latency_s + nbytes / peer_bytes_per_s``.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...errors import error_from_code
from .memory import DEVICE_BASE
from .stream import COPY, Task

if TYPE_CHECKING:
    from .core import SimCore
    from .stream import SimStream

__all__ = ["WINDOW_BYTES", "PeerLinks", "claim_window", "owner_of", "release_window"]

#: Device addresses each open device may use (1 TiB); windows sit below the host's mmap range.
WINDOW_BYTES = 1 << 40
_MAX_WINDOWS = 96
_WINDOWS: weakref.WeakValueDictionary[int, SimCore] = weakref.WeakValueDictionary()
_WINDOWS_LOCK = threading.Lock()


def claim_window(backend: SimCore) -> int:
    """The first free address window, now ``backend``'s; returns its base address."""
    with _WINDOWS_LOCK:
        for slot in range(_MAX_WINDOWS):
            if slot not in _WINDOWS:
                _WINDOWS[slot] = backend
                return DEVICE_BASE + slot * WINDOW_BYTES
    raise error_from_code(207004, f"{_MAX_WINDOWS} simulated devices are open in this process; close some first")


def release_window(backend: SimCore) -> None:
    """Give ``backend``'s window back (its device was closed)."""
    with _WINDOWS_LOCK:
        for slot, owner in list(_WINDOWS.items()):
            if owner is backend:
                del _WINDOWS[slot]


def owner_of(address: int) -> SimCore | None:
    """The open simulated device whose window holds ``address``, if any."""
    if address < DEVICE_BASE:
        return None
    with _WINDOWS_LOCK:
        backend = _WINDOWS.get((address - DEVICE_BASE) // WINDOW_BYTES)
    return backend if backend is not None and not backend.closed else None


class PeerLinks:
    """One device's peer access: which peers it enabled, and its outgoing links."""

    def __init__(self, backend: SimCore):
        self.backend = backend
        self.enabled: set[int] = set()
        self._links: dict[int, threading.Lock] = {}
        self._lock = threading.Lock()

    def _check_peer(self, peer: int, call: str) -> None:
        index, count = self.backend.index, self.backend.device_count()
        if isinstance(peer, bool) or not isinstance(peer, int) or not 0 <= peer < count:
            raise error_from_code(107001, f"{call}: peer device {peer!r} does not exist: there are {count}")
        if peer == index:
            raise error_from_code(107000, f"{call}: the peer must be another device than sim:{index} itself")

    def can_access(self, peer: int) -> bool:
        """``aclrtDeviceCanAccessPeer``: every simulated device of a spec with a peer link can."""
        self._check_peer(peer, "aclrtDeviceCanAccessPeer")
        return self.backend.spec.peer_bytes_per_s > 0

    def enable(self, peer: int, flags: int = 0) -> None:
        """``aclrtDeviceEnablePeerAccess``: work on this device may now reach ``peer``'s memory."""
        self._check_peer(peer, "aclrtDeviceEnablePeerAccess")
        if flags != 0:
            raise error_from_code(107000, f"aclrtDeviceEnablePeerAccess: flags is reserved and must be 0, got {flags}")
        if not self.can_access(peer):
            raise error_from_code(207000, f"sim:{self.backend.index} has no link to sim:{peer} "
                                          f"(spec {self.backend.spec.name!r} has no peer_bytes_per_s)")
        with self._lock:
            self.enabled.add(peer)

    def disable(self, peer: int) -> None:
        """``aclrtDeviceDisablePeerAccess``."""
        self._check_peer(peer, "aclrtDeviceDisablePeerAccess")
        with self._lock:
            if peer not in self.enabled:
                raise error_from_code(107000, f"aclrtDeviceDisablePeerAccess: sim:{self.backend.index} never "
                                              f"enabled peer access to sim:{peer}")
            self.enabled.discard(peer)

    def link(self, peer: int) -> threading.Lock:
        """The link from this device to ``peer``: one copy at a time holds it."""
        with self._lock:
            return self._links.setdefault(peer, threading.Lock())

    def crosses(self, *addresses: int) -> bool:
        """Whether any of ``addresses`` is device memory of another open device."""
        own = self.backend.memory
        return any(not own.is_device(a) and owner_of(a) is not None for a in addresses)

    def _memory_side(self, address: int, role: str) -> SimCore:
        if self.backend.memory.is_device(address):
            return self.backend
        owner = owner_of(address)
        index = self.backend.index
        if owner is None:
            raise error_from_code(107000, f"peer copy {role}: {address:#x} is not device memory of any open device")
        if owner.index == index:
            raise error_from_code(107000, f"peer copy {role}: {address:#x} belongs to another opened instance of "
                                          f"sim:{index}; a device can only reach its peers' memory")
        if owner.index not in self.enabled:
            raise error_from_code(107000, f"peer copy {role}: {address:#x} is memory of sim:{owner.index} and "
                                          f"sim:{index} has not enabled peer access to it; call "
                                          f"enable_peer_access (aclrtDeviceEnablePeerAccess) first")
        return owner

    def copy(self, dst: int, src: int, nbytes: int, stream: SimStream, context: Mapping[str, Any] | None) -> None:
        """Enqueue a device-to-device copy that crosses to a peer's memory on ``stream``."""
        source, target = self._memory_side(src, "source"), self._memory_side(dst, "destination")
        src_alloc, src_off = source.memory.find(src, nbytes, what="peer copy source")
        dst_alloc, dst_off = target.memory.find(dst, nbytes, what="peer copy destination")
        peer = target if target is not self.backend else source
        backend = self.backend
        name = f"peer copy of {nbytes} bytes to sim:{target.index}" if target is not backend else \
            f"peer copy of {nbytes} bytes from sim:{source.index}"

        def run() -> None:
            data = backend._live_bytes(src_alloc, src_off, nbytes, "peer copy source")
            target_bytes = backend._live_bytes(dst_alloc, dst_off, nbytes, "peer copy destination")
            target_bytes[...] = data

        spec = backend.spec
        task = Task(COPY, name, run, engine=f"peer:{peer.index}",
                    seconds=spec.copy_latency_s + nbytes / spec.peer_bytes_per_s, context=dict(context or {}))
        backend.submit_task(stream, task, reads=[(src_alloc, src, nbytes)], writes=[(dst_alloc, dst, nbytes)])
