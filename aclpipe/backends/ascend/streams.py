"""The streams of one ascend device, and how host functions reach them.

A device uses one host-callback mechanism for all its streams, so the two CANN mechanisms are
never mixed on a stream (reference/acl_api.md section 5):

- ``"launch_host_func"``: ``aclrtLaunchHostFunc(stream, fn, args)``; the runtime owns the
  thread that runs ``fn`` and holds the stream until it returns;
- ``"callback"`` (CANN without ``aclrtLaunchHostFunc``): every stream is subscribed to the
  device's :class:`ReportThread` when created and unsubscribed before it is destroyed, and
  ``fn`` goes through ``aclrtLaunchCallback(fn, args, ACL_CALLBACK_BLOCK, stream)``.

``aclrtDestroyStream`` requires a synchronized stream, so destroying synchronizes first.
Errors of Python host functions are kept per stream and raised by the next sync or query.
"""

from __future__ import annotations

import functools
import itertools
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...errors import BackendError, ClosedResourceError, error_from_code
from .cdefs import ACL_CALLBACK_BLOCK, ACL_STREAM_STATUS_COMPLETE, ffi
from .host_calls import HostErrors
from .reports import ReportThread

if TYPE_CHECKING:
    from .library import CannLibrary

__all__ = ["AscendStream", "Streams", "check_timeout"]


def check_timeout(timeout_ms: int, what: str, context: dict[str, Any] | None = None) -> None:
    """Refuse what the runtime refuses: a synchronize timeout is -1 or > 0 ms
    (``ApiErrorDecorator::StreamSynchronize`` and ``::EventSynchronize`` in
    ``src/runtime/api/impl/api_error.cc`` reject 0 with 107000).  Checked here too so that the
    query-polling fallback (a CANN without the ``*WithTimeout`` calls) behaves the same."""
    if timeout_ms == 0 or timeout_ms < -1:
        raise error_from_code(107000, f"{what}: the timeout must be -1 (no limit) or greater than 0 ms, got "
                                      f"{timeout_ms}; poll with a query instead", context)


class AscendStream:
    """An ``aclrtStream`` and its name (``s0``, ``s1``, ...) for error messages."""

    def __init__(self, name: str, priority: int, handle: Any):
        self.name = name
        self.priority = priority
        self.handle = handle
        self.destroyed = False
        self.subscribed = False  # to the device's report thread (callback mode)
        self.host_errors = HostErrors()
        # Reused by every error query (a run's result asks for one): its value is never read
        # there, so threads that share it do no harm.
        self.status = ffi.new("aclrtStreamStatus *")

    def __repr__(self) -> str:
        return f"<AscendStream {self.name}{' destroyed' if self.destroyed else ''}>"


class Streams:
    """Every live stream of one device (the caller has made the device's context current).

    Parameters
    ----------
    library:
        The loaded CANN libraries.
    context:
        The device's context, for the report thread.
    label:
        ``ascend:<index>``, for messages and the report thread's name.
    max_streams:
        How many streams may live at once.
    host_func_mode:
        ``"launch_host_func"`` or ``"callback"``.
    names:
        The device's counter for handle names.
    """

    def __init__(self, library: CannLibrary, context: Any, label: str, max_streams: int, host_func_mode: str,
                 names: itertools.count[int]):
        self._library = library
        self._runtime = library.runtime
        self._context = context
        self._label = label
        self._max_streams = max_streams
        self.host_func_mode = host_func_mode
        self._names = names
        self._lock = threading.Lock()
        self._live: set[AscendStream] = set()
        self._reports: ReportThread | None = None

    def all(self) -> list[AscendStream]:
        with self._lock:
            return list(self._live)

    # -- lifetime ---------------------------------------------------------------------------
    def create(self, priority: int) -> AscendStream:
        if not 0 <= priority <= 7:
            raise error_from_code(107000, f"stream priority must be 0..7 (aclrtCreateStreamWithConfig), got {priority}")
        with self._lock:
            if len(self._live) >= self._max_streams:
                raise error_from_code(207008, f"{self._label} allows {self._max_streams} streams; destroy unused ones")
        handle = ffi.new("aclrtStream *")
        self._library.check(self._runtime.aclrtCreateStreamWithConfig(handle, priority, 0),
                            f"aclrtCreateStreamWithConfig(priority={priority})")
        stream = AscendStream(f"s{next(self._names)}", priority, handle[0])
        if self.host_func_mode == "callback":
            try:
                self._report_thread().subscribe(stream.handle)
            except BackendError:
                self._runtime.aclrtDestroyStream(stream.handle)
                raise
            stream.subscribed = True
        with self._lock:
            self._live.add(stream)
        return stream

    def _report_thread(self) -> ReportThread:
        with self._lock:
            if self._reports is None:
                self._reports = ReportThread(self._library, self._context, f"aclpipe-{self._label}-reports")
            return self._reports

    def destroy(self, stream: AscendStream) -> None:
        """Synchronize, unsubscribe and destroy; a sticky error is left to the stream's owner."""
        if stream.destroyed:
            return
        stream.destroyed = True
        with self._lock:
            self._live.discard(stream)
        self._runtime.aclrtSynchronizeStream(stream.handle)
        if stream.subscribed and self._reports is not None:
            stream.subscribed = False
            self._reports.unsubscribe(stream.handle)
        self._library.check(self._runtime.aclrtDestroyStream(stream.handle), "aclrtDestroyStream",
                            {"stream": stream.name})

    def close(self, attempt: Callable[[Callable[[], object]], None]) -> None:
        """Destroy every stream, then stop the report thread."""
        for stream in self.all():
            attempt(functools.partial(self.destroy, stream))
        if self._reports is not None:
            self._reports.close()

    def check(self, stream: AscendStream) -> None:
        if not isinstance(stream, AscendStream):
            raise error_from_code(107003, f"{stream!r} is not a stream of {self._label}")
        if stream.destroyed:
            raise ClosedResourceError(f"stream {stream.name} was destroyed")

    # -- completion -------------------------------------------------------------------------
    def sync(self, stream: AscendStream, timeout_ms: int) -> None:
        self.check(stream)
        check_timeout(timeout_ms, "aclrtSynchronizeStreamWithTimeout", {"stream": stream.name})
        if timeout_ms < 0:
            code = self._runtime.aclrtSynchronizeStream(stream.handle)
        elif self._library.has_stream_sync_timeout:
            code = self._runtime.aclrtSynchronizeStreamWithTimeout(stream.handle, timeout_ms)
        else:
            code = self._poll(stream, timeout_ms)
        self._library.check(code, "aclrtSynchronizeStream", {"stream": stream.name})
        self._raise_host_error(stream)

    def _poll(self, stream: AscendStream, timeout_ms: int) -> int:
        deadline = time.monotonic() + timeout_ms / 1000
        status = ffi.new("aclrtStreamStatus *")
        while True:
            code = self._runtime.aclrtStreamQuery(stream.handle, status)
            if code or int(status[0]) == ACL_STREAM_STATUS_COMPLETE:
                return int(code)
            if time.monotonic() >= deadline:
                raise error_from_code(507046, f"stream {stream.name} did not finish within {timeout_ms} ms",
                                      {"stream": stream.name})
            time.sleep(0.0005)

    def query(self, stream: AscendStream) -> bool:
        self.check(stream)
        status = ffi.new("aclrtStreamStatus *")
        self._library.check(self._runtime.aclrtStreamQuery(stream.handle, status), "aclrtStreamQuery",
                            {"stream": stream.name})
        self._raise_host_error(stream)
        return int(status[0]) == ACL_STREAM_STATUS_COMPLETE

    def take_error(self, stream: AscendStream) -> BackendError | None:
        self.check(stream)
        error = stream.host_errors.take()
        if error is not None:
            return error
        code = self._runtime.aclrtStreamQuery(stream.handle, stream.status)
        return self._library.error(code, "aclrtStreamQuery", {"stream": stream.name}) if code else None

    @staticmethod
    def _raise_host_error(stream: AscendStream) -> None:
        error = stream.host_errors.take()
        if error is not None:
            error.context.setdefault("stream", stream.name)
            raise error

    def wait(self, stream: AscendStream, event_handle: Any, event_name: str) -> None:
        self.check(stream)
        self._library.check(self._runtime.aclrtStreamWaitEvent(stream.handle, event_handle),
                            "aclrtStreamWaitEvent", {"stream": stream.name, "event": event_name})

    def set_failure_mode(self, stream: AscendStream, mode: int) -> None:
        """``aclrtSetStreamFailureMode`` (once per stream; STOP holds for the whole context)."""
        self.check(stream)
        if not self._library.has_failure_mode:
            raise error_from_code(207000, "this CANN has no aclrtSetStreamFailureMode")
        self._library.check(self._runtime.aclrtSetStreamFailureMode(stream.handle, mode), "aclrtSetStreamFailureMode",
                            {"stream": stream.name})

    def abort(self, stream: AscendStream) -> None:
        """``aclrtStreamAbort``: drop the stream's submitted tasks."""
        self.check(stream)
        if not self._library.has_stream_abort:
            raise error_from_code(207000, "this CANN has no aclrtStreamAbort")
        self._library.check(self._runtime.aclrtStreamAbort(stream.handle), "aclrtStreamAbort", {"stream": stream.name})

    def launch_host_func(self, stream: AscendStream, fn_address: int, args_address: int) -> None:
        """Enqueue the C function ``void fn(void *args)`` with this device's mechanism."""
        self.check(stream)
        args = ffi.cast("void *", args_address)
        if self.host_func_mode == "launch_host_func":
            code = self._runtime.aclrtLaunchHostFunc(stream.handle, ffi.cast("aclrtHostFunc", fn_address), args)
            what = "aclrtLaunchHostFunc"
        else:
            code = self._runtime.aclrtLaunchCallback(ffi.cast("aclrtCallback", fn_address), args,
                                                     ACL_CALLBACK_BLOCK, stream.handle)
            what = "aclrtLaunchCallback"
        self._library.check(code, what, {"stream": stream.name})
