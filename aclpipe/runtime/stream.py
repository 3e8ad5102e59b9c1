"""Streams: in-order device queues.  Streams are always explicit; there is no current stream.

What a stream does after a failed task is its failure mode (``hicann/runtime``
``docs/zh/api_ref/06_stream_management.md``, ``aclrtSetStreamFailureMode``): ``"continue"``
(the default) runs the later tasks on whatever the failed one left behind; ``"stop"`` stops
the stream, which then refuses new work, and applies to every stream of the device.  A stream
can be :meth:`renewed <Stream.renew>`: later work goes to a fresh device stream that starts
after the old one, so nothing enqueued from then on runs behind a failed task.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..backends.protocol import FailureMode, MemcpyKind
from ..errors import BackendError, ClosedResourceError, error_from_code
from .buffer import DeviceBuffer, HostBuffer
from .event import Event, is_poll, timeout_ms

if TYPE_CHECKING:
    from .device import Device

__all__ = ["Stream"]

_Buffer = DeviceBuffer | HostBuffer


def _destroy(backend: Any, handles: list[Any]) -> None:
    if not backend.closed:
        for handle in handles:
            backend.stream_destroy(handle)
        handles.clear()


class Stream:
    """A device stream.  Work runs in the order it is enqueued; other streams run concurrently.

    Create it with :meth:`Device.create_stream`."""

    def __init__(self, device: Device, handle: Any, priority: int, failure_mode: FailureMode = FailureMode.CONTINUE):
        self.device = device
        self.handle = handle
        self.priority = priority
        self._mode = failure_mode
        self._handles = [handle]  # every backend stream this object owns: the current one last
        self._retired: list[tuple[Any, Any]] = []  # (old handle, event at its end) after renew()
        self._errors: list[BackendError] = []  # taken from the device, not yet from take_error (renew, has_error)
        self.renewals = 0
        self._finalizer = weakref.finalize(self, _destroy, device.backend, self._handles)

    @property
    def failure_mode(self) -> str:
        """``"stop"`` or ``"continue"``: the mode in force (``"stop"`` once any stream of the
        device asked for it, as CANN applies it to the whole context)."""
        stop = self._mode == FailureMode.STOP or self.device.failure_mode == "stop"
        return "stop" if stop else "continue"

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
        pinned (:meth:`Device.alloc_host`) and stay untouched until the copy completes.  Without
        ``nbytes`` the two buffers (from their offsets) must be the same size: all of it is copied."""
        self._check()
        for role, buffer in (("dst", dst), ("src", src)):
            if not isinstance(buffer, (DeviceBuffer, HostBuffer)):
                raise TypeError(f"memcpy {role} must be a DeviceBuffer or HostBuffer, got {type(buffer).__name__}; "
                                "copy numpy arrays through a pinned HostBuffer or use Device.upload()")
            buffer.check_open()
        if nbytes is None:  # the whole of both: a size mismatch is refused, never cut short silently
            nbytes = src.nbytes - src_offset
            if dst.nbytes - dst_offset != nbytes:
                raise ValueError(f"memcpy without nbytes copies whole buffers, but dst has {dst.nbytes - dst_offset} "
                                 f"bytes from offset {dst_offset} and src {nbytes} from offset {src_offset}; "
                                 "pass nbytes= to copy part of one")
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

        ``fn`` runs on the device's one host-function thread (the runtime makes one per context),
        so host functions of different streams run one at a time, never together: one that
        blocks holds back the others.  It must not allocate, free, synchronize or launch
        (12_execution_control.md: it may deadlock the device): the backends refuse such calls
        with :class:`~aclpipe.errors.HazardError`.  If it raises, the stream fails with that error."""
        self._check()
        if not callable(fn):
            raise TypeError(f"host_func needs a callable, got {type(fn).__name__}")
        self.device.backend.host_func(self.handle, fn, name or getattr(fn, "__name__", "host_func"))

    def sync(self, timeout: float | None = None) -> None:
        """Block until all enqueued work is done; raises (and clears) a sticky stream error.

        ``timeout`` is in seconds (None: no limit), rounded up to whole milliseconds; a sync
        that times out raises :class:`~aclpipe.errors.DeviceFault` (507046).  ``timeout=0``
        polls with ``aclrtStreamQuery`` (the runtime refuses a 0 ms synchronize) and raises
        the same error when work is still queued."""
        self._check()
        backend = self.device.backend
        if is_poll(timeout):
            if not backend.stream_query(self.handle):
                raise error_from_code(507046, f"stream {self.name} still has work queued (polled with timeout=0)")
        else:
            backend.stream_sync(self.handle, timeout_ms(timeout))
        self._raise_retired()

    @property
    def is_done(self) -> bool:
        """True when all enqueued work is done; raises (and clears) a sticky stream error."""
        self._check()
        done = bool(self.device.backend.stream_query(self.handle))
        self._raise_retired()
        return done

    def take_error(self) -> Exception | None:
        """Return and clear the sticky error without waiting (``aclrtGetLastError``-style)."""
        self._check()
        if self._retired or self._errors:  # only after renew() or has_error(): the usual case skips this
            self._collect_retired()
            if self._errors:
                return self._errors.pop(0)
        return self.device.backend.stream_take_error(self.handle)

    def has_error(self) -> bool:
        """Whether :meth:`take_error` has an error to return.  The device's sticky error, if
        any, is consumed now and kept here for :meth:`take_error`, in order.

        It is what a pipeline asks of every stream after every run, and the answer is almost
        always no: that answer costs one backend call and builds nothing."""
        if not self._finalizer.alive:  # self._check(), inline: one frame fewer on the result path
            self._check()
        if self._errors:
            return True
        if self._retired:  # only after renew()
            self._collect_retired()
            if self._errors:
                return True
        error = self.device.backend.stream_take_error(self.handle)
        if error is None:
            return False
        self._errors.append(error)
        return True

    def abort(self) -> None:
        """``aclrtStreamAbort``: discard every task enqueued so far and stop the one running
        (A2/A3 only: ``capabilities.stream_abort``).  Streams waiting on this one's events may
        then wait for ever: abort them too (06_stream_management.md)."""
        self._check()
        if not self.device.capabilities.stream_abort:
            raise error_from_code(207000, f"{self.device.name} cannot abort streams (aclrtStreamAbort is "
                                          "documented for Atlas A2/A3 only); synchronize instead")
        self.device.backend.stream_abort(self.handle)

    def renew(self) -> None:
        """Send later work to a fresh device stream that starts once the old one has passed
        everything enqueued on it (so completion order is kept); the old one is destroyed when
        it has drained, and its errors are still reported here.

        Use it after a failure: in ``"continue"`` mode nothing enqueued from now on runs behind
        the failed task on the same device stream; in ``"stop"`` mode the old stream refuses
        new work anyway, and nothing waits for it."""
        self._check()
        backend = self.device.backend
        fresh = backend.stream_create(self.priority)
        self._handles.append(fresh)
        if self._mode == FailureMode.STOP:
            backend.stream_set_failure_mode(fresh, int(FailureMode.STOP))
        join: Any = None
        try:
            join = backend.event_create(False)
            backend.event_record(join, self.handle)
            backend.stream_wait_event(fresh, join)
        except BackendError:
            # A stopped stream takes no record: nothing more will run on it, so nothing to wait for.
            if join is not None:
                backend.event_destroy(join)
            join = None
        self._retired.append((self.handle, join))
        self.handle = fresh
        self.renewals += 1
        self._collect_retired()

    def _collect_retired(self) -> None:
        """Take the errors of retired streams, and destroy those that have drained."""
        backend = self.device.backend
        for entry in list(self._retired):
            old, join = entry
            error = backend.stream_take_error(old)
            if error is not None:
                self._errors.append(error)
            if join is None or backend.event_query(join):
                self._retired.remove(entry)
                if join is not None:
                    backend.event_destroy(join)
                if old in self._handles:
                    self._handles.remove(old)
                backend.stream_destroy(old)

    def _raise_retired(self) -> None:
        self._collect_retired()
        if self._errors:
            raise self._errors.pop(0)

    def close(self) -> None:
        """Destroy the stream after its work drains; idempotent."""
        if self._finalizer.alive and not self.device.backend.closed:
            for _, join in self._retired:
                if join is not None:
                    self.device.backend.event_destroy(join)
            self._retired.clear()
        self._finalizer()

    def __repr__(self) -> str:
        return f"<Stream {self.name} on {self.device.name}>"
