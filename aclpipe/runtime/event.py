"""Events: markers recorded on a stream (``ev = stream.record()``), waited on by other streams.

Two kinds, as in the CANN docs (``hicann/runtime`` ``docs/zh/api_ref/07_event_management.md``):
reusable events (the default; ``aclrtCreateEventExWithFlag``) may be recorded again and
again, a wait using the latest record; single-use ones (``reusable=False``;
``aclrtCreateEventWithFlag``) follow record, wait, :meth:`Event.reset`.  Waiting on an event
that was never recorded is an error (the runtime's event design notes).
"""

from __future__ import annotations

import math
import weakref
from typing import TYPE_CHECKING, Any

from ..errors import ClosedResourceError, error_from_code

if TYPE_CHECKING:
    from .device import Device
    from .stream import Stream

__all__ = ["Event", "is_poll", "timeout_ms"]


def timeout_ms(timeout: float | None) -> int:
    """``timeout`` seconds as the runtime's ``*WithTimeout`` synchronize calls take it: -1 for
    none, else whole milliseconds, rounded up to at least 1.

    The runtime refuses 0 with 107000 (``ApiErrorDecorator::StreamSynchronize`` and
    ``::EventSynchronize``, ``src/runtime/api/impl/api_error.cc``), so a sub-millisecond
    timeout (the last of a shrinking remainder) waits 1 ms instead of becoming a refused 0.
    A timeout of 0 or less is a poll: callers ask with a query (:func:`is_poll`)."""
    if timeout is None:
        return -1
    return max(1, math.ceil(timeout * 1000))


def is_poll(timeout: float | None) -> bool:
    """Whether ``timeout`` asks not to wait at all (0 or less): answered by a query call."""
    return timeout is not None and timeout <= 0



def _destroy(device: Device, handle: Any) -> None:
    device._event_closed()
    device.backend.event_destroy(handle)


class Event:
    """A device event.  ``end - start`` is the elapsed device time in milliseconds
    (both must be timing events that have completed)."""

    def __init__(self, device: Device, handle: Any, timing: bool, reusable: bool = True):
        self.device = device
        self.handle = handle
        self.timing = timing
        self.reusable = reusable
        self._finalizer = weakref.finalize(self, _destroy, device, handle)

    def _check(self) -> None:
        if not self._finalizer.alive:
            raise ClosedResourceError("the event was closed")

    @property
    def is_done(self) -> bool:
        """True once the stream has passed the most recent record (or it was never recorded)."""
        self._check()
        return bool(self.device.backend.event_query(self.handle))

    def sync(self, timeout: float | None = None) -> None:
        """Block until the most recent record completes; raises the producer's error, if any.

        ``timeout`` is in seconds (None: no limit); a sync that times out raises
        :class:`~aclpipe.errors.DeviceFault` (507047).  ``timeout=0`` polls: it asks with
        ``aclrtQueryEventStatus`` and raises the same error when the record is not done yet."""
        self._check()
        backend = self.device.backend
        if is_poll(timeout):
            if not backend.event_query(self.handle):
                raise error_from_code(507047, "the event has not completed (polled with timeout=0)")
            timeout = None  # done: the sync only reports the record's error, it does not wait
        backend.event_sync(self.handle, timeout_ms(timeout))

    def reset(self, stream: Stream) -> None:
        """``aclrtResetEvent``: a single-use event back to its initial state once ``stream``
        gets here (after the waits that use it), so that it may be recorded again.  Reusable
        events refuse (they need no reset)."""
        self._check()
        stream._check()
        self.device.backend.event_reset(self.handle, stream.handle)

    def elapsed_ms(self, start: Event) -> float:
        self._check()
        start._check()
        return float(self.device.backend.event_elapsed(start.handle, self.handle))

    def __sub__(self, start: Event) -> float:
        if not isinstance(start, Event):
            return NotImplemented
        return self.elapsed_ms(start)

    def close(self) -> None:
        self._finalizer()
