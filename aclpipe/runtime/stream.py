"""Streams: in-order device queues.  Streams are always explicit; there is no current stream."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..backends.protocol import MemcpyKind
from ..errors import ClosedResourceError
from .buffer import DeviceBuffer, HostBuffer
from .event import Event, _ms

if TYPE_CHECKING:
    from .device import Device

__all__ = ["Stream"]

_Buffer = DeviceBuffer | HostBuffer


def _destroy(backend: Any, handle: Any) -> None:
    if not backend.closed:
        backend.stream_destroy(handle)


class Stream:
    """A device stream.  Work runs in the order it is enqueued; other streams run concurrently."""

    def __init__(self, device: Device, handle: Any, priority: int):
        self.device = device
        self.handle = handle
        self.priority = priority
        self._finalizer = weakref.finalize(self, _destroy, device.backend, handle)

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    @property
    def name(self) -> str:
        return str(getattr(self.handle, "name", self.handle))

    def _check(self) -> None:
        if not self._finalizer.alive:
            raise ClosedResourceError(f"stream {self.name} was closed")

    def memcpy(self, dst: _Buffer, src: _Buffer, nbytes: int | None = None, *, dst_offset: int = 0,
               src_offset: int = 0) -> None:
        """Copy asynchronously; the direction follows from the buffer kinds.  Host buffers must be
        pinned (:meth:`Device.alloc_host`) and stay untouched until the copy completes."""
        self._check()
        for role, buffer in (("dst", dst), ("src", src)):
            if not isinstance(buffer, (DeviceBuffer, HostBuffer)):
                raise TypeError(f"memcpy {role} must be a DeviceBuffer or HostBuffer, got {type(buffer).__name__}; "
                                "copy numpy arrays through a pinned HostBuffer or use Device.upload()")
            buffer.check_open()
        if nbytes is None:
            nbytes = min(dst.nbytes - dst_offset, src.nbytes - src_offset)
        for role, buffer, offset in (("dst", dst, dst_offset), ("src", src, src_offset)):
            if offset < 0 or nbytes < 0 or offset + nbytes > buffer.nbytes:
                raise ValueError(f"memcpy of {nbytes} bytes at {role} offset {offset} overruns the "
                                 f"{buffer.nbytes}-byte {role} buffer")
        # isinstance, not type(): subclasses (MemoryPool's PoolBuffer) are device buffers too.
        kind = {
            (True, True): MemcpyKind.DEVICE_TO_DEVICE,
            (True, False): MemcpyKind.HOST_TO_DEVICE,
            (False, True): MemcpyKind.DEVICE_TO_HOST,
            (False, False): MemcpyKind.HOST_TO_HOST,
        }[(isinstance(dst, DeviceBuffer), isinstance(src, DeviceBuffer))]
        if nbytes:
            self.device.backend.memcpy_async(dst.address + dst_offset, src.address + src_offset, nbytes, kind,
                                             self.handle)

    def memset(self, dst: DeviceBuffer, value: int, nbytes: int | None = None, *, offset: int = 0) -> None:
        self._check()
        if not isinstance(dst, DeviceBuffer):
            raise TypeError(f"memset needs a DeviceBuffer, got {type(dst).__name__}")
        dst.check_open()
        nbytes = dst.nbytes - offset if nbytes is None else nbytes
        if offset < 0 or offset + nbytes > dst.nbytes:
            raise ValueError(f"memset of {nbytes} bytes at offset {offset} overruns the {dst.nbytes}-byte buffer")
        if nbytes:
            self.device.backend.memset_async(dst.address + offset, value, nbytes, self.handle)

    def record(self, event: Event | None = None, *, timing: bool = False) -> Event:
        """Record ``event`` (a new one if omitted) at the current end of this stream."""
        self._check()
        if event is None:
            event = self.device.create_event(timing=timing)
        self.device.backend.event_record(event.handle, self.handle)
        return event

    def wait(self, other: Event | Stream) -> None:
        """Make later work on this stream wait for ``other`` (an event, or everything enqueued so
        far on another stream)."""
        self._check()
        if isinstance(other, Stream):
            other = other.record()
        if not isinstance(other, Event):
            raise TypeError(f"wait() takes an Event or a Stream, got {type(other).__name__}")
        self.device.backend.stream_wait_event(self.handle, other.handle)

    def host_func(self, fn: Callable[[], None], *, name: str = "") -> None:
        """Run ``fn`` on the host when the stream gets here; the stream waits until it returns.
        ``fn`` must not synchronize, allocate or launch (it would deadlock, as on the device).
        If it raises, the stream fails with that error."""
        self._check()
        if not callable(fn):
            raise TypeError(f"host_func needs a callable, got {type(fn).__name__}")
        self.device.backend.host_func(self.handle, fn, name or getattr(fn, "__name__", "host_func"))

    def sync(self, timeout: float | None = None) -> None:
        """Block until all enqueued work is done; raises (and clears) a sticky stream error."""
        self._check()
        self.device.backend.stream_sync(self.handle, _ms(timeout))

    @property
    def is_done(self) -> bool:
        """True when all enqueued work is done; raises (and clears) a sticky stream error."""
        self._check()
        return bool(self.device.backend.stream_query(self.handle))

    def take_error(self) -> Exception | None:
        """Return and clear the sticky error without waiting (``aclrtGetLastError``-style)."""
        self._check()
        return self.device.backend.stream_take_error(self.handle)

    def close(self) -> None:
        """Destroy the stream after its work drains; idempotent."""
        self._finalizer()

    def __repr__(self) -> str:
        return f"<Stream {self.name} on {self.device.name}>"
