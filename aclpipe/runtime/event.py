"""Events: markers recorded on a stream (``ev = stream.record()``), waited on by other streams."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from ..errors import ClosedResourceError

if TYPE_CHECKING:
    from .device import Device

__all__ = ["Event"]


def _ms(timeout: float | None) -> int:
    return -1 if timeout is None else max(0, int(timeout * 1000))


class Event:
    """A device event.  ``end - start`` is the elapsed device time in milliseconds
    (both must be timing events that have completed)."""

    def __init__(self, device: Device, handle: Any, timing: bool):
        self.device = device
        self.handle = handle
        self.timing = timing
        self._finalizer = weakref.finalize(self, device.backend.event_destroy, handle)

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
