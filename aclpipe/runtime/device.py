"""The device object model, written once over any backend (cuda.core-style).

``dev = open_device("sim")``; ``s = dev.create_stream()``; ``buf = dev.alloc(n)``;
``ev = s.record()``; ``other.wait(ev)``; ``dev.close()``.  Everything is explicit: there is
no current device or stream.  ``close()`` is idempotent everywhere and backed by
``weakref.finalize``.
"""

from __future__ import annotations

import atexit
import math
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Self

import numpy as np

from ..backends import get_backend_class, parse_device
from ..backends.protocol import Backend, Capabilities, FailureMode, PeerAccess, fault_injection, peer_access
from ..dtypes import as_dtype
from ..errors import AclpipeError, BackendError, ClosedResourceError, error_from_code
from .buffer import DeviceBuffer, HostBuffer
from .completion import lanes
from .event import Event, timeout_ms
from .stream import Stream

__all__ = ["Device", "MemInfo", "device_count", "open_device"]


@dataclass(frozen=True)
class MemInfo:
    """Device memory in bytes."""

    free: int
    total: int

    @property
    def used(self) -> int:
        return self.total - self.free


_OPEN: weakref.WeakSet[Device] = weakref.WeakSet()
_EXIT_HOOKED = False
_EXIT_SYNC_MS = 2000  # at interpreter exit, how long to wait for each device's streams


def _sync_at_exit() -> None:
    """At interpreter exit, before ``weakref.finalize`` frees what is still alive in creation
    order (a buffer before the pool that must first wait for it), wait for every open device's
    streams: the frees that follow are then ordered after the device's work.  A device that
    does not get there in time (a hung kernel) is left as it is, everything of it leaked."""
    for device in list(_OPEN):
        if not device.closed and not _drained(device.backend):
            _leak_at_exit(device)


def _drained(backend: Backend) -> bool:
    """Whether the device passed everything enqueued within ``_EXIT_SYNC_MS``.  A sticky error
    nobody is left to read fails the first sync but is consumed by it; a stream still running
    fails the second, which barely waits, too."""
    for wait_ms in (_EXIT_SYNC_MS, 1):
        try:
            backend.device_sync(wait_ms)
            return True
        except AclpipeError:
            continue
    return False


def _leak_at_exit(device: Device) -> None:
    """Keep everything of ``device`` for the rest of the process (README: a leak, by choice,
    instead of a use-after-free).  Freeing memory its work still reads would race that work (the
    sanitizer's HazardError, corruption on hardware), and closing it would wait on streams held
    by the hung kernel; the process's end reclaims it all.  Marked closed, the backend makes
    every finalizer that would free or destroy something of it skip, as after a close."""
    device._finalizer.detach()
    device.backend.closed = True


def _close_backend(backend: Backend, name: str) -> None:
    # Waiters for work on this device stop waiting first (they get ClosedResourceError at
    # once, whoever closes and however long the backend takes); closing stops the streams,
    # after which lane states they passed can be released.
    lanes.device_closed(backend, name)
    try:
        backend.close()
    finally:
        lanes.sweep()


class Device:
    """One opened device.  Create it with :func:`open_device`."""

    def __init__(self, backend: Backend, name: str):
        self.backend = backend
        self.name = name
        self._transfer: Stream | None = None
        self._transfer_lock = threading.Lock()
        self._events_lock = threading.Lock()
        self._live_events = 0
        self._stop_on_failure = False
        self._finalizer = weakref.finalize(self, _close_backend, backend, name)
        global _EXIT_HOOKED
        if not _EXIT_HOOKED:
            # Registered after weakref's own exit hook (the finalizer above made sure of it), so
            # atexit, last in first out, runs this one first.
            atexit.register(_sync_at_exit)
            _EXIT_HOOKED = True
        _OPEN.add(self)

    # -- lifetime ---------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def _check(self) -> None:
        if self.closed:
            raise ClosedResourceError(f"device {self.name} is closed")

    def close(self) -> None:
        """Stop every stream and release the device; idempotent.

        Work still in flight is abandoned: whoever awaits it (a pipeline run, a timeline
        wait) gets :class:`ClosedResourceError` at once rather than waiting for ever.
        """
        self._finalizer()
        # The transfer stream refers back to this device: dropping it now lets a closed device
        # (and the simulator's memory behind it) go with its last reference, not at the next
        # cycle collection (the suite held 6 GB of closed simulated devices that way).
        with self._transfer_lock:
            self._transfer = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def capabilities(self) -> Capabilities:
        return self.backend.capabilities

    def describe(self) -> str:
        return f"{self.name}: {self.backend.describe()}"

    @property
    def failure_mode(self) -> str:
        """``"stop"`` once any stream of this device was created with ``failure_mode="stop"``
        (CANN applies ACL_STOP_ON_FAILURE to every stream of the context), else ``"continue"``."""
        return "stop" if self._stop_on_failure else "continue"

    @property
    def live_events(self) -> int:
        """Events created through this device and not yet closed (``capabilities.max_events``
        bounds them: 65536 on Atlas A2, 1023 on Atlas inference cards)."""
        return self._live_events

    # -- factories ----------------------------------------------------------------------------
    def create_stream(self, priority: int = 0, *, failure_mode: str = "continue") -> Stream:
        """A new stream.

        Parameters
        ----------
        priority:
            0 (highest) to 7.
        failure_mode:
            ``"continue"`` (CANN's default, ACL_CONTINUE_ON_FAILURE): after a failed task the
            stream runs its later tasks, on whatever the failed one left behind.  ``"stop"``
            (ACL_STOP_ON_FAILURE): the stream stops at a failed task, drops what is queued and
            refuses new work (make a new stream, or :meth:`Stream.renew` it).  CANN applies
            ``"stop"`` to every stream of the context, so once one stream asks for it every
            stream of this device stops on failure (06_stream_management.md).
        """
        self._check()
        if failure_mode not in ("continue", "stop"):
            raise ValueError(f"failure_mode must be 'continue' or 'stop', got {failure_mode!r}")
        mode = FailureMode.STOP if failure_mode == "stop" else FailureMode.CONTINUE
        if mode == FailureMode.STOP and not self.capabilities.stop_on_failure:
            raise error_from_code(207000, f"{self.name} cannot set a stream failure mode (aclrtSetStreamFailureMode "
                                          "is missing); use failure_mode='continue'")
        handle = self.backend.stream_create(priority)
        if mode == FailureMode.STOP:
            try:
                self.backend.stream_set_failure_mode(handle, int(mode))
            except BaseException:
                self.backend.stream_destroy(handle)
                raise
            self._stop_on_failure = True
        return Stream(self, handle, priority, mode)

    def create_event(self, timing: bool = False, *, reusable: bool = True) -> Event:
        """A new event.

        Parameters
        ----------
        timing:
            Record device timestamps (``end - start`` in milliseconds).
        reusable:
            True (the default, ``aclrtCreateEventExWithFlag``): record it as often as you like,
            a wait uses the latest record.  False (``aclrtCreateEventWithFlag``): record, wait,
            then :meth:`Event.reset` before recording it again.
        """
        self._check()
        if reusable and not self.capabilities.reusable_events:
            raise error_from_code(207000, f"{self.name} has no reusable events (aclrtCreateEventExWithFlag is "
                                          "missing); create single-use events (reusable=False) and reset them")
        event = Event(self, self.backend.event_create(timing, reusable), timing, reusable)
        with self._events_lock:
            self._live_events += 1
        return event

    def _event_closed(self) -> None:
        with self._events_lock:
            self._live_events -= 1

    def alloc(self, nbytes: int, *, label: str = "") -> DeviceBuffer:
        """Allocate device memory (raises :class:`DeviceOutOfMemory` when full)."""
        self._check()
        if not isinstance(nbytes, (int, np.integer)) or isinstance(nbytes, bool):
            raise TypeError(f"nbytes must be an integer, got {type(nbytes).__name__}")
        if nbytes <= 0:
            raise ValueError(f"nbytes must be positive, got {nbytes}")
        return DeviceBuffer(self, self.backend.mem_alloc(int(nbytes), label), int(nbytes), label)

    def alloc_host(self, nbytes: int, *, label: str = "") -> HostBuffer:
        """Allocate pinned host memory for async copies."""
        self._check()
        if not isinstance(nbytes, (int, np.integer)) or isinstance(nbytes, bool) or nbytes <= 0:
            raise ValueError(f"nbytes must be a positive integer, got {nbytes!r}")
        address, data = self.backend.mem_alloc_host(int(nbytes), label)
        return HostBuffer(self, address, data, label)

    # -- whole-device --------------------------------------------------------------------------
    def sync(self, timeout: float | None = None) -> None:
        """Wait for every stream; raises the first sticky error found.

        ``timeout`` is in seconds (None: no limit), rounded up to whole milliseconds, at least
        1: the runtime refuses a 0 ms device synchronize (``api_error.cc``,
        ``ApiErrorDecorator::DeviceSynchronize``)."""
        self._check()
        self.backend.device_sync(timeout_ms(timeout))

    def mem_info(self) -> MemInfo:
        self._check()
        free, total = self.backend.mem_info()
        return MemInfo(int(free), int(total))

    # -- synchronous conveniences ---------------------------------------------------------------
    def _transfer_stream(self) -> Stream:
        with self._transfer_lock:
            if self._transfer is None:
                self._transfer = self.create_stream()
            return self._transfer

    def _transfer_sync(self, enqueue: Callable[[Stream], None]) -> None:
        """Enqueue on the transfer stream and wait.  After a failure the next transfer goes to
        a fresh stream: under ACL_STOP_ON_FAILURE the old one refuses new work."""
        stream = self._transfer_stream()
        try:
            enqueue(stream)
            stream.sync()
        except BackendError:
            stream.renew()
            raise

    def upload(self, array: np.ndarray, *, label: str = "") -> DeviceBuffer:
        """Copy ``array`` to new device memory and wait (for constants and tests)."""
        array = np.ascontiguousarray(array)
        as_dtype(array.dtype)  # refuse dtypes the device does not have
        buffer = self.alloc(max(array.nbytes, 1), label=label)
        if array.nbytes:
            staging = self.alloc_host(array.nbytes, label="upload staging")
            staging.numpy()[...] = array.reshape(-1).view(np.uint8)
            self._transfer_sync(lambda stream: stream.memcpy(buffer, staging, array.nbytes))
            staging.close()
        return buffer

    def download(self, buffer: DeviceBuffer, dtype: Any, shape: tuple[int, ...], *, offset: int = 0) -> np.ndarray:
        """Copy device memory back into a new numpy array and wait."""
        numpy_dtype = as_dtype(dtype).numpy
        nbytes = math.prod(shape) * numpy_dtype.itemsize
        result = np.empty(shape, dtype=numpy_dtype)
        if nbytes:
            staging = self.alloc_host(nbytes, label="download staging")
            self._transfer_sync(lambda stream: stream.memcpy(staging, buffer, nbytes, src_offset=offset))
            result.reshape(-1).view(np.uint8)[...] = staging.numpy()
            staging.close()
        return result

    def copy(self, dst: DeviceBuffer, src: DeviceBuffer, nbytes: int, *, dst_offset: int = 0,
             src_offset: int = 0) -> None:
        """Copy device memory to device memory (the same buffer or another) and wait."""
        self._transfer_sync(lambda stream: stream.memcpy(dst, src, nbytes, dst_offset=dst_offset,
                                                         src_offset=src_offset))

    # -- several devices ------------------------------------------------------------------------
    def _peer(self, peer: Device, what: str) -> PeerAccess:
        self._check()
        if not isinstance(peer, Device):
            raise TypeError(f"{what} takes a Device, got {type(peer).__name__}")
        peer._check()
        if peer.backend.name != self.backend.name:
            raise ValueError(f"{what}: {self.name} and {peer.name} are devices of different backends")
        access = peer_access(self.backend)
        if access is None:
            raise NotImplementedError(f"{self.name} cannot reach other devices' memory (no peer access)")
        return access

    def can_access_peer(self, peer: Device) -> bool:
        """Whether this device can copy to and from ``peer``'s memory (``aclrtDeviceCanAccessPeer``);
        False for a backend without peer access."""
        if peer_access(self.backend) is None:
            return False
        return self._peer(peer, "can_access_peer").device_can_access_peer(peer.backend.index)

    def enable_peer_access(self, peer: Device) -> None:
        """Let this device's streams copy to and from ``peer``'s memory (one way:
        ``aclrtDeviceEnablePeerAccess``).  ``stream.memcpy(peer_buffer, buffer)`` on a stream of
        this device then pushes over the peer link."""
        self._peer(peer, "enable_peer_access").device_enable_peer_access(peer.backend.index, 0)

    def disable_peer_access(self, peer: Device) -> None:
        """Undo :meth:`enable_peer_access` (``aclrtDeviceDisablePeerAccess``)."""
        self._peer(peer, "disable_peer_access").device_disable_peer_access(peer.backend.index)

    # -- simulator extras --------------------------------------------------------------------
    def inject_fault(self, kind: str, match: str | None = None, **options: Any) -> Any:
        """Plant a fault (backends with ``capabilities.fault_injection`` only)."""
        self._check()
        faults = fault_injection(self.backend)
        if faults is None:
            raise NotImplementedError(f"{self.name} cannot inject faults; use the 'sim' backend")
        return faults.inject_fault(kind, match, **options)

    def release_hangs(self) -> None:
        """Let every task held by a planted ``hang`` fault go on."""
        faults = fault_injection(self.backend)
        if faults is not None:
            faults.release_hangs()

    def __repr__(self) -> str:
        return f"<Device {self.name}{' closed' if self.closed else ''}>"


def open_device(device: str | None = None, /, **options: Any) -> Device:
    """Open a device by name: ``"sim"``, ``"sim:1"``, ``"ascend:0"``; default from
    ``ACLPIPE_DEVICE``, else ``"sim"``.  Options go to the backend (for the simulator:
    ``timing``, ``time_scale``, ``sanitizer`` (on unless ``False`` or ``ACLPIPE_SANITIZER=0``),
    ``capacity``, ``spec`` (``"atlas-a2"``, ``"atlas-310p"``, ``"atlas-200i-a2"``), ``max_streams``).
    Both backends take the runtime's timeouts: ``op_execute_timeout`` (seconds a kernel may run,
    ``aclrtSetOpExecuteTimeOut``; default the product's, 1091 s on A2/A3, 547 s on inference
    cards) and ``op_wait_timeout`` (seconds an event wait may block before the stream fails with
    107020 at its next synchronize, ``aclrtSetOpWaitTimeout``; default none, whole seconds, not
    on inference cards).  On hardware both are process-wide.
    An option the backend does not take is refused with a ``TypeError`` that lists those it takes."""
    name, index = parse_device(device)
    cls = get_backend_class(name)
    known = _backend_options(cls)
    unknown = sorted(set(options) - set(known)) if known is not None else None
    if unknown:
        raise TypeError(f"open_device({name!r}): unknown option(s) {', '.join(unknown)}; the {name} backend takes "
                        f"{', '.join(known or ()) or 'no options'}")
    return Device(cls(index, **options), f"{name}:{index}")


def _backend_options(cls: type) -> list[str] | None:
    """The keyword options a backend's constructor takes after the device index (None: any)."""
    import inspect

    parameters = list(inspect.signature(cls).parameters.values())[1:]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return [p.name for p in parameters if p.kind in (inspect.Parameter.KEYWORD_ONLY,
                                                      inspect.Parameter.POSITIONAL_OR_KEYWORD)]


def device_count(backend: str = "sim") -> int:
    """How many devices ``backend`` has (0 when it cannot be loaded)."""
    try:
        return int(get_backend_class(backend).device_count())
    except LookupError:
        return 0
