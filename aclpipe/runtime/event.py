"""Events: markers recorded on a stream (``ev = stream.record()``), waited on by other streams.

Two kinds, as in the CANN docs (``hicann/runtime`` ``docs/zh/api_ref/07_event_management.md``):
reusable events (the default; ``aclrtCreateEventExWithFlag``) may be recorded again and
again, a wait using the latest record; single-use ones (``reusable=False``;
``aclrtCreateEventWithFlag``) follow record, wait, :meth:`Event.reset`.  Waiting on an event
that was never recorded is an error (the runtime's event design notes).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from ..errors import ClosedResourceError

if TYPE_CHECKING:
    from .device import Device
    from .stream import Stream

__all__ = ["Event"]


def _ms(timeout: float | None) -> int:
    return -1 if timeout is None else max(0, int(timeout * 1000))


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
        """Block until the most recent record completes; raises the producer's error, if any."""
        self._check()
        self.device.backend.event_sync(self.handle, _ms(timeout))

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
