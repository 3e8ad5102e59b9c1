"""The simulated NPU: the embedded default backend and the living definition of the contract.

See ARCHITECTURE.md 3.1 and the README table "How faithful is the simulator".  Everything a
real device checks is checked here, each rule citing its page of the public ``hicann/runtime``
docs: device addresses are opaque, bounds- and alignment-checked, and 64-byte aligned from
``mem_alloc``; memory is poisoned; streams run on their own threads, their host functions on
the device's one host-function thread (one per context, as the runtime makes it), and fail
the way ``aclrtSetStreamFailureMode`` says; events come in the
two documented kinds within the product's event limit; graph capture follows ``aclmdlRI``;
and the sanitizer (on by default) checks every access for happens-before at enqueue time.

:class:`SimBackend` is a facade.  It owns the device's state (its memory, engines, sanitizer,
faults, and the registries of its streams and events) and creates and destroys streams and
events itself; its other methods are the functions of the modules by concept, bound as they
are (no call layer on the task path): :mod:`.memory_ops` (allocations, host access, copies),
:mod:`.stream_ops` (synchronize, query, waits, records), :mod:`.kernels` (bound kernels),
:mod:`.executor` (the ``op_*`` calls), :mod:`.host_ops` (host functions), :mod:`.tasks` (how a
task is submitted, faulted and executed) and :mod:`.optional` (capture, peer access, the latch,
tracing, faults).  They, and the satellites, see the device through :mod:`.core`'s protocols;
none imports this module.
"""

from __future__ import annotations

import itertools
import os
import threading

from ...errors import ClosedResourceError, error_from_code
from ..protocol import Capabilities
from . import conditional, executor, host_ops, kernels, memory_ops, mempool, optional, stream_ops, tasks
from .callbacks import CallbackThread, refuse_in_host_function
from .capture import Captures, SimModel
from .engines import ATLAS_A2, SPECS, Cost, DeviceSpec, Engines
from .event import SimEvent
from .faults import FaultInjector
from .kernels import BoundKernel
from .memory import Access, DeviceMemory, live_bytes
from .peer import WINDOW_BYTES, PeerLinks, claim_window, release_window
from .recorder import TraceRecorder
from .sanitizer import Sanitizer
from .stream import SimStream
from .threads import LIMIT as THREAD_LIMIT

__all__ = ["DEFAULT_STREAMS", "Access", "BoundKernel", "SimBackend", "SimModel"]

#: Stream and event names are unique in the process: one sanitizer clock may hold several devices'
#: streams, and a stream may wait on another device's event.
_STREAM_NAMES = itertools.count()
_EVENT_NAMES = itertools.count()

#: Default streams a simulated device holds: it stands for a device opened as the binding opens
#: one, ``aclrtSetDevice`` (the primary context) and ``aclrtCreateContext`` (a context of its own),
#: and each context has a default stream (``Context::Setup``, ``src/runtime/core/src/context/
#: context.cc``) that counts against the product's limit (06_stream_management.md,
#: ``aclrtCreateStream``: "N = the maximum - the streams that exist, the default stream included").
DEFAULT_STREAMS = 2


def _env_flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.lower() not in ("0", "false", "no", "off")


class SimBackend:
    """One simulated device.

    Parameters
    ----------
    index:
        Device number (``sim:1`` is index 1); ``device_count()`` devices exist.
    spec:
        A :class:`DeviceSpec` or the name of one (default ``"atlas-a2"``; also ``"atlas-310p"``,
        ``"atlas-200i-a2"``, ``"sim-small"``): speeds and the product's documented limits.
    capacity:
        Device memory in bytes (default: the spec's memory).
    timing:
        Turn the timing model on: tasks hold their engine for the modelled time.
    time_scale:
        Wall seconds per modelled device second when timing is on.
    sanitizer:
        Check every access for happens-before (default from ``ACLPIPE_SANITIZER``, else **on**;
        benchmarks switch it off).
    op_execute_timeout:
        Seconds of device time a kernel may run before it fails with 507014
        (``ACL_ERROR_RT_AICORE_TIMEOUT``), as ``aclrtSetOpExecuteTimeOut`` sets it: ``None``
        keeps the product's default (1091 s on A2, 547 on inference cards), 0 is the maximum,
        other values are rounded up to the hardware's interval (the maximum / 254).  A kernel
        held by a planted hang fails after it (in wall seconds times ``time_scale``).
    op_wait_timeout:
        Seconds an event wait may block before it fails with 107020 (``ACL_ERROR_RT_TASK_TIMEOUT``),
        reported at the stream's next synchronize, as ``aclrtSetOpWaitTimeout`` sets it
        (``07_event_management.md``): ``None`` or 0 is the runtime's default, no timeout; other
        values are rounded up to whole seconds.  Waits enqueued from then on carry it (in wall
        seconds times ``time_scale``).  Refused on Atlas inference cards (207000), which have
        no such call.  Per device here; the runtime's setting is process-wide.
    max_streams:
        Streams this device lets you create (default, and at most: the spec's documented limit
        less the :data:`DEFAULT_STREAMS` default streams, which count against it).
    """

    name = "sim"

    def __init__(self, index: int = 0, *, spec: DeviceSpec | str = ATLAS_A2, capacity: int | None = None,
                 timing: bool | None = None, time_scale: float = 1.0, sanitizer: bool | None = None,
                 max_streams: int | None = None, op_execute_timeout: float | None = None,
                 op_wait_timeout: float | None = None):
        count = self.device_count()
        if not 0 <= index < count:
            raise error_from_code(107001, f"sim device {index} does not exist: there are {count} "
                                          "(set ACLPIPE_SIM_DEVICES to simulate more)")
        if isinstance(spec, str):
            if spec not in SPECS:
                raise ValueError(f"unknown device spec {spec!r}: expected one of {sorted(SPECS)}")
            spec = SPECS[spec]
        self.index = index
        self.spec = spec
        timing = _env_flag("ACLPIPE_SIM_TIMING", False) if timing is None else timing
        sanitize = _env_flag("ACLPIPE_SANITIZER", True) if sanitizer is None else sanitizer
        self.memory = DeviceMemory(capacity if capacity is not None else spec.memory_bytes, claim_window(self),
                                   WINDOW_BYTES)
        self.engines = Engines(spec, timing, time_scale)
        self.sanitizer: Sanitizer | None = Sanitizer() if sanitize else None
        self.faults = FaultInjector()
        #: Seconds of device time a kernel may run before it fails with 507014.
        self.op_execute_timeout = tasks.effective_op_timeout(spec, op_execute_timeout)
        #: Seconds an event wait may block before it fails with 107020 (0: never).
        self.op_wait_timeout = stream_ops.effective_op_wait_timeout(spec, op_wait_timeout)
        explicit = spec.max_streams - DEFAULT_STREAMS
        self.capabilities = Capabilities(
            host_callbacks=True, event_timing=True, max_streams=min(max_streams or explicit, explicit),
            device_streams=spec.max_streams, default_streams=DEFAULT_STREAMS, sanitizer=sanitize,
            fault_injection=True, timing_model=True, repeatable_executors=True, graph_capture=spec.graph_capture,
            event_errors=True, tracing=True, latch=True, max_events=spec.max_events, reusable_events=True,
            stop_on_failure=True, stream_abort=spec.stream_abort, host_thread_per_context=True,
            peer_access=True, op_execute_timeout=self.op_execute_timeout, op_wait_timeout=self.op_wait_timeout,
            sync_copies=True, stream_ordered_alloc=spec.stream_ordered_alloc,
            conditional_models=spec.conditional_models and spec.graph_capture)
        self.peers = PeerLinks(self)
        #: Once a stream is set to ACL_STOP_ON_FAILURE, every stream of the context stops on failure.
        self.stop_on_failure = False
        self.captures = Captures(self)
        self.mempools = mempool.MemPools()
        self.conditionals = conditional.Conditionals(self)
        self._streams: list[SimStream] = []
        self._model_streams: list[SimStream] = []
        self._callbacks: CallbackThread | None = None  # the context's host-function thread
        self._live_events = 0
        self._lock = threading.Lock()
        #: Cost -> (modelled seconds, cores) on this device's spec (a program binds a kernel per node
        #: and slot; the same op on the same shapes costs the same every time).
        self.kernel_timings: dict[Cost, tuple[float, int]] = {}
        #: Installed by trace_begin; stream workers record every task while it is set.
        self.recorder: TraceRecorder | None = None
        THREAD_LIMIT.acquire()  # numpy's BLAS pools: one thread while a simulated device is open
        self.closed = False

    @staticmethod
    def device_count() -> int:
        return int(os.environ.get("ACLPIPE_SIM_DEVICES", "4"))

    def describe(self) -> str:
        timing = f"timing x{self.engines.time_scale:g}" if self.engines.timing else "timing off"
        sanitize = "sanitizer on" if self.sanitizer else "sanitizer off"
        return f"simulated {self.spec.name} ({self.spec.ai_cores} AI cores, {timing}, {sanitize})"

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.faults.clear()
        for stream in self.all_streams():
            self._stop_stream(stream)
        if self._callbacks is not None:
            self._callbacks.close()
        THREAD_LIMIT.release()
        release_window(self)
        self.memory.drop_storage()  # the backend and its satellites refer to each other

    def _check_open(self) -> None:
        if self.closed:
            raise ClosedResourceError(f"sim:{self.index} is closed; open a new device")

    # -- streams: the registry ------------------------------------------------------------------
    def stream_create(self, priority: int = 0) -> SimStream:
        self._check_open()
        if not 0 <= priority <= 7:
            raise error_from_code(107000, f"stream priority must be 0..7 (aclrtCreateStreamWithConfig), "
                                          f"got {priority}")
        return self._new_stream(f"s{next(_STREAM_NAMES)}", priority, self._streams)

    def model_stream(self, name: str) -> SimStream:
        """A stream a captured model owns (captured streams consume stream resources, 15_...)."""
        return self._new_stream(name, 0, self._model_streams)

    def _new_stream(self, name: str, priority: int, into: list[SimStream]) -> SimStream:
        with self._lock:
            live = len(self._streams) + len(self._model_streams)
            if live >= self.capabilities.max_streams:
                limit = self.capabilities.max_streams
                raise error_from_code(207008, f"sim:{self.index} ({self.spec.name}) allows {limit} streams to be "
                                              f"created ({self.spec.max_streams} per device, less the "
                                              f"{DEFAULT_STREAMS} default streams of its contexts: "
                                              "06_stream_management.md, aclrtCreateStream); destroy unused "
                                              "streams or models")
            stream = SimStream(self, name, priority)
            into.append(stream)
        if self.sanitizer is not None:
            self.sanitizer.add_stream(stream.name)
        return stream

    def stream_destroy(self, stream: SimStream) -> None:
        if stream.destroyed:
            return
        if stream.capture is not None:
            stream.capture.invalidate(f"stream {stream.name} was destroyed")
        self._stop_stream(stream)

    def _stop_stream(self, stream: SimStream) -> None:
        stream.destroyed = True
        stream.stop()
        with self._lock:
            for streams in (self._streams, self._model_streams):
                if stream in streams:
                    streams.remove(stream)
        if self.sanitizer is not None and stream.completed >= stream.enqueued:
            self.sanitizer.retire(stream.name)  # joined with all its work done: the host knows it all

    def _check_stream(self, stream: SimStream) -> None:
        self._check_open()
        if not isinstance(stream, SimStream) or stream.backend is not self:
            raise error_from_code(107003, "the stream belongs to another device")
        if stream.destroyed:
            raise ClosedResourceError(f"stream {stream.name} was destroyed")

    def all_streams(self) -> list[SimStream]:
        """The streams alive on the device, captured models' own included (a copy)."""
        return list(self._streams) + list(self._model_streams)

    @property
    def live_streams(self) -> int:
        """Streams alive on the device, captured models' own included (what the limit counts)."""
        with self._lock:
            return len(self._streams) + len(self._model_streams)

    # -- events: the registry -------------------------------------------------------------------
    def event_create(self, timing: bool = False, reusable: bool = True) -> SimEvent:
        """``aclrtCreateEventExWithFlag`` (reusable) or ``aclrtCreateEventWithFlag`` (single-use).

        Both count against the product's event limit (07_event_management.md).  The docs say a
        reusable event takes its resource at its first record, where the record may block until
        one is free; the simulator counts it from creation instead, so a program that would
        exceed the limit fails when it is prepared, never blocks in the middle of a run."""
        self._check_open()
        with self._lock:
            if self._live_events >= self.spec.max_events:
                raise error_from_code(207007, f"sim:{self.index} ({self.spec.name}) supports {self.spec.max_events} "
                                              "events per device (07_event_management.md); destroy unused events")
            self._live_events += 1
            created = {stream.name: stream.executed for stream in self._streams}
        return SimEvent(f"e{next(_EVENT_NAMES)}", timing, reusable, created)

    def event_destroy(self, event: SimEvent) -> None:
        if not event.destroyed:
            event.destroyed = True
            with self._lock:
                self._live_events -= 1

    @property
    def live_events(self) -> int:
        return self._live_events

    def _check_event(self, event: SimEvent) -> None:
        if not isinstance(event, SimEvent):
            raise error_from_code(107017, f"{event!r} is not an event of this device")
        if event.destroyed:
            raise ClosedResourceError(f"event {event.name} was destroyed")

    # -- host work ------------------------------------------------------------------------------
    #: Refuse a call made from inside a host function (see :func:`.callbacks.refuse_in_host_function`).
    refuse_in_host_function = staticmethod(refuse_in_host_function)

    def host_thread(self) -> CallbackThread:
        """The device's host-function thread, started at the first host function: the runtime
        creates one callback thread per context (``ApiImpl::LaunchHostFunc``,
        ``src/runtime/api/impl/api_impl.cc``) and every stream's host functions run on it."""
        with self._lock:
            if self._callbacks is None:
                self._callbacks = CallbackThread(f"aclpipe-sim{self.index}-hostfunc")
            return self._callbacks

    @property
    def host_thread_ident(self) -> int | None:
        """The host-function thread's id, once it was started."""
        callbacks = self._callbacks
        return callbacks.ident if callbacks is not None else None

    # -- everything else: the functions of the modules by concept, bound as they are -------------
    # Memory (.memory_ops); _check_copy_rules and _live_bytes are hooks the conformance kit's
    # broken backends override, so the copies reach them through the device.
    mem_alloc = memory_ops.mem_alloc
    mem_free = memory_ops.mem_free
    mem_alloc_host = memory_ops.mem_alloc_host
    mem_free_host = memory_ops.mem_free_host
    mem_info = memory_ops.mem_info
    mem_peak = memory_ops.mem_peak
    host_access = memory_ops.host_access
    memcpy_async = memory_ops.memcpy_async
    memset_async = memory_ops.memset_async
    memcpy_sync = memory_ops.memcpy_sync
    memset_sync = memory_ops.memset_sync
    _check_copy_rules = memory_ops.check_copy_rules
    _live_bytes = staticmethod(live_bytes)

    # Streams and events (.stream_ops).
    stream_set_failure_mode = stream_ops.stream_set_failure_mode
    stream_abort = stream_ops.stream_abort
    stream_sync = stream_ops.stream_sync
    stream_query = stream_ops.stream_query
    stream_take_error = stream_ops.stream_take_error
    stream_wait_event = stream_ops.stream_wait_event
    device_sync = stream_ops.device_sync
    event_record = stream_ops.event_record
    event_reset = stream_ops.event_reset
    event_query = stream_ops.event_query
    event_sync = stream_ops.event_sync
    event_elapsed = stream_ops.event_elapsed

    # The task path (.tasks): every copy, kernel and event passes here.
    submit_task = tasks.submit_task
    submit_control = tasks.submit_control
    run_faults = tasks.run_faults
    execute = tasks.execute

    # Kernels (.kernels) and the aclnn executor's calls (.executor); _padding is a kit hook.
    launch_kernel = kernels.launch_kernel
    bind_kernel = kernels.bind_kernel
    submit_kernel = kernels.submit_kernel
    _padding = staticmethod(kernels.padding_of)
    op_prepare = executor.op_prepare
    op_set_repeatable = executor.op_set_repeatable
    op_set_tensor_address = executor.op_set_tensor_address
    op_destroy = executor.op_destroy
    op_launch = executor.op_launch

    # Host functions (.host_ops).
    host_func = host_ops.host_func
    host_func_c = host_ops.host_func_c

    # The optional sub-protocols (.optional): capture, peer access, the latch, tracing, faults.
    capture_begin = optional.capture_begin
    capture_get_info = optional.capture_get_info
    capture_end = conditional.capture_end  # a conditional task's sub-model's too
    capture_task_group_begin = optional.capture_task_group_begin
    capture_task_group_end = optional.capture_task_group_end
    capture_task_update_begin = optional.capture_task_update_begin
    capture_task_update_end = optional.capture_task_update_end
    model_execute = optional.model_execute
    model_destroy = conditional.model_destroy  # with its conditions and sub-models
    device_can_access_peer = optional.device_can_access_peer
    device_enable_peer_access = optional.device_enable_peer_access
    device_disable_peer_access = optional.device_disable_peer_access
    latch = optional.latch
    trace_begin = optional.trace_begin
    trace_end = optional.trace_end
    trace_modelled_time = optional.trace_modelled_time
    inject_fault = optional.inject_fault
    release_hangs = optional.release_hangs

    # The stream-ordered allocator (.mempool): aclrtMemPool*, Atlas A2 only.
    mem_pool_create = mempool.mem_pool_create
    mem_pool_destroy = mempool.mem_pool_destroy
    mem_pool_malloc_async = mempool.mem_pool_malloc_async
    mem_pool_free_async = mempool.mem_pool_free_async
    mem_pool_trim_to = mempool.mem_pool_trim_to
    mem_pool_get_attr = mempool.mem_pool_get_attr

    # Conditional tasks in captured models (.conditional): aclmdlRICond*, A2 and A3 only.
    cond_handle_create = conditional.cond_handle_create
    cond_handle_get_cond_ptr = conditional.cond_handle_get_cond_ptr
    add_cond_task = conditional.add_cond_task
    capture_to_model_begin = conditional.capture_to_model_begin
