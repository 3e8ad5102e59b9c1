"""The simulated NPU: the embedded default backend and the living definition of the contract.

See ARCHITECTURE.md 3.1 and the README table "How faithful is the simulator".  Everything a
real device checks is checked here, each rule citing its page of the public ``hicann/runtime``
docs: device addresses are opaque, bounds- and alignment-checked, and 64-byte aligned from
``mem_alloc``; memory is poisoned; streams run on their own threads, their host functions on
the device's one host-function thread (one per context, as the runtime makes it), and fail
the way ``aclrtSetStreamFailureMode`` says; events come in the
two documented kinds within the product's event limit; graph capture follows ``aclmdlRI``;
and the sanitizer (on by default) checks every access for happens-before at enqueue time.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import cffi

from ...errors import BackendError, ClosedResourceError, DeviceOutOfMemory, HazardError, error_from_code
from ...tensor import TensorDesc
from ..protocol import Capabilities, MemcpyKind, TraceRecord, sync_streams
from .callbacks import CallbackThread, in_host_function
from .capture import CaptureMode, Captures, CaptureStatus, SimModel, TaskGroup
from .engines import ATLAS_A2, SPECS, Cost, DeviceSpec, Engines
from .event import SimEvent
from .executor import SimExecutor, prepare_executor
from .faults import FaultInjector, FaultRule
from .memory import POISON_BYTE, Allocation, DeviceMemory
from .peer import WINDOW_BYTES, PeerLinks, claim_window, release_window
from .recorder import TraceRecorder
from .sanitizer import Sanitizer
from .stream import (
    CONTROL,
    COPY,
    HOST_FUNC,
    KERNEL,
    LATCH,
    MEMSET,
    RECORD,
    WAIT,
    FailureMode,
    SimStream,
    Task,
    describe_task,
    kernel_task,
)
from .threads import LIMIT as THREAD_LIMIT

__all__ = ["Access", "BoundKernel", "SimBackend", "SimModel"]

_NO_COST = Cost()

#: Casts a C function address to something callable (ABI mode: nothing is compiled).
_FFI = cffi.FFI()

#: Stream and event names are unique in the process: one sanitizer clock may hold several devices'
#: streams, and a stream may wait on another device's event.
_STREAM_NAMES = itertools.count()
_EVENT_NAMES = itertools.count()

#: ``(address, nbytes)`` of one region a kernel reads or writes.
Access = tuple[int, int]
#: ``(allocation, address, nbytes)``.
Region = tuple[Allocation, int, int]


@dataclass(eq=False, slots=True)
class BoundKernel:
    """A kernel whose regions were checked once (:meth:`SimBackend.bind_kernel`): its guarded
    body, the regions the sanitizer and failures need, and its modelled time."""

    run: Callable[[], None]
    reads: tuple[Region, ...]
    writes: tuple[Region, ...]
    padding: tuple[Region, ...]
    seconds: float
    cores: int
    allocations: tuple[Allocation, ...]

    def alive(self) -> bool:
        """Whether every region still lies in a live allocation (addresses are never reused,
        so a live allocation still holds what was checked)."""
        return all(allocation.alive for allocation in self.allocations)

#: Default streams a simulated device holds: it stands for a device opened as the binding opens
#: one, ``aclrtSetDevice`` (the primary context) and ``aclrtCreateContext`` (a context of its own),
#: and each context has a default stream (``Context::Setup``, ``src/runtime/core/src/context/
#: context.cc``) that counts against the product's limit (06_stream_management.md,
#: ``aclrtCreateStream``: "N = the maximum - the streams that exist, the default stream included").
DEFAULT_STREAMS = 2


#: The longest op timeout is ``interval * 254`` (12_execution_control.md, aclrtGetOpTimeOutInterval).
OP_TIMEOUT_STEPS = 254


def effective_op_timeout(spec: DeviceSpec, requested: float | None) -> float:
    """The op execute timeout in force, in seconds, as ``aclrtSetOpExecuteTimeOut`` sets it
    (12_execution_control.md): ``None`` keeps the product's default, 0 asks for the maximum,
    anything else is rounded up to a multiple of the hardware's interval (the maximum / 254),
    at most the maximum."""
    if requested is None:
        return spec.op_execute_timeout
    if requested < 0:
        raise ValueError(f"op_execute_timeout must be >= 0 seconds (0: the maximum), got {requested}")
    maximum = spec.op_execute_timeout_max
    if requested == 0:
        return maximum
    interval = maximum / OP_TIMEOUT_STEPS
    return min(math.ceil(requested / interval - 1e-9) * interval, maximum)


def refuse_in_host_function(what: str) -> None:
    """12_execution_control.md (``aclrtLaunchHostFunc`` and ``aclrtLaunchCallback``): a callback
    "should not call resource allocation, resource release, stream synchronize, device
    synchronize, task launch or task abort interfaces, or errors or deadlocks may follow" (it
    runs on the context's one callback thread, which those calls may need).  The runtime has no
    code of its own for it, so the simulator refuses every such call made from inside a host
    function with :class:`~aclpipe.errors.HazardError` naming the call."""
    if in_host_function():
        raise HazardError(f"{what} called from inside a host function: 12_execution_control.md forbids "
                          "allocating, freeing, synchronizing and launching there (it may deadlock or fail on the "
                          "device); do it on the host after the stream passed the host function",
                          first="a host function on the device's callback thread", second=what)


def check_timeout(timeout_ms: int, what: str) -> None:
    """The runtime's parameter check of every ``*WithTimeout`` synchronize: -1 (no limit) or
    > 0 ms.  The docs (06_stream_management.md, 07_event_management.md) list only those two;
    ``ApiErrorDecorator::StreamSynchronize``, ``::EventSynchronize`` and ``::DeviceSynchronize``
    in ``src/runtime/api/impl/api_error.cc`` refuse 0 (and anything below -1) with
    ``RT_ERROR_INVALID_VALUE``, which ACL reports as 107000.  A poll is a query, not a 0 ms sync."""
    if timeout_ms == 0 or timeout_ms < -1:
        raise error_from_code(107000, f"{what}: the timeout must be -1 (no limit) or greater than 0 ms, got "
                                      f"{timeout_ms} (api_error.cc refuses 0); poll with a query instead")


#: ``aclrtMemcpyAsync`` restriction in ``include/external/acl/acl_rt.h``: "for on-chip
#: device-to-device memory copy, both the source and destination addresses must be 64-byte aligned".
D2D_ALIGNMENT = 64


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
    max_streams:
        Streams this device lets you create (default, and at most: the spec's documented limit
        less the :data:`DEFAULT_STREAMS` default streams, which count against it).
    """

    name = "sim"

    def __init__(self, index: int = 0, *, spec: DeviceSpec | str = ATLAS_A2, capacity: int | None = None,
                 timing: bool | None = None, time_scale: float = 1.0, sanitizer: bool | None = None,
                 max_streams: int | None = None, op_execute_timeout: float | None = None):
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
        self.op_execute_timeout = effective_op_timeout(spec, op_execute_timeout)
        explicit = spec.max_streams - DEFAULT_STREAMS
        self.capabilities = Capabilities(
            host_callbacks=True, event_timing=True, max_streams=min(max_streams or explicit, explicit),
            device_streams=spec.max_streams, default_streams=DEFAULT_STREAMS, sanitizer=sanitize,
            fault_injection=True, timing_model=True, repeatable_executors=True, graph_capture=spec.graph_capture,
            event_errors=True, tracing=True, latch=True, max_events=spec.max_events, reusable_events=True,
            stop_on_failure=True, stream_abort=spec.stream_abort, host_thread_per_context=True,
            peer_access=True, op_execute_timeout=self.op_execute_timeout)
        self.peers = PeerLinks(self)
        #: Once a stream is set to ACL_STOP_ON_FAILURE, every stream of the context stops on failure.
        self.stop_on_failure = False
        self.captures = Captures(self)
        self._streams: list[SimStream] = []
        self._model_streams: list[SimStream] = []
        self._callbacks: CallbackThread | None = None  # the context's host-function thread
        self._live_events = 0
        self._names = itertools.count()
        self._lock = threading.Lock()
        #: Cost -> (modelled seconds, cores) on this device's spec (a program binds a kernel per node
        #: and slot; the same op on the same shapes costs the same every time).
        self._timings: dict[Cost, tuple[float, int]] = {}
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
        for stream in list(self._streams) + list(self._model_streams):
            self._stop_stream(stream)
        if self._callbacks is not None:
            self._callbacks.close()
        THREAD_LIMIT.release()
        release_window(self)
        self.memory.drop_storage()  # the backend and its satellites refer to each other

    def _check_open(self) -> None:
        if self.closed:
            raise ClosedResourceError(f"sim:{self.index} is closed; open a new device")

    # -- memory -----------------------------------------------------------------------------
    def mem_alloc(self, nbytes: int, label: str = "") -> int:
        self._check_open()
        self.refuse_in_host_function("aclrtMalloc")
        rule = self.faults.check("alloc", label, None)
        if rule is not None:
            raise DeviceOutOfMemory(rule.code or 207001, requested=nbytes, in_use=self.memory.in_use,
                                    limit=self.memory.capacity)
        return self.memory.alloc(nbytes, label).start

    def mem_free(self, address: int) -> None:
        self._check_open()
        self.refuse_in_host_function("aclrtFree")
        # Only a live allocation's start is checked: anything else (a double free, an interior
        # address) must fail in memory.free with ACL's free error, sanitizer on or off.
        allocation = self.memory.starting_at(address)
        if self.sanitizer is not None and allocation is not None:
            self.sanitizer.host_access(allocation, allocation.start, allocation.size, write=True,
                                       what=f"free of {allocation.describe()}")
        self.memory.free(address)

    def mem_alloc_host(self, nbytes: int, label: str = "") -> tuple[int, Any]:
        self._check_open()
        self.refuse_in_host_function("aclrtMallocHost")
        allocation = self.memory.alloc_host(nbytes, label)
        return allocation.start, allocation.data

    def mem_free_host(self, address: int) -> None:
        self.refuse_in_host_function("aclrtFreeHost")
        allocation = self.memory.starting_at(address, host=True)
        if self.sanitizer is not None and allocation is not None:
            self.sanitizer.host_access(allocation, allocation.start, allocation.size, write=True,
                                       what=f"free of {allocation.describe()}")
        self.memory.free_host(address)

    def mem_info(self) -> tuple[int, int]:
        return self.memory.capacity - self.memory.in_use, self.memory.capacity

    def mem_peak(self) -> int | None:
        return self.memory.peak

    def host_access(self, address: int, nbytes: int, *, write: bool, what: str) -> None:
        if self.sanitizer is None:
            return
        allocation, _ = self.memory.find(address, nbytes, what=what)
        self.sanitizer.host_access(allocation, address, nbytes, write=write, what=what)

    def memcpy_async(self, dst: int, src: int, nbytes: int, kind: MemcpyKind, stream: SimStream,
                     context: Mapping[str, Any] | None = None) -> None:
        self._check_stream(stream)
        kind = MemcpyKind(kind)
        if kind == MemcpyKind.DEVICE_TO_DEVICE and self.peers.crosses(dst, src):
            self.peers.copy(dst, src, nbytes, stream, context)
            return
        what = f"memcpy {kind.name}"
        self._check_copy_rules(dst, src, kind, what)
        src_device, dst_device = kind in (MemcpyKind.DEVICE_TO_HOST, MemcpyKind.DEVICE_TO_DEVICE), kind in (
            MemcpyKind.HOST_TO_DEVICE, MemcpyKind.DEVICE_TO_DEVICE)
        for address, on_device, role in ((src, src_device, "source"), (dst, dst_device, "destination")):
            if self.memory.is_device(address) != on_device:
                expected = "device memory" if on_device else "a pinned host buffer"
                raise error_from_code(107000, f"{what}: the {role} {address:#x} is not {expected}; "
                                              "the kind must match the buffers")
        src_alloc, src_off = self.memory.find(src, nbytes, what=f"{what} source")
        dst_alloc, dst_off = self.memory.find(dst, nbytes, what=f"{what} destination")
        engine = {MemcpyKind.HOST_TO_DEVICE: "h2d", MemcpyKind.DEVICE_TO_HOST: "d2h"}.get(kind, "compute")
        name = f"{engine} copy of {nbytes} bytes"

        def run() -> None:
            source = self._live_bytes(src_alloc, src_off, nbytes, f"{what} source")
            target = self._live_bytes(dst_alloc, dst_off, nbytes, f"{what} destination")
            target[...] = source

        task = Task(COPY, name, run, engine=engine, seconds=self.engines.copy_seconds(nbytes, engine),
                    context=dict(context or {}))
        self._submit(stream, task, reads=[(src_alloc, src, nbytes)], writes=[(dst_alloc, dst, nbytes)])

    def _check_copy_rules(self, dst: int, src: int, kind: MemcpyKind, what: str) -> None:
        if kind == MemcpyKind.HOST_TO_HOST and not self.spec.async_host_copies:
            # 11-03_memory_copy_and_set.md, aclrtMemcpyAsync constraints: in the EP form an async
            # host-to-host copy returns ACL_ERROR_RT_FEATURE_NOT_SUPPORT.
            raise error_from_code(207000, f"{what}: {self.spec.name} (EP form) has no asynchronous host-to-host "
                                          "copy (11-03_memory_copy_and_set.md); copy on the host with numpy")
        if kind == MemcpyKind.DEVICE_TO_DEVICE and (dst % D2D_ALIGNMENT or src % D2D_ALIGNMENT):
            raise error_from_code(107008, f"{what}: on-chip device-to-device copies need 64-byte aligned source and "
                                          f"destination (acl_rt.h, aclrtMemcpyAsync), got src {src:#x}, dst {dst:#x}")

    @staticmethod
    def _live_bytes(allocation: Allocation, offset: int, nbytes: int, what: str) -> Any:
        """The bytes a copy or memset touches; a freed allocation is the DMA engine's fault."""
        if not allocation.alive:
            # 25-01_aclError.md: ACL_ERROR_RT_SYS_DMA; 507053 is an uncorrectable memory error (UCE).
            raise error_from_code(507013, f"{what}: {allocation.describe()} was freed while the device still used "
                                          "it (use after free)")
        return allocation.data[offset:offset + nbytes]

    def memset_async(self, address: int, value: int, nbytes: int, stream: SimStream) -> None:
        self._check_stream(stream)
        allocation = self.memory.find_device(address, nbytes, what="memset")
        offset = address - allocation.start

        def run() -> None:
            self._live_bytes(allocation, offset, nbytes, "memset")[...] = value & 0xFF

        task = Task(MEMSET, f"memset of {nbytes} bytes", run,
                    seconds=Cost(bytes=nbytes).seconds(self.spec, self.spec.ai_cores))
        self._submit(stream, task, reads=[], writes=[(allocation, address, nbytes)])

    # -- kernels ----------------------------------------------------------------------------
    def launch_kernel(self, stream: SimStream, name: str, run: Callable[[], None], *,
                      reads: Sequence[Access] = (), writes: Sequence[Access] = (),
                      cost: Cost = _NO_COST, context: Mapping[str, Any] | None = None,
                      executor: Allocation | None = None) -> None:
        """Enqueue a kernel: ``run`` executes on the stream's worker after the declared regions
        are checked (live, in bounds, 32-byte aligned) and, with the sanitizer on, ordered.

        As on the device, the kernel may touch the bytes after each region it writes, up to
        ``ALIGN_UP(len, 32) + 32`` (11-01, ``aclrtMalloc``): they are overwritten with poison
        after it ran, so a neighbour placed without that padding is clobbered (and the
        sanitizer reports the read that would see it)."""
        self._check_stream(stream)
        label = (context or {}).get("node") or name
        bound = self.bind_kernel(run, reads=reads, writes=writes, cost=cost, label=label, executor=executor)
        self.submit_kernel(stream, name, bound, dict(context) if context else {})

    def bind_kernel(self, run: Callable[[], None], *, reads: Sequence[Access] = (), writes: Sequence[Access] = (),
                    cost: Cost = _NO_COST, label: str = "kernel", executor: Allocation | None = None) -> BoundKernel:
        """Check a kernel's regions (live, in bounds, 32-byte aligned) once; the result may be
        submitted again and again while :meth:`BoundKernel.alive` (a repeatable executor's
        launches), which checks each region in constant time."""
        # Tuples, not lists: a program keeps one bound kernel per node and slot, and a capture
        # stores these as they are (``tuple()`` of a tuple makes no copy).
        resolved_writes = self.memory.kernel_regions(writes, label, "write")
        resolved_reads = self.memory.kernel_regions(reads, label, "read")
        if executor is not None:
            resolved_reads += ((executor, executor.start, 1),)
        padding = self._padding(resolved_writes)
        timing = self._timings.get(cost)
        if timing is None:  # per cost: the same op and shapes cost the same on every launch
            cores = cost.tiling(self.spec)
            timing = self._timings[cost] = (cost.seconds(self.spec, cores), cores)
        # Each allocation once (a kernel's regions mostly share a few): checked before every run.
        allocations = tuple({id(a): a for a, _, _ in resolved_reads + resolved_writes}.values())
        return BoundKernel(_Guarded(run, resolved_reads, resolved_writes, padding, label, allocations),
                           resolved_reads, resolved_writes, padding, timing[0], timing[1], allocations)

    def submit_kernel(self, stream: SimStream, name: str, bound: BoundKernel, context: dict[str, Any]) -> None:
        """Enqueue a kernel bound by :meth:`bind_kernel` (the caller checked it is still alive);
        the task keeps ``context`` as it is (the callers make a new one per launch)."""
        self._check_stream(stream)
        task = kernel_task(name, bound.run, bound.seconds, bound.cores, context)
        self._submit(stream, task, reads=bound.reads, writes=bound.writes, padding=bound.padding)

    @staticmethod
    def _padding(writes: Sequence[Region]) -> tuple[Region, ...]:
        """The bytes past each region a kernel writes that it may touch: up to
        ``ALIGN_UP(len, 32) + 32`` (11-01, ``aclrtMalloc`` constraints), within the allocation."""
        padding = []
        for allocation, address, nbytes in writes:
            # align_up(max(nbytes, 1), 32) + 32, inline: this runs for every output of every kernel bound
            end = min(address + ((nbytes if nbytes > 1 else 1) + 31) // 32 * 32 + 32,
                      allocation.start + allocation.data.nbytes)
            if end > address + nbytes:
                padding.append((allocation, address + nbytes, end - address - nbytes))
        return tuple(padding)

    def latch(self, stream: SimStream) -> threading.Event:
        """Hold ``stream`` at this point until the returned event is set (a test helper)."""
        self._check_stream(stream)
        if stream.capture is not None:
            self.captures.forbid(stream.capture, 507009, "a latch")
        gate = threading.Event()
        self._submit(stream, Task(LATCH, "latch", latch=gate))
        return gate

    def run_faults(self, task: Task, stream: SimStream) -> bool:
        """Apply a planted fault to ``task``; True when the task must not run."""
        context = task.context
        replay = stream.graph_context  # a model's task: its replay's run context too
        if replay:
            context = {**(context or {}), **replay}
        rule = self.faults.check(task.kind if task.kind != MEMSET else "copy", task.name, context)
        if rule is None:
            return False
        if rule.hang:
            # A hung kernel fails once it ran past the op execute timeout, as on the device
            # (aclrtSetOpExecuteTimeOut, 12_execution_control.md); copies hang until released.
            limit = self.op_execute_timeout * self.engines.time_scale if task.kind == KERNEL else math.inf
            deadline = time.monotonic() + limit
            while not rule.released.wait(0.02):  # polled: an abort stops a hung task
                if stream.interrupted():
                    return True
                if time.monotonic() >= deadline:
                    stream._fail(task, error_from_code(507014, f"kernel {task.name} ran past the op execute timeout "
                                                               f"of {self.op_execute_timeout:g} s "
                                                               "(aclrtSetOpExecuteTimeOut, 12_execution_control.md)"))
                    return True
            return False
        detail = f"injected fault in {task.kind} {task.name}"
        stream._fail(task, error_from_code(rule.code or 507015, detail))
        return True

    def execute(self, task: Task) -> None:
        assert task.run is not None
        engines = self.engines
        if not engines.timing:
            task.run()
            return
        if task.engine == "compute":
            engines.cores.acquire(task.cores)
            try:
                self._mark_began(task)
                engines.hold("compute", task.seconds, task.run)
            finally:
                engines.cores.release(task.cores)
            return
        if task.engine.startswith("peer:"):
            lock = self.peers.link(int(task.engine[len("peer:"):]))
        else:
            lock = engines.h2d if task.engine == "h2d" else engines.d2h
        with lock:
            self._mark_began(task)
            engines.hold(task.engine, task.seconds, task.run)

    def _mark_began(self, task: Task) -> None:
        # Only a trace needs to tell waiting for an engine from holding it.
        if self.recorder is not None:
            task.began = self.engines.now()

    def _submit(self, stream: SimStream, task: Task, reads: Sequence[Region] = (), writes: Sequence[Region] = (),
                padding: Sequence[Region] = ()) -> None:
        task.writes = writes
        self.refuse_in_host_function(f"a launch ({describe_task(task)})")
        if stream.capture is not None:
            self.captures.add(stream, task, reads, writes, padding)
            return
        if stream.update is not None:
            self.captures.update_add(stream, task, reads, writes, padding)
            return
        stream.check_submittable()
        if self.sanitizer is not None:
            clock = self.sanitizer.enqueue(stream.name)
            task.snapshot = clock
            regions = [(allocation, address, nbytes, False) for allocation, address, nbytes in reads]
            regions += [(allocation, address, nbytes, True) for allocation, address, nbytes in writes]
            self.sanitizer.access_all(regions, actor=stream.name, clock=clock, what=describe_task(task),
                                      padding=padding)
        stream.submit(task)

    def submit_control(self, stream: SimStream, name: str, run: Callable[[], None]) -> None:
        """Enqueue bookkeeping the stream performs in order (an event reset, a task update)."""
        self.refuse_in_host_function(f"a launch ({name})")
        stream.check_submittable()
        if self.sanitizer is not None:
            task = Task(CONTROL, name, run, snapshot=self.sanitizer.enqueue(stream.name))
        else:
            task = Task(CONTROL, name, run)
        stream.submit(task)

    # -- streams ----------------------------------------------------------------------------
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

    def stream_set_failure_mode(self, stream: SimStream, mode: int) -> None:
        """``aclrtSetStreamFailureMode``: once per stream; STOP applies to the whole context."""
        self._check_stream(stream)
        mode = FailureMode(mode)
        if stream.mode_set:
            raise error_from_code(107000, f"stream {stream.name} already has a failure mode: aclrtSetStreamFailureMode "
                                          "may be called once per stream (06_stream_management.md)")
        stream.mode_set = True
        stream.mode = mode
        if mode == FailureMode.STOP:
            self.stop_on_failure = True

    def stream_abort(self, stream: SimStream) -> None:
        """``aclrtStreamAbort``: discard the stream's submitted tasks (A2/A3/950 only)."""
        self._check_stream(stream)
        if not self.spec.stream_abort:
            raise error_from_code(207000, f"{self.spec.name} has no aclrtStreamAbort (06_stream_management.md); "
                                          "synchronize the stream instead")
        self.refuse_in_host_function(f"aclrtStreamAbort of stream {stream.name}")
        stream.abort()

    def stream_sync(self, stream: SimStream, timeout_ms: int = -1) -> None:
        self._check_stream(stream)
        check_timeout(timeout_ms, f"aclrtSynchronizeStreamWithTimeout of stream {stream.name}")
        self.refuse_in_host_function(f"aclrtSynchronizeStream of stream {stream.name}")
        if stream.capture is not None:
            self.captures.refuse(stream.capture, 107027, f"a synchronize of stream {stream.name}")
        if not self._wait_stream(stream, None if timeout_ms < 0 else timeout_ms / 1000):
            raise error_from_code(507046, f"stream {stream.name} did not finish within {timeout_ms} ms")
        self._raise_sticky(stream)

    def stream_query(self, stream: SimStream) -> bool:
        self._check_stream(stream)
        if stream.capture is not None:
            self.captures.refuse(stream.capture, 107027, f"a query of stream {stream.name}")
        done = self._wait_stream(stream, 0)
        self._raise_sticky(stream)
        return done

    def _wait_stream(self, stream: SimStream, timeout: float | None) -> bool:
        """Wait for what is enqueued now; once it is done the host knows all of it."""
        # The snapshot is taken before the target so it never covers work the wait did not.
        snapshot = self.sanitizer.snapshot(stream.name) if self.sanitizer else None
        done = stream.wait_position(stream.position(), timeout)
        if done and snapshot is not None and self.sanitizer is not None:
            self.sanitizer.host_learns(snapshot)
        return done

    def stream_take_error(self, stream: SimStream) -> BackendError | None:
        return stream.take_error()

    @staticmethod
    def _raise_sticky(stream: SimStream) -> None:
        error = stream.take_error()
        if error is not None:
            raise error

    def stream_wait_event(self, stream: SimStream, event: SimEvent) -> None:
        self._check_stream(stream)
        self._check_event(event)
        if self.captures.wait(stream, event):
            return
        event.check_waitable()
        if self.sanitizer is not None:
            self.sanitizer.wait(stream.name, event.snapshot)
        self._submit(stream, Task(WAIT, f"wait {event.name}", event=event, generation=event.generation))

    # -- events -----------------------------------------------------------------------------
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

    @property
    def live_streams(self) -> int:
        """Streams alive on the device, captured models' own included (what the limit counts)."""
        with self._lock:
            return len(self._streams) + len(self._model_streams)

    def _check_event(self, event: SimEvent) -> None:
        if not isinstance(event, SimEvent):
            raise error_from_code(107017, f"{event!r} is not an event of this device")
        if event.destroyed:
            raise ClosedResourceError(f"event {event.name} was destroyed")

    def event_record(self, event: SimEvent, stream: SimStream) -> None:
        self._check_stream(stream)
        self._check_event(event)
        event.check_recordable()
        if stream.capture is not None:
            self.captures.record(stream, event)
            return
        if stream.update is not None:
            raise error_from_code(507009, "only single-op tasks may update a task group, got an event record")
        stream.check_submittable()
        snapshot = self.sanitizer.snapshot(stream.name) if self.sanitizer else {}
        generation = event.begin_record(snapshot)
        self._submit(stream, Task(RECORD, f"record {event.name}", event=event, generation=generation,
                                  consumed=stream.consumed))

    def event_reset(self, event: SimEvent, stream: SimStream) -> None:
        """``aclrtResetEvent``: single-use events only; takes effect in ``stream``'s order."""
        self._check_stream(stream)
        self._check_event(event)
        event.reset()
        self.submit_control(stream, f"reset {event.name}", lambda: None)

    def _check_not_captured(self, event: SimEvent, what: str) -> None:
        session = event.capture
        if session is not None:
            self.captures.refuse(session, 107028, f"a {what} of event {event.name}, recorded")

    def event_query(self, event: SimEvent) -> bool:
        self._check_event(event)
        self._check_not_captured(event, "query")
        done = event.is_done()
        if done and self.sanitizer is not None:
            self.sanitizer.host_learns(event.snapshot)
        return done

    def event_sync(self, event: SimEvent, timeout_ms: int = -1) -> None:
        self._check_event(event)
        check_timeout(timeout_ms, f"aclrtSynchronizeEventWithTimeout of event {event.name}")
        self.refuse_in_host_function(f"aclrtSynchronizeEvent of event {event.name}")
        self._check_not_captured(event, "synchronize")
        # The usual caller is a run's result, syncing its done event after the completion host
        # function behind it ran: a record that already completed.  That answer takes one look
        # under the event's lock (the result path runs cold after each wait).
        generation, snapshot = event.generation, event.snapshot
        done, error = event.outcome(generation)
        if not done:
            timeout = None if timeout_ms < 0 else timeout_ms / 1000
            if not event.wait_done(generation, timeout):
                raise error_from_code(507047, f"event {event.name} did not complete within {timeout_ms} ms")
            error = event.error_of(generation)
        if self.sanitizer is not None:
            self.sanitizer.host_learns(snapshot)
        if error is not None:
            raise error

    def event_elapsed(self, start: SimEvent, end: SimEvent) -> float:
        self._check_event(start)
        self._check_event(end)
        return (end.timestamp() - start.timestamp()) * 1000.0

    # -- host work --------------------------------------------------------------------------
    @staticmethod
    def refuse_in_host_function(what: str) -> None:
        """Refuse ``what`` when called from inside a host function (see :func:`refuse_in_host_function`)."""
        refuse_in_host_function(what)

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

    def host_func(self, stream: SimStream, fn: Callable[[], None], name: str = "") -> None:
        self._check_stream(stream)
        rule_name = name or getattr(fn, "__name__", "host_func")
        self._check_host_func_allowed(stream)
        planted = self.faults.check("host_func", rule_name, None)
        run = fn
        if planted is not None:
            code = planted.code or 507000

            def run() -> None:
                raise error_from_code(code, f"injected fault in host function {rule_name}")

        stream.host_thread()
        self._submit(stream, Task(HOST_FUNC, rule_name, run))

    def _check_host_func_allowed(self, stream: SimStream) -> None:
        if stream.capture is not None:
            self.captures.forbid(stream.capture, 507009, "a host function")
        if stream.update is not None:
            raise error_from_code(507009, "only single-op tasks may update a task group, got a host function")

    def host_func_c(self, stream: SimStream, fn_address: int, args_address: int) -> None:
        """Run a C ``void fn(void *)`` when the stream reaches it, blocking the stream's later tasks
        until it returns, as ``aclrtLaunchHostFunc`` does.  It runs on the stream's worker (no
        Python of the caller's runs, so which thread calls it is not observable); a planted fault
        still fails the stream first."""
        function = _FFI.cast("void (*)(void *)", fn_address)
        args = _FFI.cast("void *", args_address)
        self._check_stream(stream)
        self._check_host_func_allowed(stream)
        planted = self.faults.check("host_func", "host_func_c", None)
        if planted is not None:
            # C cannot raise: a planted fault is the runtime reporting the callback failed.  The
            # stream fails first and the function still runs, so whoever it wakes (completion
            # counters) sees the error, instead of waiting for ever for a call that never comes.
            code = planted.code or 507000

            def fail() -> None:
                raise error_from_code(code, "injected fault in host function host_func_c")

            stream.host_thread()
            self._submit(stream, Task(HOST_FUNC, "host_func_c", fail))
        self._submit(stream, Task(HOST_FUNC, "host_func_c", lambda: function(args), native=True))

    def device_sync(self, timeout_ms: int = -1) -> None:
        check_timeout(timeout_ms, "aclrtSynchronizeDeviceWithTimeout")
        self.refuse_in_host_function("aclrtSynchronizeDevice")
        self.captures.forbid_device_sync()
        sync_streams(self.stream_sync, list(self._streams) + list(self._model_streams), timeout_ms)

    # -- peer access (several devices) ----------------------------------------------------------
    def device_can_access_peer(self, peer: int) -> bool:
        """``aclrtDeviceCanAccessPeer(&can, self.index, peer)``; see :mod:`.peer`."""
        self._check_open()
        return self.peers.can_access(peer)

    def device_enable_peer_access(self, peer: int, flags: int = 0) -> None:
        """``aclrtDeviceEnablePeerAccess(peer, flags)`` with this device current: one way, this
        device's streams may then copy to and from ``peer``'s memory."""
        self._check_open()
        self.peers.enable(peer, flags)

    def device_disable_peer_access(self, peer: int) -> None:
        """``aclrtDeviceDisablePeerAccess(peer)`` with this device current."""
        self._check_open()
        self.peers.disable(peer)

    # -- operators --------------------------------------------------------------------------
    def op_prepare(self, op: str, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                   attrs: Mapping[str, Any]) -> SimExecutor:
        self._check_open()
        return prepare_executor(op, inputs, outputs, attrs)

    def op_set_repeatable(self, executor: SimExecutor) -> None:
        executor.set_repeatable()

    def op_set_tensor_address(self, executor: SimExecutor, index: int, *, output: bool, address: int) -> None:
        executor.set_address(index, output=output, address=address)

    def op_destroy(self, executor: SimExecutor) -> None:
        """``aclDestroyAclOpExecutor``.  Destroying an executor whose launch may still run is a
        use-after-free on the device (acl_meta.h): the sanitizer refuses it (the host has not
        learned the launch finished); without the sanitizer the launch fails when it runs."""
        if self.sanitizer is not None and not executor.destroyed:
            region = executor.region
            self.sanitizer.host_access(region, region.start, 1, write=True,
                                       what=f"aclDestroyAclOpExecutor of aclnn{executor.op}")
        executor.destroy()

    def op_launch(self, executor: SimExecutor, workspace: int, workspace_size: int, stream: SimStream,
                  context: Mapping[str, Any] | None = None) -> None:
        executor.launch(self, workspace, workspace_size, stream, context)

    # -- graph capture: model runtime instances (aclmdlRI, see .capture) ---------------------
    def capture_begin(self, stream: SimStream, mode: int = CaptureMode.GLOBAL) -> None:
        """``aclmdlRICaptureBegin``."""
        self._check_stream(stream)
        self.captures.begin(stream, CaptureMode(mode))

    def capture_get_info(self, stream: SimStream) -> tuple[CaptureStatus, SimModel | None]:
        """``aclmdlRICaptureGetInfo``."""
        self._check_stream(stream)
        return self.captures.get_info(stream)

    def capture_end(self, stream: SimStream) -> SimModel:
        """``aclmdlRICaptureEnd``: the model, ready to replay."""
        self._check_stream(stream)
        return self.captures.end(stream)

    def capture_task_group_begin(self, stream: SimStream) -> None:
        """``aclmdlRICaptureTaskGrpBegin``."""
        self._check_stream(stream)
        self.captures.group_begin(stream)

    def capture_task_group_end(self, stream: SimStream) -> TaskGroup:
        """``aclmdlRICaptureTaskGrpEnd``."""
        self._check_stream(stream)
        return self.captures.group_end(stream)

    def capture_task_update_begin(self, stream: SimStream, group: TaskGroup) -> None:
        """``aclmdlRICaptureTaskUpdateBegin``."""
        self._check_stream(stream)
        self.captures.update_begin(stream, group)

    def capture_task_update_end(self, stream: SimStream) -> None:
        """``aclmdlRICaptureTaskUpdateEnd``."""
        self._check_stream(stream)
        self.captures.update_end(stream)

    def model_execute(self, model: SimModel, stream: SimStream, context: Mapping[str, Any] | None = None) -> None:
        """``aclmdlRIExecuteAsync``: replay ``model`` on ``stream``."""
        self._check_stream(stream)
        self.refuse_in_host_function("aclmdlRIExecuteAsync")
        self.captures.execute(model, stream, context)

    def model_destroy(self, model: SimModel) -> None:
        """``aclmdlRIDestroy``."""
        self.captures.destroy(model)

    # -- timeline trace (sim only) ----------------------------------------------------------------
    def trace_begin(self) -> None:
        """Start recording a :class:`TraceRecord` for every task any stream executes from now on
        (see :mod:`aclpipe.trace`).  A trace already recording is discarded."""
        self._check_open()
        self.recorder = TraceRecorder()

    def trace_end(self, timeout: float = 10.0) -> list[TraceRecord]:
        """Stop recording and return the records, ordered by start time.

        Waits (up to ``timeout`` seconds) for the work already enqueued to finish first, so a
        trace ended right after a run completed also holds that run's last tasks; it does not
        consume sticky stream errors."""
        recorder = self.recorder
        if recorder is None:
            raise error_from_code(107000, "trace_end without trace_begin")
        for stream in list(self._streams) + list(self._model_streams):
            stream.wait_position(stream.position(), timeout)
        self.recorder = None
        return recorder.records()

    def trace_modelled_time(self) -> bool:
        """Trace timestamps are modelled device time when the timing model is on."""
        return self.engines.timing

    # -- fault injection (sim only) ------------------------------------------------------------
    def inject_fault(self, kind: str, match: str | None = None, *, code: int | None = None, skip: int = 0,
                     times: int | None = 1, hang: bool = False, run: int | None = None) -> FaultRule:
        """Plant a fault; see :class:`aclpipe.backends.sim.faults.FaultRule`."""
        return self.faults.add(FaultRule(kind, match, code, skip, times, hang, run))

    def release_hangs(self) -> None:
        self.faults.release()


_POISON = bytes([POISON_BYTE])


def _bytes_of(allocation: Allocation, address: int, nbytes: int) -> memoryview:
    """The bytes ``[address, address + nbytes)`` of ``allocation``, writable in place."""
    offset = address - allocation.start
    return allocation.data.data[offset:offset + nbytes]


class _Guarded:
    """A kernel body refusing freed memory (AI-core read/write traps, 25-01_aclError.md) and
    scribbling over the padding it may touch once it ran.

    A class rather than a closure: a prepared program holds one per node and slot, and one
    object with slots is what the cyclic collector then traverses instead of a function, its
    cells and the lists they hold."""

    __slots__ = ("_allocations", "_scribbles", "label", "padding", "reads", "run", "writes")

    def __init__(self, run: Callable[[], None], reads: tuple[Region, ...], writes: tuple[Region, ...],
                 padding: tuple[Region, ...], label: str, allocations: tuple[Allocation, ...]):
        self.run = run
        self.reads = reads
        self.writes = writes
        self.padding = padding
        self.label = label
        self._allocations = allocations  # those of ``reads`` and ``writes``, each once
        # The padding's bytes and their poison, made at first run.  A memoryview slice assigned a
        # bytes object of its length: 0.25 µs where ndarray.fill took 0.33 (run after every kernel).
        self._scribbles: list[tuple[Allocation, memoryview, bytes]] | None = None

    def __call__(self) -> None:
        for allocation in self._allocations:
            if not allocation.alive:
                self._trap()
        self.run()
        scribbles = self._scribbles
        if scribbles is None:
            scribbles = self._scribbles = [(allocation, _bytes_of(allocation, address, nbytes), _POISON * nbytes)
                                           for allocation, address, nbytes in self.padding]
        for allocation, scribble, poison in scribbles:
            if allocation.alive:
                scribble[:] = poison

    def _trap(self) -> None:
        """Raise the trap for the first region (reads first) in freed memory."""
        for regions, code, kind in ((self.reads, 507042, "reads"), (self.writes, 507043, "writes")):
            for allocation, _, _ in regions:
                if not allocation.alive:
                    raise error_from_code(code, f"{self.label} {kind} {allocation.describe()}, freed while the "
                                                "kernel was queued (use after free)")
