"""The events of one ascend device: the two kinds, status queries, resets, deferred destruction.

Reusable events (what the runtime and pipeline record again every run) come from
``aclrtCreateEventExWithFlag``, the only kind ``hicann/runtime`` ``07_event_management.md``
promises may be recorded again; single-use ones from ``aclrtCreateEventWithFlag``, which
follow record, wait, ``aclrtResetEvent``.  Both get ``ACL_EVENT_SYNC`` (so streams can wait
on them), plus ``ACL_EVENT_TIME_LINE`` for timing events (torch_npu creates timing events with
it).  Completion is asked with ``aclrtQueryEventStatus``, whose
``ACL_EVENT_RECORDED_STATUS_COMPLETE`` is 1, the reverse of the deprecated ``aclrtQueryEvent``
(reference/acl_api.md 1.2).  ``aclrtDestroyEvent``
requires the waits that use the event to have completed (section 5): an event dropped while
a wait still needs it is destroyed later, at the next event creation or when the device
closes.  Elapsed time is signed, as the contract says: a runtime that refuses reversed
timestamps is asked the other way round.
"""

from __future__ import annotations

import functools
import itertools
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...errors import ClosedResourceError, error_from_code
from .cdefs import (
    ACL_ERROR_RT_EVENT_NOT_COMPLETE,
    ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL,
    ACL_EVENT_RECORDED_STATUS_COMPLETE,
    ACL_EVENT_SYNC,
    ACL_EVENT_TIME_LINE,
    ffi,
)
from .streams import check_timeout

if TYPE_CHECKING:
    from .library import CannLibrary

__all__ = ["AscendEvent", "Events"]


class AscendEvent:
    """An ``aclrtEvent`` and its name (``e0``, ``e1``, ...) for error messages."""

    def __init__(self, name: str, timing: bool, handle: Any, reusable: bool = True):
        self.name = name
        self.timing = timing
        self.reusable = reusable
        self.handle = handle
        self.destroyed = False

    def __repr__(self) -> str:
        return f"<AscendEvent {self.name}{' destroyed' if self.destroyed else ''}>"


class Events:
    """Every live event of one device (the caller has made the device's context current)."""

    def __init__(self, library: CannLibrary, names: itertools.count[int]):
        self._library = library
        self._runtime = library.runtime
        self._names = names
        self._lock = threading.Lock()
        self._live: set[AscendEvent] = set()
        self._busy: list[AscendEvent] = []

    def create(self, timing: bool, reusable: bool = True) -> AscendEvent:
        self._destroy_idle()
        flags = ACL_EVENT_SYNC | (ACL_EVENT_TIME_LINE if timing else 0)
        handle = ffi.new("aclrtEvent *")
        if reusable:
            if not self._library.has_reusable_events:
                raise error_from_code(207000, f"{self._library.directory}/libascendcl.so has no "
                                              "aclrtCreateEventExWithFlag: only single-use events (reusable=False)")
            what, code = "aclrtCreateEventExWithFlag", self._runtime.aclrtCreateEventExWithFlag(handle, flags)
        else:
            what, code = "aclrtCreateEventWithFlag", self._runtime.aclrtCreateEventWithFlag(handle, flags)
        self._library.check(code, what)
        event = AscendEvent(f"e{next(self._names)}", timing, handle[0], reusable)
        with self._lock:
            self._live.add(event)
        return event

    def destroy(self, event: AscendEvent) -> None:
        if event.destroyed:
            return
        event.destroyed = True
        with self._lock:
            self._live.discard(event)
        code = self._runtime.aclrtDestroyEvent(event.handle)
        if code == ACL_ERROR_RT_EVENT_NOT_COMPLETE:
            with self._lock:
                self._busy.append(event)  # a wait still refers to it: destroy it later
        else:
            self._library.check(code, "aclrtDestroyEvent", {"event": event.name})

    def _destroy_idle(self) -> None:
        with self._lock:
            busy, self._busy = self._busy, []
        for event in busy:
            if self._runtime.aclrtDestroyEvent(event.handle) == ACL_ERROR_RT_EVENT_NOT_COMPLETE:
                with self._lock:
                    self._busy.append(event)

    def destroy_all(self, attempt: Callable[[Callable[[], object]], None]) -> None:
        """Destroy every event, busy ones included (the streams were synchronized first)."""
        with self._lock:
            events, self._live, self._busy = list(self._live) + self._busy, set(), []
        for event in events:
            event.destroyed = True
            attempt(functools.partial(self._destroy_now, event))

    def _destroy_now(self, event: AscendEvent) -> None:
        self._library.check(self._runtime.aclrtDestroyEvent(event.handle), "aclrtDestroyEvent", {"event": event.name})

    @staticmethod
    def check(event: AscendEvent) -> None:
        if not isinstance(event, AscendEvent):
            raise error_from_code(107017, f"{event!r} is not an ascend event")
        if event.destroyed:
            raise ClosedResourceError(f"event {event.name} was destroyed")

    def reset(self, event: AscendEvent, stream_handle: Any) -> None:
        """``aclrtResetEvent`` (single-use events; the runtime refuses reusable ones)."""
        self.check(event)
        if not self._library.has_event_reset:
            raise error_from_code(207000, "this CANN has no aclrtResetEvent")
        self._library.check(self._runtime.aclrtResetEvent(event.handle, stream_handle), "aclrtResetEvent",
                            {"event": event.name})

    def query(self, event: AscendEvent) -> bool:
        self.check(event)
        status = ffi.new("aclrtEventRecordedStatus *")
        self._library.check(self._runtime.aclrtQueryEventStatus(event.handle, status), "aclrtQueryEventStatus",
                            {"event": event.name})
        return int(status[0]) == ACL_EVENT_RECORDED_STATUS_COMPLETE

    def sync(self, event: AscendEvent, timeout_ms: int) -> None:
        self.check(event)
        check_timeout(timeout_ms, "aclrtSynchronizeEventWithTimeout", {"event": event.name})
        if timeout_ms < 0:
            code = self._runtime.aclrtSynchronizeEvent(event.handle)
        elif self._library.has_event_sync_timeout:
            code = self._runtime.aclrtSynchronizeEventWithTimeout(event.handle, timeout_ms)
        else:
            code = self._poll(event, timeout_ms)
        self._library.check(code, "aclrtSynchronizeEvent", {"event": event.name})

    def _poll(self, event: AscendEvent, timeout_ms: int) -> int:
        deadline = time.monotonic() + timeout_ms / 1000
        while not self.query(event):
            if time.monotonic() >= deadline:
                raise error_from_code(507047, f"event {event.name} did not complete within {timeout_ms} ms")
            time.sleep(0.0005)
        return 0

    def elapsed(self, start: AscendEvent, end: AscendEvent) -> float:
        self.check(start)
        self.check(end)
        milliseconds = ffi.new("float *")
        code = self._runtime.aclrtEventElapsedTime(milliseconds, start.handle, end.handle)
        sign = 1.0
        if code == ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL:
            sign, code = -1.0, self._runtime.aclrtEventElapsedTime(milliseconds, end.handle, start.handle)
        self._library.check(code, "aclrtEventElapsedTime", {"start": start.name, "end": end.name})
        return sign * float(milliseconds[0])
