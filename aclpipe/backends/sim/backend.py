"""The simulated NPU: the embedded default backend and the living definition of the contract.

See ARCHITECTURE.md 3.1.  Everything a real device would check is checked here: device
addresses are opaque and bounds- and alignment-checked, memory is poisoned, streams run
on their own threads, host functions on a callback thread, errors are sticky, and with
``sanitizer=True`` every access is checked for happens-before at enqueue time.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import cffi

from ...errors import BackendError, ClosedResourceError, DeviceOutOfMemory, error_from_code
from ...tensor import TensorDesc
from ..protocol import Capabilities, MemcpyKind, TraceRecord, sync_streams
from .callbacks import CallbackThread
from .engines import ATLAS_A2, SPECS, Cost, DeviceSpec, Engines
from .event import SimEvent
from .executor import SimExecutor, prepare_executor
from .faults import FaultInjector, FaultRule
from .memory import Allocation, DeviceMemory
from .peer import WINDOW_BYTES, PeerLinks, claim_window, release_window
from .recorder import TraceRecorder
from .sanitizer import Clock, Sanitizer
from .stream import COPY, GRAPH, HOST_FUNC, KERNEL, LATCH, MEMSET, RECORD, WAIT, SimStream, Task

__all__ = ["Access", "SimBackend", "SimGraph"]

_NO_COST = Cost()

#: Casts a C function address to something callable (ABI mode: nothing is compiled).
_FFI = cffi.FFI()

#: Stream and event names are unique in the process: one sanitizer clock may hold several devices'
#: streams, and a stream may wait on another device's event.
_STREAM_NAMES = itertools.count()
_EVENT_NAMES = itertools.count()

#: ``(address, nbytes)`` of one region a kernel reads or writes.
Access = tuple[int, int]


@dataclass(frozen=True, eq=False)
class _Captured:
    stream: SimStream
    task: Task
    reads: tuple[tuple[Allocation, int, int], ...] = ()
    writes: tuple[tuple[Allocation, int, int], ...] = ()


class SimGraph:
    """A captured sequence of device work, replayed by :meth:`SimBackend.graph_launch`."""

    def __init__(self, items: list[_Captured]):
        self.items = items
        self.parts: dict[SimStream, list[Task]] = {}
        self.sync_points: list[tuple[SimStream, int, Task]] = []
        for item in items:
            tasks = self.parts.setdefault(item.stream, [])
            if item.task.kind in (RECORD, WAIT):
                self.sync_points.append((item.stream, len(tasks), item.task))
            tasks.append(item.task)

    @property
    def size(self) -> int:
        return len(self.items)


def _run_suffix(context: Mapping[str, Any] | None) -> str:
    return f" run={context['run']}" if context and "run" in context else ""


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
        A :class:`DeviceSpec` or the name of one (default ``"atlas-a2"``).
    capacity:
        Device memory in bytes (default: the spec's memory).
    timing:
        Turn the timing model on: tasks hold their engine for the modelled time.
    time_scale:
        Wall seconds per modelled device second when timing is on.
    sanitizer:
        Check every access for happens-before (default from ``ACLPIPE_SANITIZER``, else off).
    """

    name = "sim"

    def __init__(self, index: int = 0, *, spec: DeviceSpec | str = ATLAS_A2, capacity: int | None = None,
                 timing: bool | None = None, time_scale: float = 1.0, sanitizer: bool | None = None,
                 max_streams: int = 64):
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
        sanitize = _env_flag("ACLPIPE_SANITIZER", False) if sanitizer is None else sanitizer
        self.memory = DeviceMemory(capacity if capacity is not None else spec.memory_bytes, claim_window(self),
                                   WINDOW_BYTES)
        self.engines = Engines(spec, timing, time_scale)
        self.sanitizer: Sanitizer | None = Sanitizer() if sanitize else None
        self.faults = FaultInjector()
        self.capabilities = Capabilities(
            host_callbacks=True, event_timing=True, max_streams=max_streams, sanitizer=sanitize,
            fault_injection=True, timing_model=True, repeatable_executors=True, graph_capture=True,
            event_errors=True, tracing=True, latch=True, peer_access=True)
        self.peers = PeerLinks(self)
        self.callbacks = CallbackThread(f"aclpipe-sim{index}-callbacks")
        self._streams: list[SimStream] = []
        self._names = itertools.count()
        self._lock = threading.Lock()
        self._capture: list[_Captured] | None = None
        #: Installed by trace_begin; stream workers record every task while it is set.
        self.recorder: TraceRecorder | None = None
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
        for stream in list(self._streams):
            self._stop_stream(stream)
        self.callbacks.close()
        release_window(self)

    def _check_open(self) -> None:
        if self.closed:
            raise ClosedResourceError(f"sim:{self.index} is closed; open a new device")

    # -- memory -----------------------------------------------------------------------------
    def mem_alloc(self, nbytes: int, label: str = "") -> int:
        self._check_open()
        rule = self.faults.check("alloc", label, None)
        if rule is not None:
            raise DeviceOutOfMemory(rule.code or 207001, requested=nbytes, in_use=self.memory.in_use,
                                    limit=self.memory.capacity)
        return self.memory.alloc(nbytes, label).start

    def mem_free(self, address: int) -> None:
        self._check_open()
        # Only a live allocation's start is checked: anything else (a double free, an interior
        # address) must fail in memory.free with ACL's free error, sanitizer on or off.
        allocation = self.memory.starting_at(address)
        if self.sanitizer is not None and allocation is not None:
            self.sanitizer.host_access(allocation, allocation.start, allocation.size, write=True,
                                       what=f"free of {allocation.describe()}")
        self.memory.free(address)

    def mem_alloc_host(self, nbytes: int, label: str = "") -> tuple[int, Any]:
        self._check_open()
        allocation = self.memory.alloc_host(nbytes, label)
        return allocation.start, allocation.data

    def mem_free_host(self, address: int) -> None:
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

    def memset_async(self, address: int, value: int, nbytes: int, stream: SimStream) -> None:
        self._check_stream(stream)
        allocation = self.memory.find_device(address, nbytes, what="memset")
        offset = address - allocation.start

        def run() -> None:
            self._live_bytes(allocation, offset, nbytes, "memset")[...] = value & 0xFF

        task = Task(MEMSET, f"memset of {nbytes} bytes", run,
                    seconds=Cost(bytes=nbytes).seconds(self.spec, self.spec.ai_cores))
        self._submit(stream, task, reads=[], writes=[(allocation, address, nbytes)])

    @staticmethod
    def _live_bytes(allocation: Allocation, offset: int, nbytes: int, what: str) -> Any:
        if not allocation.alive:
            raise error_from_code(507053, f"{what}: {allocation.describe()} was freed while the "
                                          "device still used it")
        return allocation.data[offset:offset + nbytes]

    # -- kernels ----------------------------------------------------------------------------
    def launch_kernel(self, stream: SimStream, name: str, run: Callable[[], None], *,
                      reads: Sequence[Access] = (), writes: Sequence[Access] = (),
                      cost: Cost = _NO_COST, context: Mapping[str, Any] | None = None) -> None:
        """Enqueue a kernel: ``run`` executes on the stream's worker after the declared regions
        are checked (live, in bounds, 32-byte aligned) and, with the sanitizer on, ordered."""
        self._check_stream(stream)
        label = (context or {}).get("node") or name
        resolved_reads = [self._kernel_region(a, n, f"{label} read") for a, n in reads]
        resolved_writes = [self._kernel_region(a, n, f"{label} write") for a, n in writes]
        cores = cost.tiling(self.spec)
        task = Task(KERNEL, name, run, seconds=cost.seconds(self.spec, cores), cores=cores,
                    context=dict(context or {}))
        self._submit(stream, task, reads=resolved_reads, writes=resolved_writes)

    def _kernel_region(self, address: int, nbytes: int, what: str) -> tuple[Allocation, int, int]:
        allocation = self.memory.find_device(address, max(nbytes, 1), what=what, aligned=True)
        return allocation, address, nbytes

    def latch(self, stream: SimStream) -> threading.Event:
        """Hold ``stream`` at this point until the returned event is set (a test helper)."""
        self._check_stream(stream)
        gate = threading.Event()
        self._submit(stream, Task(LATCH, "latch", latch=gate))
        return gate

    def run_faults(self, task: Task, stream: SimStream) -> bool:
        """Apply a planted fault to ``task``; True when the task must not run."""
        rule = self.faults.check(task.kind if task.kind != MEMSET else "copy", task.name, task.context)
        if rule is None:
            return False
        if rule.hang:
            rule.released.wait()
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

    def _submit(self, stream: SimStream, task: Task, reads: Sequence[tuple[Allocation, int, int]] = (),
                writes: Sequence[tuple[Allocation, int, int]] = ()) -> None:
        if self._capture is not None:
            if task.kind in (HOST_FUNC, LATCH):
                raise error_from_code(200001, f"{task.kind} cannot be captured into a graph")
            self._capture.append(_Captured(stream, task, tuple(reads), tuple(writes)))
            return
        if self.sanitizer is not None:
            clock = self.sanitizer.enqueue(stream.name)
            task.snapshot = clock
            regions = [(allocation, address, nbytes, False) for allocation, address, nbytes in reads]
            regions += [(allocation, address, nbytes, True) for allocation, address, nbytes in writes]
            self.sanitizer.access_all(regions, actor=stream.name, clock=clock, what=self._what(task))
        stream.submit(task)

    @staticmethod
    def _what(task: Task) -> str:
        context = task.context or {}
        parts = [f"{task.kind} '{task.name}'"]
        for key in ("node", "op", "run"):
            if context.get(key) is not None:
                parts.append(f"{key}={context[key]}")
        return " ".join(parts)

    # -- streams ----------------------------------------------------------------------------
    def stream_create(self, priority: int = 0) -> SimStream:
        self._check_open()
        if not 0 <= priority <= 7:
            raise error_from_code(107000, f"stream priority must be 0..7 (aclrtCreateStreamWithConfig), "
                                          f"got {priority}")
        with self._lock:
            if len(self._streams) >= self.capabilities.max_streams:
                raise error_from_code(207008, f"sim:{self.index} allows {self.capabilities.max_streams} "
                                              "streams; destroy unused streams")
            stream = SimStream(self, f"s{next(_STREAM_NAMES)}", priority)
            self._streams.append(stream)
        if self.sanitizer is not None:
            self.sanitizer.add_stream(stream.name)
        return stream

    def stream_destroy(self, stream: SimStream) -> None:
        if stream.destroyed:
            return
        self._stop_stream(stream)

    def _stop_stream(self, stream: SimStream) -> None:
        stream.destroyed = True
        stream.stop()
        with self._lock:
            if stream in self._streams:
                self._streams.remove(stream)
        if self.sanitizer is not None and stream.completed >= stream.enqueued:
            self.sanitizer.retire(stream.name)  # joined with all its work done: the host knows it all

    def _check_stream(self, stream: SimStream) -> None:
        self._check_open()
        if not isinstance(stream, SimStream) or stream.backend is not self:
            raise error_from_code(107003, "the stream belongs to another device")
        if stream.destroyed:
            raise ClosedResourceError(f"stream {stream.name} was destroyed")

    def stream_sync(self, stream: SimStream, timeout_ms: int = -1) -> None:
        self._check_stream(stream)
        if not self._wait_stream(stream, None if timeout_ms < 0 else timeout_ms / 1000):
            raise error_from_code(507046, f"stream {stream.name} did not finish within {timeout_ms} ms")
        self._raise_sticky(stream)

    def stream_query(self, stream: SimStream) -> bool:
        self._check_stream(stream)
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

    def _raise_sticky(self, stream: SimStream) -> None:
        error = stream.take_error()
        if error is not None:
            raise error

    def stream_wait_event(self, stream: SimStream, event: SimEvent) -> None:
        self._check_stream(stream)
        self._check_event(event)
        if self._capture is not None:
            self._capture.append(_Captured(stream, Task(WAIT, f"wait {event.name}", event=event)))
            return
        if self.sanitizer is not None:
            self.sanitizer.wait(stream.name, event.snapshot)
        self._submit(stream, Task(WAIT, f"wait {event.name}", event=event, generation=event.generation))

    # -- events -----------------------------------------------------------------------------
    def event_create(self, timing: bool = False) -> SimEvent:
        self._check_open()
        return SimEvent(f"e{next(_EVENT_NAMES)}", timing)

    def event_destroy(self, event: SimEvent) -> None:
        event.destroyed = True

    def _check_event(self, event: SimEvent) -> None:
        if not isinstance(event, SimEvent):
            raise error_from_code(107017, f"{event!r} is not an event of this device")
        if event.destroyed:
            raise ClosedResourceError(f"event {event.name} was destroyed")

    def event_record(self, event: SimEvent, stream: SimStream) -> None:
        self._check_stream(stream)
        self._check_event(event)
        if self._capture is not None:
            self._capture.append(_Captured(stream, Task(RECORD, f"record {event.name}", event=event)))
            return
        snapshot = self.sanitizer.snapshot(stream.name) if self.sanitizer else {}
        generation = event.begin_record(snapshot)
        self._submit(stream, Task(RECORD, f"record {event.name}", event=event, generation=generation))

    def event_query(self, event: SimEvent) -> bool:
        self._check_event(event)
        done = event.is_done()
        if done and self.sanitizer is not None:
            self.sanitizer.host_learns(event.snapshot)
        return done

    def event_sync(self, event: SimEvent, timeout_ms: int = -1) -> None:
        self._check_event(event)
        generation, snapshot = event.generation, event.snapshot
        timeout = None if timeout_ms < 0 else timeout_ms / 1000
        if not event.wait_done(generation, timeout):
            raise error_from_code(507047, f"event {event.name} did not complete within {timeout_ms} ms")
        if self.sanitizer is not None:
            self.sanitizer.host_learns(snapshot)
        error = event.error_of(generation)
        if error is not None:
            raise error

    def event_elapsed(self, start: SimEvent, end: SimEvent) -> float:
        self._check_event(start)
        self._check_event(end)
        return (end.timestamp() - start.timestamp()) * 1000.0

    # -- host work --------------------------------------------------------------------------
    def host_func(self, stream: SimStream, fn: Callable[[], None], name: str = "") -> None:
        self._check_stream(stream)
        rule_name = name or getattr(fn, "__name__", "host_func")
        planted = self.faults.check("host_func", rule_name, None)
        run = fn
        if planted is not None:
            code = planted.code or 507000

            def run() -> None:
                raise error_from_code(code, f"injected fault in host function {rule_name}")

        self._submit(stream, Task(HOST_FUNC, rule_name, run))

    def host_func_c(self, stream: SimStream, fn_address: int, args_address: int) -> None:
        """Run a C ``void fn(void *)`` on the callback thread, as ``aclrtLaunchHostFunc`` does."""
        function = _FFI.cast("void (*)(void *)", fn_address)
        args = _FFI.cast("void *", args_address)
        self._check_stream(stream)
        planted = self.faults.check("host_func", "host_func_c", None)
        if planted is not None:
            # C cannot raise: a planted fault is the runtime reporting the callback failed.  The
            # stream fails first and the function still runs, so whoever it wakes (completion
            # counters) sees the error, instead of waiting for ever for a call that never comes.
            code = planted.code or 507000

            def fail() -> None:
                raise error_from_code(code, "injected fault in host function host_func_c")

            self._submit(stream, Task(HOST_FUNC, "host_func_c", fail))
        self._submit(stream, Task(HOST_FUNC, "host_func_c", lambda: function(args)))

    def device_sync(self, timeout_ms: int = -1) -> None:
        sync_streams(self.stream_sync, list(self._streams), timeout_ms)

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
        executor.destroy()

    def op_launch(self, executor: SimExecutor, workspace: int, workspace_size: int, stream: SimStream,
                  context: Mapping[str, Any] | None = None) -> None:
        executor.launch(self, workspace, workspace_size, stream, context)

    # -- graph capture and replay (like aclmdlRICaptureBegin / aclmdlRIExecuteAsync) ---------------
    def graph_capture_begin(self) -> None:
        """Record, instead of enqueueing, every copy, kernel, record and wait until
        :meth:`graph_capture_end`.  Addresses and executors are fixed at capture."""
        self._check_open()
        if self._capture is not None:
            raise error_from_code(200001, "a graph capture is already in progress")
        self._capture = []

    def graph_capture_end(self) -> SimGraph:
        if self._capture is None:
            raise error_from_code(107000, "graph_capture_end without graph_capture_begin")
        graph, self._capture = SimGraph(self._capture), None
        return graph

    def graph_launch(self, graph: SimGraph, context: Mapping[str, Any] | None = None) -> None:
        """Replay a captured graph: one queue entry per stream, however many tasks it holds.

        Only one replay of a graph may be in flight at a time: its kernel tasks are reused."""
        self._check_open()
        snapshots = self._sanitize_replay(graph, context) if self.sanitizer is not None else {}
        parts = {stream: list(tasks) for stream, tasks in graph.parts.items()}
        for stream in parts:
            self._check_stream(stream)
        # Records and waits refer to event generations, which are new at every replay; capture
        # order puts each record before the waits on it.
        for stream, position, template in graph.sync_points:
            event = template.event
            assert event is not None
            if template.kind == RECORD:
                parts[stream][position] = Task(RECORD, template.name, event=event,
                                               generation=event.begin_record(snapshots.get(event, {})))
            else:
                parts[stream][position] = Task(WAIT, template.name, event=event, generation=event.generation)
        run_context = dict(context or {})
        for stream, tasks in parts.items():
            stream.submit(Task(GRAPH, "graph", tasks=tasks, context=run_context))

    def _sanitize_replay(self, graph: SimGraph, context: Mapping[str, Any] | None) -> dict[SimEvent, Clock]:
        """Check the replay's accesses in capture order; returns each recorded event's clock."""
        assert self.sanitizer is not None
        snapshots: dict[SimEvent, Clock] = {}
        for item in graph.items:
            task, name = item.task, item.stream.name
            assert task.kind not in (RECORD, WAIT) or task.event is not None
            if task.kind == RECORD:
                snapshots[task.event] = self.sanitizer.snapshot(name)  # type: ignore[index]
            elif task.kind == WAIT:
                self.sanitizer.wait(name, snapshots.get(task.event, task.event.snapshot))  # type: ignore[arg-type,union-attr]
            else:
                clock = self.sanitizer.enqueue(name)
                regions = [(a, address, n, False) for a, address, n in item.reads]
                regions += [(a, address, n, True) for a, address, n in item.writes]
                self.sanitizer.access_all(regions, actor=name, clock=clock,
                                          what=self._what(task) + _run_suffix(context))
        return snapshots

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
        for stream in list(self._streams):
            stream.wait_position(stream.position(), timeout)
        self.recorder = None
        return recorder.records()

    def trace_modelled_time(self) -> bool:
        """Trace timestamps are modelled device time when the timing model is on."""
        return self.engines.timing

    # -- fault injection (sim only) ------------------------------------------------------------
    def inject_fault(self, kind: str, match: str | None = None, *, code: int | None = None, skip: int = 0,
                     times: int | None = 1, hang: bool = False) -> FaultRule:
        """Plant a fault; see :class:`aclpipe.backends.sim.faults.FaultRule`."""
        return self.faults.add(FaultRule(kind, match, code, skip, times, hang))

    def release_hangs(self) -> None:
        self.faults.release()
