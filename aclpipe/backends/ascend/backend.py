"""The ascend backend: a real Ascend NPU through CANN's C API (ARCHITECTURE.md 3.2).

Method for method the same contract as the simulator (:mod:`aclpipe.backends.protocol`),
each primitive one CANN call or a few.  What this file adds to the C API:

- **Contexts per thread.**  CANN keeps the current context per thread, and every thread that
  calls in must set it (reference/acl_api.md section 5).  Every method first makes this
  device's context current on the calling thread unless a thread-local note says it already
  is, so event-loop threads, worker threads and garbage-collector finalizers all work.  The
  exception is a Python host function: allocating, freeing, synchronizing and launching from
  inside one is refused with :class:`~aclpipe.errors.HazardError` before anything is set
  (12_execution_control.md: they may deadlock the context's one callback thread).
- **Host functions.**  ``host_func_c`` uses ``aclrtLaunchHostFunc`` when the runtime exports
  it (resolved at load, optional), else ``aclrtLaunchCallback`` with ``ACL_CALLBACK_BLOCK``
  on streams subscribed to a private :class:`ReportThread`.  A device uses one mechanism for
  all its streams, so the two are never mixed on a stream.  ``ACLPIPE_ASCEND_HOST_FUNC``
  (``auto``, ``launch_host_func``, ``callback``) overrides the choice.
- **Teardown order** (section 5): streams are synchronized, unsubscribed and destroyed and
  the report thread stopped; then executors still held, events and memory are released;
  then the context is destroyed, the device reset, and ACL finalized when this was the last
  open device (and aclpipe initialized it).

Streams and their host-function mechanism live in :mod:`.streams`, events in :mod:`.events`,
aclnn executors in :mod:`.executor`.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ...errors import BackendError, ClosedResourceError, error_from_code
from ...tensor import TensorDesc
from ..protocol import (
    Capabilities,
    CaptureMode,
    CaptureStatus,
    CondTaskType,
    LaunchKind,
    LaunchRecord,
    MemcpyKind,
    MemPoolAttr,
    sync_streams,
)
from .capture import AscendModel, AscendTaskGroup, Captures
from .cdefs import (
    ACL_DDR_MEM,
    ACL_HBM_MEM,
    ACL_MEM_MALLOC_HUGE_FIRST,
    RUNTIME_OP_WAIT_TIMEOUT,
    RUNTIME_SYNC_COPIES,
    ffi,
)
from .conditional import AscendCondHandle, AscendConditionals
from .events import AscendEvent, Events
from .executor import AscendExecutor, Operators
from .host_calls import PythonHostCall, callback_address, refuse_in_host_function
from .launch_table import AscendLaunchTable
from .library import CannLibrary, load_library
from .mempool import AscendMemPools
from .product import ProductRules, product_rules
from .streams import AscendStream, Streams, check_timeout

__all__ = ["HOST_FUNC_MODES", "AscendBackend"]

HOST_FUNC_MODES = ("auto", "launch_host_func", "callback")
#: The default streams an open device holds: one of the primary context ``aclrtSetDevice`` makes,
#: one of the context this backend creates (``Context::Setup``, ``src/runtime/core/src/context/
#: context.cc``).  They count against the product's streams per device (06_stream_management.md,
#: ``aclrtCreateStream``: "N = the maximum - the streams that exist, the default stream included").
DEFAULT_STREAMS = 2
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
        Streams this device may create and hold at once (at most the product's documented limit,
        1984 on Atlas A2/A3 and 1024 on inference cards, read from ``aclrtGetSocName``, less the
        :data:`DEFAULT_STREAMS` default streams of the two contexts it holds).
    op_execute_timeout:
        Seconds a kernel may run before it fails with 507014 (``aclrtSetOpExecuteTimeOutV2``,
        else ``aclrtSetOpExecuteTimeOut``; 12_execution_control.md).  ``None`` leaves the
        runtime's setting (the product's default: 1091 s on A2/A3, 547 s on inference cards, 68 s
        on training products); 0 asks for the maximum.  The setting is **process-wide**: the
        last device opened with it decides for every device of the process.
    op_wait_timeout:
        Seconds an event wait may block before it fails with 107020 (``ACL_ERROR_RT_TASK_TIMEOUT``),
        which the stream's next synchronize reports (``aclrtSetOpWaitTimeout``,
        07_event_management.md): rounded up to whole seconds, 0 for none.  ``None`` leaves the
        runtime's setting (none unless someone in the process set one: process-wide like the
        execute timeout; ``Capabilities.op_wait_timeout`` is then 0).  Waits enqueued from then
        on carry it.  Atlas inference cards have no such call (207000).

    Raises
    ------
    LookupError
        When CANN cannot be found or loaded (the message says what to install or set).
    """

    name = "ascend"

    def __init__(self, index: int = 0, *, host_func_mode: str | None = None, max_streams: int = 1024,
                 op_execute_timeout: float | None = None, op_wait_timeout: float | None = None):
        library = load_library()
        self.library = library
        self.index = index
        self.host_func_mode = self._choose_mode(library, host_func_mode)
        self.closed = True
        self._token = object()
        self._lock = threading.Lock()
        self._device_memory: dict[int, int] = {}
        self._device_bytes = 0  # held from aclrtMalloc now
        self._device_peak = 0  # the most bytes held from aclrtMalloc at once
        self._host_memory: dict[int, int] = {}
        self._host_calls: set[PythonHostCall] = set()
        library.acquire()
        try:
            self._context = self._open_device(index)
        except BaseException:
            library.release()
            raise
        self.product = self._product(library)
        try:
            timeout = self._set_op_execute_timeout(op_execute_timeout)
            wait_timeout = self._set_op_wait_timeout(op_wait_timeout)
        except BaseException:
            self._undo_open(index)
            raise
        explicit = self.product.max_streams - DEFAULT_STREAMS
        self.capabilities = Capabilities(
            host_callbacks=True, event_timing=True, max_streams=min(max_streams, explicit),
            device_streams=self.product.max_streams, default_streams=DEFAULT_STREAMS,
            sanitizer=False, fault_injection=False, timing_model=False,
            repeatable_executors=library.has_repeatable_executors, max_events=self.product.max_events,
            reusable_events=library.has_reusable_events, stop_on_failure=library.has_failure_mode,
            stream_abort=library.has_stream_abort and self.product.stream_abort,
            graph_capture=library.has_capture and self.product.graph_capture,
            # One thread per context runs every stream's host functions: aclrtLaunchHostFunc's
            # (ApiImpl::LaunchHostFunc makes the context's callback thread) and the fallback's
            # report thread alike.
            host_thread_per_context=True, launch_tables=True,
            peer_access=library.has_peer_access, op_execute_timeout=timeout, op_wait_timeout=wait_timeout,
            sync_copies=all(hasattr(library.runtime, name) for name in RUNTIME_SYNC_COPIES),
            stream_ordered_alloc=library.has_mem_pool and self.product.stream_ordered_alloc,
            conditional_models=library.has_conditional_models and self.product.conditional_models
            and self.product.graph_capture)
        #: Advanced by every stream, event and executor destruction: launch tables made at an
        #: older epoch check their handles again before they run.
        self._epoch = 0
        names = itertools.count()
        self.streams = Streams(library, self._context, f"ascend:{index}", self.capabilities.max_streams,
                               self.host_func_mode, names)
        self.events = Events(library, names)
        self.operators = Operators(library, self._enter)
        self.captures = Captures(library, self._check_stream)
        self.mempools = AscendMemPools(library, index, self._enter, self._check_stream,
                                       self.capabilities.stream_ordered_alloc)
        self.conditionals = AscendConditionals(library, index, self._enter, self._check_stream,
                                               self.capabilities.conditional_models)
        self.closed = False

    def _undo_open(self, index: int) -> None:
        """Give back what ``_open_device`` and ``library.acquire`` took (a later step failed)."""
        self.library.runtime.aclrtDestroyContext(self._context)
        self.library.runtime.aclrtResetDevice(index)
        _THREAD.token = None
        self.library.release()

    def _set_op_execute_timeout(self, requested: float | None) -> float:
        """Set the op execute timeout when asked; the seconds in force (inf: never)."""
        if requested is None:
            return self.product.op_execute_timeout
        if requested < 0:
            raise ValueError(f"op_execute_timeout must be >= 0 seconds (0: the maximum), got {requested}")
        runtime = self.library.runtime
        if self.library.has_op_execute_timeout_v2:
            actual = ffi.new("uint64_t *")
            self.library.check(runtime.aclrtSetOpExecuteTimeOutV2(math.ceil(requested * 1e6), actual),
                               f"aclrtSetOpExecuteTimeOutV2({requested} s)")
            # UINT64_MAX: never (0 asked on a part whose interval is under 100 ms).
            return math.inf if actual[0] == 2**64 - 1 else int(actual[0]) / 1e6
        if not self.library.has_op_execute_timeout:
            raise error_from_code(207000, f"{self.library.directory}/libascendcl.so has no aclrtSetOpExecuteTimeOut: "
                                          "open the device without op_execute_timeout")
        seconds = math.ceil(requested)
        self.library.check(runtime.aclrtSetOpExecuteTimeOut(seconds), f"aclrtSetOpExecuteTimeOut({seconds} s)")
        # The seconds form does not say what it rounded to: the product's rule does
        # (interval * N, N <= 254, interval = the maximum / 254).
        maximum = self.product.op_execute_timeout_max
        interval = maximum / 254
        return maximum if seconds == 0 else min(math.ceil(seconds / interval - 1e-9) * interval, maximum)

    def _set_op_wait_timeout(self, requested: float | None) -> float:
        """Set the op wait timeout when asked (``aclrtSetOpWaitTimeout``); the seconds in force
        as far as this device knows (0: none)."""
        if requested is None:
            return 0.0
        if not 0 <= requested < 2**32:
            raise ValueError(f"op_wait_timeout must be 0 (no timeout) or a positive number of seconds below 2**32, "
                             f"got {requested}")
        runtime = self.library.runtime
        if not hasattr(runtime, RUNTIME_OP_WAIT_TIMEOUT[0]):
            raise error_from_code(207000, f"{self.library.directory}/libascendcl.so has no aclrtSetOpWaitTimeout: "
                                          "open the device without op_wait_timeout")
        seconds = math.ceil(requested)
        self.library.check(runtime.aclrtSetOpWaitTimeout(seconds), f"aclrtSetOpWaitTimeout({seconds} s)")
        return float(seconds)

    @staticmethod
    def _product(library: CannLibrary) -> ProductRules:
        if not library.has_soc_name:
            return product_rules(None)
        name = library.runtime.aclrtGetSocName()
        if name == ffi.NULL:
            return product_rules(None)
        text = ffi.string(name)
        return product_rules(text.decode(errors="replace") if isinstance(text, bytes) else str(text))

    @staticmethod
    def _choose_mode(library: CannLibrary, requested: str | None) -> str:
        mode = requested or os.environ.get("ACLPIPE_ASCEND_HOST_FUNC") or "auto"
        if mode not in HOST_FUNC_MODES:
            raise ValueError(f"host_func_mode must be one of {HOST_FUNC_MODES}, got {mode!r}")
        if mode == "launch_host_func" and not library.has_launch_host_func:
            raise LookupError(f"{library.directory}/libascendcl.so has no aclrtLaunchHostFunc (hiascend documents it "
                              "from CANN 8.3.RC1); "
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
        if not code:  # made current explicitly: the headers do not promise that creation does
            code = runtime.aclrtSetCurrentContext(context[0])
        if code:
            error = self.library.error(code, f"aclrtCreateContext({index})")
            if context[0] != ffi.NULL:
                runtime.aclrtDestroyContext(context[0])
            runtime.aclrtResetDevice(index)
            raise error
        _THREAD.token = self._token
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
        return (f"Ascend NPU {self.index} ({self.product.family}) via CANN in {self.library.directory} "
                f"(host functions: {callbacks})")

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

        def attempt(step: Callable[[], object]) -> None:
            try:
                step()
            except BackendError as error:
                failures.append(error)

        self.streams.close(attempt)
        self.captures.destroy_all(attempt)
        attempt(self.operators.destroy_all)
        self.events.destroy_all(attempt)
        runtime = self.library.runtime
        for address in list(self._device_memory):
            attempt(functools.partial(self._free, runtime.aclrtFree, "aclrtFree", address))
        for address in list(self._host_memory):
            attempt(functools.partial(self._free, runtime.aclrtFreeHost, "aclrtFreeHost", address))
        attempt(lambda: self.library.check(runtime.aclrtDestroyContext(self._context), "aclrtDestroyContext"))
        attempt(lambda: self.library.check(runtime.aclrtResetDevice(self.index), f"aclrtResetDevice({self.index})"))
        _THREAD.token = None
        attempt(self.library.release)
        if failures:
            raise failures[0]

    # -- memory -----------------------------------------------------------------------------
    def _free(self, free: Callable[[Any], int], what: str, address: int) -> None:
        self.library.check(free(_pointer(address)), what)

    def mem_alloc(self, nbytes: int, label: str = "") -> int:
        refuse_in_host_function("aclrtMalloc")
        self._enter()
        if nbytes <= 0:
            raise error_from_code(107000, f"cannot allocate {nbytes} bytes: size must be positive")
        pointer = ffi.new("void **")
        code = self.library.runtime.aclrtMalloc(pointer, nbytes, ACL_MEM_MALLOC_HUGE_FIRST)
        if code:
            detail = self.library.failure(f"aclrtMalloc({nbytes}) {label}".rstrip())  # before any other call
            free, total = self.mem_info()
            raise error_from_code(code, detail, None, requested=nbytes, in_use=total - free, limit=total)
        address = _address(pointer[0])
        with self._lock:
            self._device_memory[address] = nbytes
            self._device_bytes += nbytes
            self._device_peak = max(self._device_peak, self._device_bytes)
        return address

    def mem_free(self, address: int) -> None:
        refuse_in_host_function("aclrtFree")
        self._enter()
        with self._lock:
            nbytes = self._device_memory.pop(address, None)
            if nbytes is None:
                raise error_from_code(207002, f"{address:#x} is not device memory allocated on ascend:{self.index}")
            self._device_bytes -= nbytes
        self.library.check(self.library.runtime.aclrtFree(_pointer(address)), "aclrtFree")

    def mem_alloc_host(self, nbytes: int, label: str = "") -> tuple[int, np.ndarray]:
        """Pinned host memory (``aclrtMallocHost``) and a numpy uint8 view of it."""
        refuse_in_host_function("aclrtMallocHost")
        self._enter()
        if nbytes <= 0:
            raise error_from_code(107000, f"cannot allocate {nbytes} host bytes: size must be positive")
        pointer = ffi.new("void **")
        self.library.check(self.library.runtime.aclrtMallocHost(pointer, nbytes), f"aclrtMallocHost({nbytes})")
        address = _address(pointer[0])
        with self._lock:
            self._host_memory[address] = nbytes
        view = np.frombuffer(memoryview(ffi.buffer(ffi.cast("char *", pointer[0]), nbytes)), dtype=np.uint8)
        return address, view

    def mem_free_host(self, address: int) -> None:
        refuse_in_host_function("aclrtFreeHost")
        self._enter()
        with self._lock:
            if self._host_memory.pop(address, None) is None:
                raise error_from_code(107000, f"{address:#x} is not a pinned host buffer from alloc_host")
        self.library.check(self.library.runtime.aclrtFreeHost(_pointer(address)), "aclrtFreeHost")

    def mem_info(self) -> tuple[int, int]:
        """Free and total device memory: HBM, or DDR on parts without HBM."""
        self._enter()
        free, total = ffi.new("size_t *"), ffi.new("size_t *")
        code = self.library.runtime.aclrtGetMemInfo(ACL_HBM_MEM, free, total)
        if code or total[0] == 0:
            code = self.library.runtime.aclrtGetMemInfo(ACL_DDR_MEM, free, total)
        self.library.check(code, "aclrtGetMemInfo")
        return int(free[0]), int(total[0])

    def mem_peak(self) -> int | None:
        """The most bytes this backend held from ``aclrtMalloc`` at once."""
        with self._lock:
            return self._device_peak

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

    def memcpy_sync(self, dst: int, src: int, nbytes: int, kind: MemcpyKind) -> None:
        """``aclrtMemcpy`` (when ``capabilities.sync_copies``): copy now, ordered with no stream;
        the runtime refuses it with 107030 while a GLOBAL capture is open.  aclpipe itself never
        calls it (it copies asynchronously from pinned memory)."""
        refuse_in_host_function("aclrtMemcpy")
        self._enter()
        kind = MemcpyKind(kind)
        code = self.library.runtime.aclrtMemcpy(_pointer(dst), nbytes, _pointer(src), nbytes, int(kind))
        self.library.check(code, f"aclrtMemcpy({kind.name}, {nbytes} bytes)")

    def memset_sync(self, address: int, value: int, nbytes: int) -> None:
        """``aclrtMemset`` (when ``capabilities.sync_copies``), refused like :meth:`memcpy_sync`."""
        refuse_in_host_function("aclrtMemset")
        self._enter()
        self.library.check(self.library.runtime.aclrtMemset(_pointer(address), nbytes, value, nbytes),
                           f"aclrtMemset({nbytes} bytes)")

    # -- streams ----------------------------------------------------------------------------
    def stream_create(self, priority: int = 0) -> AscendStream:
        self._enter()
        return self.streams.create(priority)

    def stream_destroy(self, stream: AscendStream) -> None:
        if self.closed:
            return  # close() destroyed it
        self._enter()
        self._epoch += 1
        self.streams.destroy(stream)

    def _check_stream(self, stream: AscendStream) -> None:
        """Checks before a launch onto ``stream`` (every caller enqueues work on it)."""
        refuse_in_host_function(f"a launch onto stream {getattr(stream, 'name', stream)}")
        self._enter()
        self.streams.check(stream)

    def stream_sync(self, stream: AscendStream, timeout_ms: int = -1) -> None:
        refuse_in_host_function("aclrtSynchronizeStream")
        self._enter()
        self.streams.sync(stream, timeout_ms)

    def stream_query(self, stream: AscendStream) -> bool:
        self._enter()
        return self.streams.query(stream)

    def stream_set_failure_mode(self, stream: AscendStream, mode: int) -> None:
        self._enter()
        self.streams.set_failure_mode(stream, mode)

    def stream_abort(self, stream: AscendStream) -> None:
        refuse_in_host_function("aclrtStreamAbort")
        self._enter()
        if not self.capabilities.stream_abort:
            raise error_from_code(207000, f"ascend:{self.index} ({self.product.family}) has no aclrtStreamAbort "
                                          "(06_stream_management.md)")
        self.streams.abort(stream)

    def stream_take_error(self, stream: AscendStream) -> BackendError | None:
        self._enter()
        return self.streams.take_error(stream)

    def stream_wait_event(self, stream: AscendStream, event: AscendEvent) -> None:
        refuse_in_host_function("aclrtStreamWaitEvent")
        self._enter()
        self.events.check(event)
        self.streams.wait(stream, event.handle, event.name)

    # -- events -----------------------------------------------------------------------------
    def event_create(self, timing: bool = False, reusable: bool = True) -> AscendEvent:
        self._enter()
        return self.events.create(timing, reusable)

    def event_reset(self, event: AscendEvent, stream: AscendStream) -> None:
        self._check_stream(stream)
        self.events.reset(event, stream.handle)

    def event_destroy(self, event: AscendEvent) -> None:
        if self.closed:
            return  # close() destroyed it
        self._enter()
        self._epoch += 1
        self.events.destroy(event)

    def event_record(self, event: AscendEvent, stream: AscendStream) -> None:
        self._check_stream(stream)
        self.events.check(event)
        code = self.library.runtime.aclrtRecordEvent(event.handle, stream.handle)
        self.library.check(code, "aclrtRecordEvent", {"stream": stream.name, "event": event.name})

    def event_query(self, event: AscendEvent) -> bool:
        self._enter()
        return self.events.query(event)

    def event_sync(self, event: AscendEvent, timeout_ms: int = -1) -> None:
        refuse_in_host_function("aclrtSynchronizeEvent")
        self._enter()
        self.events.sync(event, timeout_ms)

    def event_elapsed(self, start: AscendEvent, end: AscendEvent) -> float:
        self._enter()
        return self.events.elapsed(start, end)

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
        refuse_in_host_function("aclrtLaunchHostFunc")
        self._enter()
        self.streams.launch_host_func(stream, fn_address, args_address)

    def device_sync(self, timeout_ms: int = -1) -> None:
        check_timeout(timeout_ms, "aclrtSynchronizeDeviceWithTimeout")
        refuse_in_host_function("aclrtSynchronizeDevice")
        sync_streams(self.stream_sync, self.streams.all(), timeout_ms)

    # -- peer access (several devices; 04_device_management.md) ---------------------------------
    def device_can_access_peer(self, peer: int) -> bool:
        """``aclrtDeviceCanAccessPeer(&can, index, peer)``."""
        self._enter()
        can = ffi.new("int32_t *")
        self.library.check(self.library.runtime.aclrtDeviceCanAccessPeer(can, self.index, peer),
                           f"aclrtDeviceCanAccessPeer({self.index}, {peer})")
        return bool(can[0])

    def device_enable_peer_access(self, peer: int, flags: int = 0) -> None:
        """``aclrtDeviceEnablePeerAccess(peer, flags)`` with this device's context current."""
        self._enter()
        self.library.check(self.library.runtime.aclrtDeviceEnablePeerAccess(peer, flags),
                           f"aclrtDeviceEnablePeerAccess({peer}) on device {self.index}")

    def device_disable_peer_access(self, peer: int) -> None:
        """``aclrtDeviceDisablePeerAccess(peer)`` with this device's context current."""
        self._enter()
        self.library.check(self.library.runtime.aclrtDeviceDisablePeerAccess(peer),
                           f"aclrtDeviceDisablePeerAccess({peer}) on device {self.index}")

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
        self._epoch += 1
        self.operators.destroy(executor)

    def op_launch(self, executor: AscendExecutor, workspace: int, workspace_size: int, stream: AscendStream,
                  context: Mapping[str, Any] | None = None) -> None:
        self._check_stream(stream)
        self.operators.launch(executor, workspace, workspace_size, stream.handle,
                              {"stream": stream.name, **dict(context or {})})

    # -- launch tables (capabilities.launch_tables): rows walked in C ------------------------
    def table_create(self, records: Sequence[LaunchRecord]) -> AscendLaunchTable:
        """A table of ``records``, every row checked now (see :mod:`.launch_table`)."""
        self._enter()
        names = [self._check_row(record) for record in records]
        table = AscendLaunchTable(self.library, records, names)
        table.epoch = self._epoch
        for executor in table.executors:
            executor.launched = True  # from now on it may be launched at any run
        return table

    def _check_row(self, record: LaunchRecord) -> tuple[str, dict[str, Any]]:
        """What the row calls and what its errors name; refuses handles a table cannot hold."""
        stream = record.stream
        self.streams.check(stream)
        context = {**record.context, "stream": stream.name}
        if record.kind in (LaunchKind.WAIT, LaunchKind.RECORD):
            self.events.check(record.event)
            context["event"] = record.event.name
            return ("aclrtStreamWaitEvent" if record.kind == LaunchKind.WAIT else "aclrtRecordEvent"), context
        if record.kind == LaunchKind.KERNEL:
            self.operators.check_table_row(record.executor, record.workspace, record.workspace_size, context)
            return record.executor.phase_two_name, context
        kind = MemcpyKind(record.copy_kind)
        return f"aclrtMemcpyAsync({kind.name}, {record.nbytes} bytes)", context

    def table_enqueue(self, table: AscendLaunchTable, run: int | None = None) -> None:
        """Walk ``table`` (in C when the helper was compiled); a refusal names its row's node."""
        refuse_in_host_function("a launch table's launches")
        self._enter()
        if table.epoch != self._epoch:  # something was destroyed since: check the handles again
            for record in table.records:
                self._check_row(record)
            table.epoch = self._epoch
        code, index = table.walk()
        if code:
            what, context = table.names[index]
            raise self.library.error(code, what, {**context, "index": index, "run": run})

    def table_destroy(self, table: AscendLaunchTable) -> None:
        """Nothing to release: the rows are Python-owned memory and hold no CANN resources."""

    # -- graph capture (aclmdlRI), present when capabilities.graph_capture --------------------
    def capture_begin(self, stream: AscendStream | None, mode: int = CaptureMode.GLOBAL) -> None:
        """``aclmdlRICaptureBegin``; ``None`` passes the default stream (NULL), which the runtime
        refuses with 100000 (``aclmdlRICaptureBeginImpl``)."""
        if stream is None:
            self._enter()
        self.captures.begin(stream, mode)

    def capture_get_info(self, stream: AscendStream) -> tuple[CaptureStatus, AscendModel | None]:
        return self.captures.get_info(stream)

    def capture_end(self, stream: AscendStream) -> AscendModel:
        model = self.captures.end(stream)
        if model.handle in self.conditionals.sub_models:
            self.captures.forget(model)  # freed with its parent, never on its own
        return model

    def capture_task_group_begin(self, stream: AscendStream) -> None:
        self.captures.task_group_begin(stream)

    def capture_task_group_end(self, stream: AscendStream) -> AscendTaskGroup:
        return self.captures.task_group_end(stream)

    def capture_task_update_begin(self, stream: AscendStream, group: AscendTaskGroup) -> None:
        self.captures.task_update_begin(stream, group)

    def capture_task_update_end(self, stream: AscendStream) -> None:
        self.captures.task_update_end(stream)

    def model_execute(self, model: AscendModel, stream: AscendStream, context: Mapping[str, Any] | None = None) -> None:
        refuse_in_host_function("aclmdlRIExecuteAsync")
        self.captures.execute(model, stream)

    def model_destroy(self, model: AscendModel) -> None:
        if self.closed:
            return  # close() destroyed it
        if isinstance(model, AscendModel) and model.handle in self.conditionals.sub_models:
            raise error_from_code(107000, "a conditional task's sub-model is freed with its parent model; destroy "
                                          "that one (aclmdlRICaptureToModelRIBegin)")
        self._enter()
        self.captures.destroy(model)
        self.conditionals.destroyed(model)

    # -- conditional tasks in captured models (aclmdlRICond*), present when capabilities.conditional_models --
    def cond_handle_create(self, model: AscendModel, default: int = 0,
                           assign_default: bool = False) -> AscendCondHandle:
        return self.conditionals.create(model, default, assign_default)

    def cond_handle_get_cond_ptr(self, handle: AscendCondHandle) -> int:
        return self.conditionals.cond_ptr(handle)

    def add_cond_task(self, handle: AscendCondHandle, kind: CondTaskType, size: int,
                      stream: AscendStream) -> list[AscendModel]:
        return self.conditionals.add_task(handle, kind, size, stream)

    def capture_to_model_begin(self, stream: AscendStream, model: AscendModel,
                               mode: int = CaptureMode.GLOBAL) -> None:
        self.conditionals.capture_begin(stream, model, mode)

    # -- the stream-ordered allocator (aclrtMemPool*), present when capabilities.stream_ordered_alloc --
    def mem_pool_create(self, max_size: int = 0) -> Any:
        return self.mempools.create(max_size)

    def mem_pool_destroy(self, pool: Any) -> None:
        self.mempools.destroy(pool)

    def mem_pool_malloc_async(self, pool: Any, nbytes: int, stream: AscendStream) -> int:
        return self.mempools.malloc_async(pool, nbytes, stream)

    def mem_pool_free_async(self, address: int, stream: AscendStream) -> None:
        self.mempools.free_async(address, stream)

    def mem_pool_trim_to(self, pool: Any, keep: int) -> None:
        self.mempools.trim_to(pool, keep)

    def mem_pool_get_attr(self, pool: Any, attr: MemPoolAttr) -> int:
        return self.mempools.get_attr(pool, attr)
