"""The ascend backend: a real Ascend NPU through CANN's C API (ARCHITECTURE.md 3.2).

Method for method the same contract as the simulator (:mod:`aclpipe.backends.protocol`),
each primitive one CANN call or a few.  What this file adds to the C API:

- **Contexts per thread.**  CANN keeps the current context per thread, and every thread that
  calls in must set it (reference/acl_api.md section 5).  Every method first makes this
  device's context current on the calling thread unless a thread-local note says it already
  is, so event-loop threads, worker threads and garbage-collector finalizers all work.
- **Host functions.**  ``host_func_c`` uses ``aclrtLaunchHostFunc`` when the runtime exports
  it (resolved at load, optional), else ``aclrtLaunchCallback`` with ``ACL_CALLBACK_BLOCK``
  on streams subscribed to a private :class:`ReportThread`.  A device uses one mechanism for
  all its streams, so the two are never mixed on a stream.  ``ACLPIPE_ASCEND_HOST_FUNC``
  (``auto``, ``launch_host_func``, ``callback``) overrides the choice.
- **Teardown order** (section 5): streams are synchronized, unsubscribed and destroyed,
  events destroyed, memory freed, the report thread stopped, then the context destroyed,
  the device reset, and ACL finalized when this was the last open device.
- **Events still in use** when destroyed (a wait not yet passed) are destroyed later
  instead, at the next event creation or at close.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ...errors import BackendError, ClosedResourceError, error_from_code
from ...tensor import TensorDesc
from ..protocol import Capabilities, MemcpyKind
from .cdefs import (
    ACL_CALLBACK_BLOCK,
    ACL_ERROR_RT_EVENT_NOT_COMPLETE,
    ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL,
    ACL_EVENT_RECORDED_STATUS_COMPLETE,
    ACL_EVENT_SYNC,
    ACL_EVENT_TIME_LINE,
    ACL_HBM_MEM,
    ACL_MEM_MALLOC_HUGE_FIRST,
    ACL_STREAM_STATUS_COMPLETE,
    ffi,
)
from .executor import AscendExecutor, Operators
from .handles import AscendEvent, AscendStream
from .host_calls import PythonHostCall, callback_address
from .library import CannLibrary, load_library
from .reports import ReportThread

__all__ = ["AscendBackend", "HOST_FUNC_MODES"]

HOST_FUNC_MODES = ("auto", "launch_host_func", "callback")
_THREAD = threading.local()  # .token: the backend whose context is current on this thread


def _pointer(address: int) -> Any:
    return ffi.cast("void *", address)


def _address(pointer: Any) -> int:
    return int(ffi.cast("uintptr_t", pointer))


class AscendBackend:
    """One Ascend device.

    Parameters
    ----------
    index:
        Device number (``ascend:1`` is index 1).
    host_func_mode:
        ``"auto"`` (default; ``ACLPIPE_ASCEND_HOST_FUNC`` overrides it), ``"launch_host_func"``
        or ``"callback"`` (the report-thread fallback).
    max_streams:
        Streams this device may hold at once (CANN's limit is 1024 to 2048 by model).

    Raises
    ------
    LookupError
        When CANN cannot be found or loaded (the message says what to install or set).
    """

    name = "ascend"

    def __init__(self, index: int = 0, *, host_func_mode: str | None = None, max_streams: int = 1024):
        library = load_library()
        self.library = library
        self.index = index
        self.host_func_mode = self._choose_mode(library, host_func_mode)
        self.capabilities = Capabilities(
            host_callbacks=True, event_timing=True, max_streams=max_streams, sanitizer=False,
            fault_injection=False, timing_model=False, repeatable_executors=library.has_repeatable_executors)
        self.closed = True
        self._token = object()
        self._lock = threading.Lock()
        self._names = itertools.count()
        self._streams: set[AscendStream] = set()
        self._events: set[AscendEvent] = set()
        self._busy_events: list[AscendEvent] = []
        self._device_memory: dict[int, int] = {}
        self._host_memory: dict[int, int] = {}
        self._host_calls: set[PythonHostCall] = set()
        self._reports: ReportThread | None = None
        library.acquire()
        try:
            self._context = self._open_device(index)
        except BaseException:
            library.release()
            raise
        self.operators = Operators(library, self._enter)
        self.closed = False

    @staticmethod
    def _choose_mode(library: CannLibrary, requested: str | None) -> str:
        mode = requested or os.environ.get("ACLPIPE_ASCEND_HOST_FUNC") or "auto"
        if mode not in HOST_FUNC_MODES:
            raise ValueError(f"host_func_mode must be one of {HOST_FUNC_MODES}, got {mode!r}")
        if mode == "launch_host_func" and not library.has_launch_host_func:
            raise LookupError(f"{library.directory}/libascendcl.so has no aclrtLaunchHostFunc (CANN before 8.3); "
                              "use host_func_mode='callback' or 'auto'")
        if mode == "auto":
            return "launch_host_func" if library.has_launch_host_func else "callback"
        return mode

    def _open_device(self, index: int) -> Any:
        count = self._count(self.library)
        if not 0 <= index < count:
            raise error_from_code(107001, f"ascend device {index} does not exist: there are {count}")
        runtime = self.library.runtime
        self.library.check(runtime.aclrtSetDevice(index), f"aclrtSetDevice({index})")
        context = ffi.new("aclrtContext *")
        code = runtime.aclrtCreateContext(context, index)
        if code:
            error = self.library.error(code, f"aclrtCreateContext({index})")
            runtime.aclrtResetDevice(index)
            raise error
        _THREAD.token = self._token  # aclrtCreateContext made it current here
        return context[0]

    @staticmethod
    def _count(library: CannLibrary) -> int:
        count = ffi.new("uint32_t *")
        library.check(library.runtime.aclrtGetDeviceCount(count), "aclrtGetDeviceCount")
        return int(count[0])

    @staticmethod
    def device_count() -> int:
        """How many devices CANN reports (raises :class:`LookupError` when CANN is missing)."""
        library = load_library()
        library.acquire()
        try:
            return AscendBackend._count(library)
        finally:
            library.release()

    def describe(self) -> str:
        callbacks = ("aclrtLaunchHostFunc" if self.host_func_mode == "launch_host_func"
                     else "aclrtLaunchCallback + report thread")
        return f"Ascend NPU {self.index} via CANN in {self.library.directory} (host functions: {callbacks})"

    # -- threads and lifetime ---------------------------------------------------------------
    def _enter(self) -> None:
        """Make this device's context current on the calling thread (once per thread)."""
        if self.closed:
            raise ClosedResourceError(f"ascend:{self.index} is closed; open a new device")
        if getattr(_THREAD, "token", None) is not self._token:
            self.library.check(self.library.runtime.aclrtSetCurrentContext(self._context), "aclrtSetCurrentContext")
            _THREAD.token = self._token

    def close(self) -> None:
        """Tear down in the documented order; idempotent.  Raises the first failure at the end."""
        if self.closed:
            return
        self._enter()
        self.closed = True
        failures: list[BackendError] = []
        for stream in list(self._streams):
            self._attempt(failures, lambda stream=stream: self._destroy_stream(stream, report=False))
        for event in list(self._events) + self._busy_events:
            self._attempt(failures, lambda event=event: self._destroy_event_now(event))
        runtime = self.library.runtime
        for address in list(self._device_memory):
            self._attempt(failures, lambda address=address: self.library.check(
                runtime.aclrtFree(_pointer(address)), "aclrtFree"))
        for address in list(self._host_memory):
            self._attempt(failures, lambda address=address: self.library.check(
                runtime.aclrtFreeHost(_pointer(address)), "aclrtFreeHost"))
        if self._reports is not None:
            self._reports.close()
        self._attempt(failures, lambda: self.library.check(runtime.aclrtDestroyContext(self._context),
                                                          "aclrtDestroyContext"))
        self._attempt(failures, lambda: self.library.check(runtime.aclrtResetDevice(self.index),
                                                          f"aclrtResetDevice({self.index})"))
        _THREAD.token = None
        self._attempt(failures, self.library.release)
        if failures:
            raise failures[0]

    @staticmethod
    def _attempt(failures: list[BackendError], step: Callable[[], object]) -> None:
        try:
            step()
        except BackendError as error:
            failures.append(error)

    # -- memory -----------------------------------------------------------------------------
    def mem_alloc(self, nbytes: int, label: str = "") -> int:
        self._enter()
        if nbytes <= 0:
            raise error_from_code(107000, f"cannot allocate {nbytes} bytes: size must be positive")
        pointer = ffi.new("void **")
        code = self.library.runtime.aclrtMalloc(pointer, nbytes, ACL_MEM_MALLOC_HUGE_FIRST)
        if code:
            free, total = self.mem_info()
            raise self.library.error(code, f"aclrtMalloc({nbytes}) {label}".rstrip(), requested=nbytes,
                                     in_use=total - free, limit=total)
        address = _address(pointer[0])
        with self._lock:
            self._device_memory[address] = nbytes
        return address

    def mem_free(self, address: int) -> None:
        self._enter()
        with self._lock:
            if self._device_memory.pop(address, None) is None:
                raise error_from_code(207002, f"{address:#x} is not device memory allocated on ascend:{self.index}")
        self.library.check(self.library.runtime.aclrtFree(_pointer(address)), "aclrtFree")

    def mem_alloc_host(self, nbytes: int, label: str = "") -> tuple[int, np.ndarray]:
        """Pinned host memory (``aclrtMallocHost``) and a numpy uint8 view of it."""
        self._enter()
        if nbytes <= 0:
            raise error_from_code(107000, f"cannot allocate {nbytes} host bytes: size must be positive")
        pointer = ffi.new("void **")
        self.library.check(self.library.runtime.aclrtMallocHost(pointer, nbytes), f"aclrtMallocHost({nbytes})")
        address = _address(pointer[0])
        with self._lock:
            self._host_memory[address] = nbytes
        view = np.frombuffer(ffi.buffer(ffi.cast("char *", pointer[0]), nbytes), dtype=np.uint8)
        return address, view

    def mem_free_host(self, address: int) -> None:
        self._enter()
        with self._lock:
            if self._host_memory.pop(address, None) is None:
                raise error_from_code(107000, f"{address:#x} is not a pinned host buffer from alloc_host")
        self.library.check(self.library.runtime.aclrtFreeHost(_pointer(address)), "aclrtFreeHost")

    def mem_info(self) -> tuple[int, int]:
        self._enter()
        free, total = ffi.new("size_t *"), ffi.new("size_t *")
        self.library.check(self.library.runtime.aclrtGetMemInfo(ACL_HBM_MEM, free, total), "aclrtGetMemInfo")
        return int(free[0]), int(total[0])

    def host_access(self, address: int, nbytes: int, *, write: bool, what: str) -> None:
        """No sanitizer on hardware: host views of pinned memory are not checked."""

    def memcpy_async(self, dst: int, src: int, nbytes: int, kind: MemcpyKind, stream: AscendStream,
                     context: Mapping[str, Any] | None = None) -> None:
        self._check_stream(stream)
        kind = MemcpyKind(kind)
        code = self.library.runtime.aclrtMemcpyAsync(_pointer(dst), nbytes, _pointer(src), nbytes, int(kind),
                                                     stream.handle)
        self.library.check(code, f"aclrtMemcpyAsync({kind.name}, {nbytes} bytes)",
                           {"stream": stream.name, **dict(context or {})})

    def memset_async(self, address: int, value: int, nbytes: int, stream: AscendStream) -> None:
        self._check_stream(stream)
        code = self.library.runtime.aclrtMemsetAsync(_pointer(address), nbytes, value, nbytes, stream.handle)
        self.library.check(code, f"aclrtMemsetAsync({nbytes} bytes)", {"stream": stream.name})

    # -- streams ----------------------------------------------------------------------------
    def stream_create(self, priority: int = 0) -> AscendStream:
        self._enter()
        if not 0 <= priority <= 7:
            raise error_from_code(107000, f"stream priority must be 0..7 (aclrtCreateStreamWithConfig), got {priority}")
        with self._lock:
            if len(self._streams) >= self.capabilities.max_streams:
                raise error_from_code(207008, f"ascend:{self.index} allows {self.capabilities.max_streams} streams; "
                                              "destroy unused streams")
        handle = ffi.new("aclrtStream *")
        code = self.library.runtime.aclrtCreateStreamWithConfig(handle, priority, 0)
        self.library.check(code, f"aclrtCreateStreamWithConfig(priority={priority})")
        stream = AscendStream(f"s{next(self._names)}", priority, handle[0])
        if self.host_func_mode == "callback":
            try:
                self._report_thread().subscribe(stream.handle)
            except BackendError:
                self.library.runtime.aclrtDestroyStream(stream.handle)
                raise
            stream.subscribed = True
        with self._lock:
            self._streams.add(stream)
        return stream

    def _report_thread(self) -> ReportThread:
        with self._lock:
            if self._reports is None:
                self._reports = ReportThread(self.library, self._context, f"aclpipe-ascend{self.index}-reports")
            return self._reports

    def stream_destroy(self, stream: AscendStream) -> None:
        if stream.destroyed or self.closed:
            return
        self._enter()
        self._destroy_stream(stream, report=True)

    def _destroy_stream(self, stream: AscendStream, *, report: bool) -> None:
        # aclrtDestroyStream requires a synchronized stream; its callbacks must have run
        # before the report thread lets go of it.  A sticky error is the owner's business.
        runtime = self.library.runtime
        stream.destroyed = True
        with self._lock:
            self._streams.discard(stream)
        runtime.aclrtSynchronizeStream(stream.handle)
        if stream.subscribed and self._reports is not None:
            stream.subscribed = False
            self._reports.unsubscribe(stream.handle)
        self.library.check(runtime.aclrtDestroyStream(stream.handle), "aclrtDestroyStream", {"stream": stream.name})

    def _check_stream(self, stream: AscendStream) -> None:
        self._enter()
        if not isinstance(stream, AscendStream):
            raise error_from_code(107003, f"{stream!r} is not a stream of ascend:{self.index}")
        if stream.destroyed:
            raise ClosedResourceError(f"stream {stream.name} was destroyed")

    def stream_sync(self, stream: AscendStream, timeout_ms: int = -1) -> None:
        self._check_stream(stream)
        runtime = self.library.runtime
        if timeout_ms < 0:
            code = runtime.aclrtSynchronizeStream(stream.handle)
        else:
            code = runtime.aclrtSynchronizeStreamWithTimeout(stream.handle, timeout_ms)
        self.library.check(code, "aclrtSynchronizeStream", {"stream": stream.name})
        self._raise_host_error(stream)

    def stream_query(self, stream: AscendStream) -> bool:
        self._check_stream(stream)
        status = ffi.new("aclrtStreamStatus *")
        code = self.library.runtime.aclrtStreamQuery(stream.handle, status)
        self.library.check(code, "aclrtStreamQuery", {"stream": stream.name})
        self._raise_host_error(stream)
        return int(status[0]) == ACL_STREAM_STATUS_COMPLETE

    def stream_take_error(self, stream: AscendStream) -> BackendError | None:
        self._check_stream(stream)
        error = stream.host_errors.take()
        if error is not None:
            return error
        status = ffi.new("aclrtStreamStatus *")
        code = self.library.runtime.aclrtStreamQuery(stream.handle, status)
        return self.library.error(code, "aclrtStreamQuery", {"stream": stream.name}) if code else None

    @staticmethod
    def _raise_host_error(stream: AscendStream) -> None:
        error = stream.host_errors.take()
        if error is not None:
            error.context.setdefault("stream", stream.name)
            raise error

    def stream_wait_event(self, stream: AscendStream, event: AscendEvent) -> None:
        self._check_stream(stream)
        self._check_event(event)
        code = self.library.runtime.aclrtStreamWaitEvent(stream.handle, event.handle)
        self.library.check(code, "aclrtStreamWaitEvent", {"stream": stream.name, "event": event.name})

    # -- events -----------------------------------------------------------------------------
    def event_create(self, timing: bool = False) -> AscendEvent:
        self._enter()
        self._destroy_idle_events()
        flags = ACL_EVENT_SYNC | (ACL_EVENT_TIME_LINE if timing else 0)
        handle = ffi.new("aclrtEvent *")
        self.library.check(self.library.runtime.aclrtCreateEventWithFlag(handle, flags), "aclrtCreateEventWithFlag")
        event = AscendEvent(f"e{next(self._names)}", timing, handle[0])
        with self._lock:
            self._events.add(event)
        return event

    def event_destroy(self, event: AscendEvent) -> None:
        if event.destroyed or self.closed:
            return
        self._enter()
        event.destroyed = True
        with self._lock:
            self._events.discard(event)
        code = self.library.runtime.aclrtDestroyEvent(event.handle)
        if code == ACL_ERROR_RT_EVENT_NOT_COMPLETE:
            with self._lock:
                self._busy_events.append(event)  # a wait still refers to it: destroy it later
        else:
            self.library.check(code, "aclrtDestroyEvent", {"event": event.name})

    def _destroy_idle_events(self) -> None:
        with self._lock:
            busy, self._busy_events = self._busy_events, []
        for event in busy:
            if self.library.runtime.aclrtDestroyEvent(event.handle) == ACL_ERROR_RT_EVENT_NOT_COMPLETE:
                with self._lock:
                    self._busy_events.append(event)

    def _destroy_event_now(self, event: AscendEvent) -> None:
        event.destroyed = True
        self.library.check(self.library.runtime.aclrtDestroyEvent(event.handle), "aclrtDestroyEvent")

    def _check_event(self, event: AscendEvent) -> None:
        if not isinstance(event, AscendEvent):
            raise error_from_code(107017, f"{event!r} is not an event of ascend:{self.index}")
        if event.destroyed:
            raise ClosedResourceError(f"event {event.name} was destroyed")

    def event_record(self, event: AscendEvent, stream: AscendStream) -> None:
        self._check_stream(stream)
        self._check_event(event)
        code = self.library.runtime.aclrtRecordEvent(event.handle, stream.handle)
        self.library.check(code, "aclrtRecordEvent", {"stream": stream.name, "event": event.name})

    def event_query(self, event: AscendEvent) -> bool:
        self._enter()
        self._check_event(event)
        status = ffi.new("aclrtEventRecordedStatus *")
        self.library.check(self.library.runtime.aclrtQueryEventStatus(event.handle, status), "aclrtQueryEventStatus")
        return int(status[0]) == ACL_EVENT_RECORDED_STATUS_COMPLETE

    def event_sync(self, event: AscendEvent, timeout_ms: int = -1) -> None:
        self._enter()
        self._check_event(event)
        runtime = self.library.runtime
        if timeout_ms < 0:
            code = runtime.aclrtSynchronizeEvent(event.handle)
        elif self.library.has_event_sync_timeout:
            code = runtime.aclrtSynchronizeEventWithTimeout(event.handle, timeout_ms)
        else:
            code = self._poll_event(event, timeout_ms)
        self.library.check(code, "aclrtSynchronizeEvent", {"event": event.name})

    def _poll_event(self, event: AscendEvent, timeout_ms: int) -> int:
        deadline = time.monotonic() + timeout_ms / 1000
        while not self.event_query(event):
            if time.monotonic() >= deadline:
                raise error_from_code(507047, f"event {event.name} did not complete within {timeout_ms} ms")
            time.sleep(0.0005)
        return 0

    def event_elapsed(self, start: AscendEvent, end: AscendEvent) -> float:
        self._enter()
        self._check_event(start)
        self._check_event(end)
        milliseconds = ffi.new("float *")
        runtime = self.library.runtime
        code = runtime.aclrtEventElapsedTime(milliseconds, start.handle, end.handle)
        if code == ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL:
            # The contract gives end - start as a signed difference: measure the other way round.
            reverse = runtime.aclrtEventElapsedTime(milliseconds, end.handle, start.handle)
            self.library.check(reverse, "aclrtEventElapsedTime", {"start": end.name, "end": start.name})
            return -float(milliseconds[0])
        self.library.check(code, "aclrtEventElapsedTime", {"start": start.name, "end": end.name})
        return float(milliseconds[0])

    # -- host work --------------------------------------------------------------------------
    def host_func(self, stream: AscendStream, fn: Callable[[], None], name: str = "") -> None:
        """Run a Python callable when ``stream`` gets here (tests and conformance only)."""
        self._check_stream(stream)
        call = PythonHostCall(fn, name or getattr(fn, "__name__", "host_func"), stream.host_errors, self._host_calls)
        try:
            self.host_func_c(stream, callback_address(), call.address)
        except BaseException:
            self._host_calls.discard(call)
            raise

    def host_func_c(self, stream: AscendStream, fn_address: int, args_address: int) -> None:
        """Enqueue a C ``void fn(void *args)``: ``aclrtLaunchHostFunc``, or the report-thread
        fallback ``aclrtLaunchCallback(fn, args, ACL_CALLBACK_BLOCK, stream)``."""
        self._check_stream(stream)
        runtime, args = self.library.runtime, _pointer(args_address)
        if self.host_func_mode == "launch_host_func":
            code = runtime.aclrtLaunchHostFunc(stream.handle, ffi.cast("aclrtHostFunc", fn_address), args)
            what = "aclrtLaunchHostFunc"
        else:
            code = runtime.aclrtLaunchCallback(ffi.cast("aclrtCallback", fn_address), args, ACL_CALLBACK_BLOCK,
                                               stream.handle)
            what = "aclrtLaunchCallback"
        self.library.check(code, what, {"stream": stream.name})

    def device_sync(self, timeout_ms: int = -1) -> None:
        first: BackendError | None = None
        for stream in list(self._streams):
            try:
                self.stream_sync(stream, timeout_ms)
            except BackendError as error:
                first = first or error
        if first is not None:
            raise first

    # -- operators (aclnn two-phase) --------------------------------------------------------
    def op_prepare(self, op: str, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                   attrs: Mapping[str, Any]) -> AscendExecutor:
        self._enter()
        return self.operators.prepare(op, inputs, outputs, attrs)

    def op_set_repeatable(self, executor: AscendExecutor) -> None:
        self._enter()
        self.operators.set_repeatable(executor)

    def op_set_tensor_address(self, executor: AscendExecutor, index: int, *, output: bool, address: int) -> None:
        self._enter()
        self.operators.set_tensor_address(executor, index, output=output, address=address)

    def op_destroy(self, executor: AscendExecutor) -> None:
        if self.closed:
            return
        self._enter()
        self.operators.destroy(executor)

    def op_launch(self, executor: AscendExecutor, workspace: int, workspace_size: int, stream: AscendStream,
                  context: Mapping[str, Any] | None = None) -> None:
        self._check_stream(stream)
        self.operators.launch(executor, workspace, workspace_size, stream.handle,
                              {"stream": stream.name, **dict(context or {})})
