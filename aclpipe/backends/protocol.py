"""The backend contract: primitives only, named after the C calls they stand for.

Policy (pooling, retries, event reuse, executor caching, completion) lives once above this
layer in :mod:`aclpipe.runtime`, :mod:`aclpipe.eager` and :mod:`aclpipe.pipeline`, so the
simulator tests the same policy code that real hardware runs.  Handles (streams, events,
executors) are opaque objects owned by the backend; addresses are plain integers.

Every method raises :class:`aclpipe.errors.BackendError` (built from the ACL code) on
failure.  Stream errors are sticky: they surface at the next ``stream_sync`` or
``stream_query`` (or ``stream_take_error``) and are consumed by it.  What a stream does after
a failed task is its :class:`FailureMode` (``aclrtSetStreamFailureMode``): by default it goes
on with later tasks, which compute on whatever the failed one left behind.

Events come in the two kinds of the CANN docs (``hicann/runtime``
``docs/zh/api_ref/07_event_management.md``): *reusable* ones
(``aclrtCreateEventExWithFlag``) may be recorded again and again, a wait using the latest
record; *single-use* ones (``aclrtCreateEventWithFlag``) follow record, wait,
``event_reset``.  Waiting on an event that was never recorded is an error.

Optional parts are sub-protocols behind :class:`Capabilities` flags, never found by probing
for attributes: :class:`GraphCapture` (``capabilities.graph_capture``), :class:`LaunchTables`
(``capabilities.launch_tables``), :class:`Tracing` (``capabilities.tracing``),
:class:`FaultInjection` (``capabilities.fault_injection``), :class:`Latching`
(``capabilities.latch``), :class:`PeerAccess` (``capabilities.peer_access``),
:class:`StreamOrderedAlloc` (``capabilities.stream_ordered_alloc``) and
:class:`ConditionalModels` (``capabilities.conditional_models``).
:func:`graph_capture`, :func:`launch_tables`, :func:`tracing`, :func:`fault_injection`,
:func:`latching`, :func:`peer_access`, :func:`stream_ordered_alloc` and
:func:`conditional_models` hand out the typed view
of a backend, or ``None`` when its capabilities say it lacks the part.

A :class:`LaunchRecord` is one primitive call with its arguments fixed in advance (a wait,
a record, a kernel launch or a copy); a prepared program keeps each slot's launches as a
flat list of them, which any backend can enqueue one by one and a :class:`LaunchTables`
backend enqueues with one call (the ascend backend walks them in C).
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol, cast, runtime_checkable

import numpy as np

from ..errors import BackendError
from ..tensor import TensorDesc

__all__ = [
    "Backend",
    "Capabilities",
    "CaptureMode",
    "CaptureStatus",
    "CondTaskType",
    "ConditionalModels",
    "Executor",
    "FailureMode",
    "FaultInjection",
    "GraphCapture",
    "Latching",
    "LaunchKind",
    "LaunchRecord",
    "LaunchTables",
    "MemPoolAttr",
    "MemcpyKind",
    "MemoryRules",
    "PeerAccess",
    "StreamOrderedAlloc",
    "TraceRecord",
    "Tracing",
    "align_up",
    "conditional_models",
    "fault_injection",
    "graph_capture",
    "latching",
    "launch_tables",
    "peer_access",
    "stream_ordered_alloc",
    "sync_streams",
    "tracing",
]


class MemPoolAttr(enum.IntEnum):
    """``aclrtMemPoolAttr`` (``acl_rt_memory_soma.h``): what ``mem_pool_get_attr`` reads."""

    REUSE_FOLLOW_EVENT_DEPENDENCIES = 0x1
    REUSE_ALLOW_OPPORTUNISTIC = 0x2
    REUSE_ALLOW_INTERNAL_DEPENDENCIES = 0x3
    RELEASE_THRESHOLD = 0x4
    RESERVED_MEM_CURRENT = 0x5
    RESERVED_MEM_HIGH = 0x6
    USED_MEM_CURRENT = 0x7
    USED_MEM_HIGH = 0x8


class MemcpyKind(enum.IntEnum):
    """``aclrtMemcpyKind``."""

    HOST_TO_HOST = 0
    HOST_TO_DEVICE = 1
    DEVICE_TO_HOST = 2
    DEVICE_TO_DEVICE = 3


class FailureMode(enum.IntEnum):
    """``aclrtSetStreamFailureMode`` (``06_stream_management.md``).

    ``CONTINUE`` (``ACL_CONTINUE_ON_FAILURE``, the default): after a failed task the stream
    runs its later tasks.  ``STOP`` (``ACL_STOP_ON_FAILURE``): it stops, and refuses new tasks;
    setting it on one stream makes every stream of the context stop on failure."""

    CONTINUE = 0
    STOP = 1


class CaptureStatus(enum.IntEnum):
    """``aclmdlRICaptureStatus``."""

    NONE = 0
    ACTIVE = 1
    INVALIDATED = 2


class CondTaskType(enum.IntEnum):
    """``aclmdlRICondTaskType`` (``include/external/acl/acl_rt.h``): what a conditional task of a
    captured model does with its sub-models.  ``SWITCH`` (2) exists in CANN but is not bound."""

    IF = 0  # sub-model 0 when the condition is not 0, else sub-model 1 (when there are two)
    WHILE = 1  # sub-model 0 again and again while the condition is not 0, tested before each run


class CaptureMode(enum.IntEnum):
    """``aclmdlRICaptureMode``: which threads may make unsafe calls while a capture is active."""

    GLOBAL = 0
    THREAD_LOCAL = 1
    RELAXED = 2


def align_up(nbytes: int, alignment: int) -> int:
    """``ALIGN_UP[len, k]`` of the CANN docs: ``((len - 1) // k + 1) * k`` (0 stays 0)."""
    return -(-nbytes // alignment) * alignment


@dataclass(frozen=True)
class MemoryRules:
    """How code that carves one device allocation into pieces must lay the pieces out.

    From the CANN runtime docs, ``docs/zh/api_ref/11-01_device_memory_malloc_and_free.md``
    (``aclrtMalloc``, constraints): a user who allocates a large block and manages it
    himself must give each piece ``m = ALIGN_UP(len, 32) + 32`` bytes on Atlas A2, A3, 310P,
    200I/500 A2 and training products (``ALIGN_UP(len, 32)`` only on the 950 series), and
    start each piece at a 64-byte aligned address: kernels may touch those extra bytes, so
    an unpadded neighbour can be clobbered.

    Attributes
    ----------
    granule:
        Sizes are first rounded up to a multiple of this (32).
    padding:
        Bytes added after the rounded size (32 on A2/A3/310P, 0 on the 950 series).
    alignment:
        Every piece starts at a multiple of this (64).
    """

    granule: int = 32
    padding: int = 32
    alignment: int = 64

    def piece_size(self, nbytes: int) -> int:
        """Bytes a piece of ``nbytes`` occupies, up to where the next piece may start."""
        return align_up(align_up(max(nbytes, 1), self.granule) + self.padding, self.alignment)


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do, as data (never a platform check)."""

    host_callbacks: bool = True
    event_timing: bool = True
    #: Streams this backend may create (``stream_create``, a captured model's streams included): the
    #: product's streams per device less the default streams of the contexts the backend holds.
    max_streams: int = 1024
    #: The product's documented streams per device, default streams included (06_stream_management.md,
    #: aclrtCreateStream: 1984 on A2/A3/950, 1024 on inference cards, 512 on 200I/500 A2); 0: unknown.
    device_streams: int = 0
    #: Default streams the runtime made for the contexts this backend holds, one per context
    #: (``Context::Setup``, ``src/runtime/core/src/context/context.cc``): they count against
    #: ``device_streams`` ("N = the maximum - the streams that exist, the default stream included").
    default_streams: int = 0
    #: Seconds a kernel may run before it fails with 507014 (``aclrtSetOpExecuteTimeOut``,
    #: 12_execution_control.md; process-wide on the device); 0: unknown.
    op_execute_timeout: float = 0.0
    #: Seconds an event wait (``stream_wait_event``) may block before it fails with 107020, raised
    #: at a later synchronize (``aclrtSetOpWaitTimeout``, 07_event_management.md; process-wide on
    #: the runtime); 0: never, the runtime's default.
    op_wait_timeout: float = 0.0
    #: ``memcpy_sync`` and ``memset_sync`` exist (``aclrtMemcpy``, ``aclrtMemset``: synchronous,
    #: refused while a GLOBAL-mode capture is open; aclpipe itself only copies asynchronously).
    sync_copies: bool = False
    sanitizer: bool = False
    fault_injection: bool = False  # the backend is a FaultInjection
    timing_model: bool = False
    repeatable_executors: bool = True
    graph_capture: bool = False  # the backend is a GraphCapture
    event_errors: bool = False  # event_sync raises the error of a record made on a failed stream
    tracing: bool = False  # the backend is a Tracing
    latch: bool = False  # the backend is a Latching
    memory: MemoryRules = field(default_factory=MemoryRules)
    max_events: int = 65536  # events one device supports (07_event_management.md)
    reusable_events: bool = True  # event_create(reusable=True) exists (aclrtCreateEventExWithFlag)
    stop_on_failure: bool = False  # stream_set_failure_mode exists (aclrtSetStreamFailureMode)
    stream_abort: bool = False  # stream_abort exists (aclrtStreamAbort)
    #: One thread per context (device) runs the host functions of all its streams, one at a time,
    #: in the order the streams reach them: ``aclrtLaunchHostFunc`` (``ApiImpl::LaunchHostFunc``
    #: makes the context's callback thread, ``src/runtime/api/impl/api_impl.cc``) and the
    #: ``aclrtLaunchCallback`` report thread alike.  Never assume two host functions overlap.
    host_thread_per_context: bool = True
    launch_tables: bool = False  # the backend is a LaunchTables
    peer_access: bool = False  # the backend is a PeerAccess
    #: The backend is a StreamOrderedAlloc: ``aclrtMemPool*`` (acl_rt_memory_soma.h) bound and the
    #: product has it (11-10_ordered_stream_memory_allocation.md: Atlas A2 only, experimental).
    stream_ordered_alloc: bool = False
    #: The backend is a ConditionalModels: ``aclmdlRICondHandleCreate``, ``aclmdlRICondHandleGetCondPtr``,
    #: ``aclmdlRIAddCondTask`` and ``aclmdlRICaptureToModelRIBegin`` (acl_rt.h, a trial feature) bound
    #: and the product has them (15_model_running_instance__management.md: Atlas A2 and A3).
    conditional_models: bool = False


_NO_CONTEXT: Mapping[str, Any] = MappingProxyType({})


class LaunchKind(enum.IntEnum):
    """What one :class:`LaunchRecord` enqueues (the C call it stands for)."""

    WAIT = 0  # aclrtStreamWaitEvent(stream, event)
    RECORD = 1  # aclrtRecordEvent(event, stream)
    KERNEL = 2  # aclnnXxx(workspace, workspace_size, executor, stream)
    COPY = 3  # aclrtMemcpyAsync(dst, nbytes, src, nbytes, copy_kind, stream)


class LaunchRecord(NamedTuple):
    """One primitive call with every argument fixed: what a prepared slot enqueues per run.

    ``stream``, ``event`` and ``executor`` are backend handles; the kernel's executor is
    repeatable and its workspace (``workspace`` bytes at an address, or 0 and 0) stays the
    same from run to run.  ``context`` names the node and op for error messages.

    A named tuple: immutable like a frozen dataclass, and built in about half the time
    (preparing two slots of a 19,367-node graph builds 56,000 of them).
    """

    kind: LaunchKind
    stream: Any
    event: Any = None
    executor: Any = None
    workspace: int = 0
    workspace_size: int = 0
    dst: int = 0
    src: int = 0
    nbytes: int = 0
    copy_kind: MemcpyKind = MemcpyKind.HOST_TO_DEVICE
    context: Mapping[str, Any] = _NO_CONTEXT


@runtime_checkable
class Executor(Protocol):
    """What phase one returns: the plan of one operator call."""

    op: str
    workspace_size: int


@dataclass(frozen=True)
class TraceRecord:
    """One task a stream executed, with device timestamps in seconds since the device opened.

    ``queued`` is when the stream reached the task; ``start`` when it got its engine (later
    than ``queued`` only when a timing model made it wait for AI cores or a copy engine);
    ``end`` when it finished.  ``engine`` is ``"compute"``, ``"h2d"`` or ``"d2h"`` for
    kernels, copies and memsets, ``None`` for records, waits, host functions and latches.
    ``node``, ``op`` and ``run`` come from the launch context (``None`` when not given).
    ``event`` names the event generation a record completes or a wait waits for
    (``"e3#2"``), so a record and its waits can be paired.  ``status`` is ``"ok"``,
    ``"skipped"`` (a sticky error on the stream made it skip) or ``"failed"``.
    """

    stream: str
    kind: str
    name: str
    engine: str | None
    node: str | None
    op: str | None
    run: int | None
    queued: float
    start: float
    end: float
    cores: int = 0
    status: str = "ok"
    event: str | None = None

    @property
    def duration(self) -> float:
        return self.end - self.start


class Backend(Protocol):
    """One opened device."""

    name: str
    index: int
    capabilities: Capabilities
    closed: bool

    def close(self) -> None: ...
    def describe(self) -> str:
        """One line saying what this device is (shown by ``aclpipe devices``)."""
        ...

    # memory ---------------------------------------------------------------------------------
    def mem_alloc(self, nbytes: int, label: str = "") -> int: ...
    def mem_free(self, address: int) -> None: ...
    def mem_alloc_host(self, nbytes: int, label: str = "") -> tuple[int, np.ndarray]: ...
    def mem_free_host(self, address: int) -> None: ...
    def mem_info(self) -> tuple[int, int]: ...
    def mem_peak(self) -> int | None:
        """The most device bytes allocated at once so far, when the backend tracks it."""
        ...
    def host_access(self, address: int, nbytes: int, *, write: bool, what: str) -> None: ...
    def memcpy_async(self, dst: int, src: int, nbytes: int, kind: MemcpyKind, stream: Any,
                     context: Mapping[str, Any] | None = None) -> None: ...
    def memset_async(self, address: int, value: int, nbytes: int, stream: Any) -> None: ...

    # streams --------------------------------------------------------------------------------
    def stream_create(self, priority: int = 0) -> Any: ...
    def stream_destroy(self, stream: Any) -> None: ...
    def stream_set_failure_mode(self, stream: Any, mode: int) -> None:
        """``aclrtSetStreamFailureMode``: once per stream (``capabilities.stop_on_failure``)."""
        ...
    def stream_abort(self, stream: Any) -> None:
        """``aclrtStreamAbort``: discard the stream's submitted tasks (``capabilities.stream_abort``)."""
        ...
    def stream_sync(self, stream: Any, timeout_ms: int = -1) -> None: ...
    def stream_query(self, stream: Any) -> bool: ...
    def stream_wait_event(self, stream: Any, event: Any) -> None: ...
    def stream_take_error(self, stream: Any) -> BackendError | None: ...

    # events ---------------------------------------------------------------------------------
    def event_create(self, timing: bool = False, reusable: bool = True) -> Any:
        """A reusable (``aclrtCreateEventExWithFlag``) or single-use (``aclrtCreateEventWithFlag``) event."""
        ...
    def event_destroy(self, event: Any) -> None: ...
    def event_record(self, event: Any, stream: Any) -> None: ...
    def event_reset(self, event: Any, stream: Any) -> None:
        """``aclrtResetEvent``: a single-use event back to its initial state, in ``stream``'s order."""
        ...
    def event_query(self, event: Any) -> bool: ...
    def event_sync(self, event: Any, timeout_ms: int = -1) -> None: ...
    def event_elapsed(self, start: Any, end: Any) -> float: ...

    # host work and device -------------------------------------------------------------------
    def host_func(self, stream: Any, fn: Callable[[], None], name: str = "") -> None: ...
    def host_func_c(self, stream: Any, fn_address: int, args_address: int) -> None:
        """Enqueue a C host function ``void fn(void *args)`` (``aclrtLaunchHostFunc``)."""
        ...
    def device_sync(self, timeout_ms: int = -1) -> None: ...

    # operators (aclnn two-phase) ------------------------------------------------------------
    def op_prepare(self, op: str, inputs: Sequence[TensorDesc | None],
                   outputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> Any: ...
    def op_set_repeatable(self, executor: Any) -> None: ...
    def op_set_tensor_address(self, executor: Any, index: int, *, output: bool,
                              address: int) -> None: ...
    def op_destroy(self, executor: Any) -> None: ...
    def op_launch(self, executor: Any, workspace: int, workspace_size: int, stream: Any,
                  context: Mapping[str, Any] | None = None) -> None: ...


class GraphCapture(Backend, Protocol):
    """Optional: capture device work into a model runtime instance and replay it
    (``capabilities.graph_capture``), as ``aclmdlRI*`` do (``15_model_running_instance__management.md``).

    Capture begins on one *origin* stream; other streams join by waiting on events recorded
    inside the capture and must rejoin the origin (a record the origin waits on) before it
    ends.  Synchronizing a capturing stream (or the device, or an event recorded inside)
    invalidates the capture.  A model replays with one call on one stream."""

    def capture_begin(self, stream: Any, mode: int = CaptureMode.GLOBAL) -> None:
        """``aclmdlRICaptureBegin``: later tasks submitted to ``stream`` are stored, not run."""
        ...
    def capture_get_info(self, stream: Any) -> tuple[CaptureStatus, Any | None]:
        """``aclmdlRICaptureGetInfo``: the stream's capture status and model."""
        ...
    def capture_end(self, stream: Any) -> Any:
        """``aclmdlRICaptureEnd`` on the origin stream: returns the model."""
        ...
    def capture_task_group_begin(self, stream: Any) -> None:
        """``aclmdlRICaptureTaskGrpBegin``: single-op tasks captured from here may be updated."""
        ...
    def capture_task_group_end(self, stream: Any) -> Any:
        """``aclmdlRICaptureTaskGrpEnd``: returns the task group."""
        ...
    def capture_task_update_begin(self, stream: Any, group: Any) -> None:
        """``aclmdlRICaptureTaskUpdateBegin`` on a stream not capturing: tasks submitted to it
        until the update ends replace the group's."""
        ...
    def capture_task_update_end(self, stream: Any) -> None:
        """``aclmdlRICaptureTaskUpdateEnd``: the update takes effect in ``stream``'s order."""
        ...
    def model_execute(self, model: Any, stream: Any, context: Mapping[str, Any] | None = None) -> None:
        """``aclmdlRIExecuteAsync``: replay ``model`` on ``stream`` (after its earlier work;
        its later work waits for the whole model)."""
        ...
    def model_destroy(self, model: Any) -> None:
        """``aclmdlRIDestroy`` (refused while a replay may still run)."""
        ...


class LaunchTables(Backend, Protocol):
    """Optional: enqueue a prepared list of :class:`LaunchRecord` with one call
    (``capabilities.launch_tables``), e.g. by walking them in C.

    A table does exactly what calling the primitives record by record would, checks
    included; the checks that cannot change between runs (live handles, repeatable
    executors, workspace sizes) are made once by :meth:`table_create`."""

    def table_create(self, records: Sequence[LaunchRecord]) -> Any:
        """A table for ``records`` (checked now; handles must outlive it)."""
        ...
    def table_enqueue(self, table: Any, run: int | None = None) -> None:
        """Enqueue every record in order.  When the runtime refuses one, the records before it
        stay enqueued and the :class:`BackendError` raised carries the record's ``context``,
        its ``index`` and ``run``."""
        ...
    def table_destroy(self, table: Any) -> None:
        """Free the table (the records' handles are not touched)."""
        ...


class Tracing(Backend, Protocol):
    """Optional: record a :class:`TraceRecord` per executed task (``capabilities.tracing``)."""

    def trace_begin(self) -> None: ...
    def trace_end(self, timeout: float = 10.0) -> list[TraceRecord]:
        """Stop recording (once the work already enqueued is done); returns the records in
        start order."""
        ...
    def trace_modelled_time(self) -> bool:
        """Whether trace timestamps are modelled device time (a timing model is on)."""
        ...


class FaultInjection(Backend, Protocol):
    """Optional: plant faults the way the device would raise them
    (``capabilities.fault_injection``)."""

    def inject_fault(self, kind: str, match: str | None = None, *, code: int | None = None, skip: int = 0,
                     times: int | None = 1, hang: bool = False, run: int | None = None) -> Any: ...
    def release_hangs(self) -> None: ...


class Latching(Backend, Protocol):
    """Optional: a device task that holds a stream until the host opens it
    (``capabilities.latch``)."""

    def latch(self, stream: Any) -> threading.Event: ...


class PeerAccess(Backend, Protocol):
    """Optional: copies between this device's memory and a peer's (``capabilities.peer_access``).

    ``aclrtDeviceCanAccessPeer`` / ``aclrtDeviceEnablePeerAccess`` / ``aclrtDeviceDisablePeerAccess``
    with this device current (``docs/zh/api_ref/04_device_management.md`` of ``hicann/runtime``):
    enabling is one way, ``flags`` is reserved (0).  Once this device enabled ``peer``,
    ``memcpy_async(..., DEVICE_TO_DEVICE, stream)`` on a stream of this device may read or write
    ``peer``'s memory; without it the copy is refused.  A stream may wait on another device's
    event (the pipeline's stages do so at every boundary).
    """

    def device_can_access_peer(self, peer: int) -> bool: ...
    def device_enable_peer_access(self, peer: int, flags: int = 0) -> None: ...
    def device_disable_peer_access(self, peer: int) -> None: ...


class StreamOrderedAlloc(Backend, Protocol):
    """Optional: the stream-ordered allocator (``capabilities.stream_ordered_alloc``),
    ``aclrtMemPool*`` of ``acl_rt_memory_soma.h`` (``11-10_ordered_stream_memory_allocation.md``
    of ``hicann/runtime``: Atlas A2 only, experimental; there is no ``aclrtMallocAsync``).

    What the runtime's source settles (``src/acl/aclrt_impl/memory.cpp``,
    ``src/runtime/api/impl/api_impl_soma.cc``, ``src/runtime/feature/soma/``):

    - ``mem_pool_malloc_async`` hands out the address at once, on the host
      (``SomaApi::AllocFromMemPool``), and enqueues a task (the ``SomaMemMng`` AICPU kernel) that
      maps the memory in ``stream``'s order: work on ``stream`` after it may use the block, work
      on another stream only once ordered after it by an event.  Sizes are rounded up to 2 MB
      (``DEVICE_POOL_MIN_BLOCK_SIZE``); 0 bytes allocates nothing and returns 0
      (``aclrtMemPoolMallocAsyncImpl``).  A pool with no room left refuses with 507000
      (``RT_ERROR_MEM_POOL_ALLOC`` has no ACL code of its own: ``ErrorcodeManage::GetRtExtErrCode``).
    - ``mem_pool_free_async`` gives the block back to the pool on the host at once and enqueues
      the task that unmaps it in ``stream``'s order; work ordered after that task must not touch
      the block.  A block is *cached*, not free: it is handed out again only after
      ``mem_pool_trim_to`` (``SegmentManager::TryToReuse`` finds nothing in this source), so
      every allocation takes new room until the pool is trimmed.  Freeing an address the pool
      did not hand out (or twice) is 107000 (``ApiImplSoma::MemPoolFreeAsync``).
    - ``mem_pool_trim_to(pool, keep)`` releases cached blocks until the pool reserves at most
      ``keep`` bytes; ``keep`` below the bytes in use, or above the pool's size, is 507000
      (``SegmentManager::TrimTo``).  Released room may be handed to any stream, so the host
      must have seen the blocks' frees run first (a stream or event synchronize after them).
    - A product without it refuses every call with 207000 (``api_impl_stub.cc``).
    """

    def mem_pool_create(self, max_size: int = 0) -> Any:
        """``aclrtMemPoolCreate`` of device memory (PINNED, this device): ``max_size`` rounded up
        to 2 MB, 0 for the device's whole memory."""
        ...
    def mem_pool_destroy(self, pool: Any) -> None:
        """``aclrtMemPoolDestroy``."""
        ...
    def mem_pool_malloc_async(self, pool: Any, nbytes: int, stream: Any) -> int:
        """``aclrtMemPoolMallocAsync``: the block's address (0 for 0 bytes)."""
        ...
    def mem_pool_free_async(self, address: int, stream: Any) -> None:
        """``aclrtMemPoolFreeAsync``."""
        ...
    def mem_pool_trim_to(self, pool: Any, keep: int) -> None:
        """``aclrtMemPoolTrimTo``."""
        ...
    def mem_pool_get_attr(self, pool: Any, attr: MemPoolAttr) -> int:
        """``aclrtMemPoolGetAttr`` of a counter (``MemPoolAttr.USED_MEM_CURRENT``, ...)."""
        ...


class ConditionalModels(GraphCapture, Protocol):
    """Optional: conditional tasks inside a captured model (``capabilities.conditional_models``),
    CANN's ``aclmdlRICond*`` (``include/external/acl/acl_rt.h``; pages in
    ``docs/zh/api_ref/15_model_running_instance__management.md``: a trial feature of Atlas A2
    and A3; the 950's page says yes, its sample says no).

    What the runtime's source settles (``src/acl/aclrt_impl/model_ri.cpp``,
    ``src/runtime/feature/aclgraph/v100/api_impl_aclgraph.cc``,
    ``src/runtime/core/src/task/task_info/cond_op/aclgraph_cond_task.cc``,
    ``src/runtime/core/src/task/stars_cond_isa_helper.cc``):

    - ``cond_handle_create(model, default, assign_default)`` needs ``model`` in an active
      capture (``ApiImpl::ModelCondHandleCreate``: 107000 otherwise).  The handle owns 8 bytes of
      device memory, the *condition* (a ``uint64``), freed with the model; with
      ``assign_default`` (``ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT``) it is set to ``default`` at
      the start of every execution of the model, else whoever captures manages it.
      ``cond_handle_get_cond_ptr`` gives its address: any task may write it.
    - ``add_cond_task(handle, kind, size, stream)`` on a capturing stream of the handle's model
      adds one task there and returns ``size`` new, empty sub-models (``WHILE``: 1; ``IF``: 1 or 2;
      anything else 107000, as a second task on one handle is).  Each is filled by
      ``capture_to_model_begin(other_stream, sub_model)`` .. ``capture_end(other_stream)``;
      a sub-model is never destroyed on its own (its parent's destroy frees it).
    - When a replay reaches the task, the device loads the 64-bit condition
      (``RT_STARS_COND_ISA_LOAD_IMM_FUNC3_LD``): ``WHILE`` runs the sub-model while it is not 0,
      tested before every run (``ConstructWhileCondSetupBranch``: BNE; the jump-back task:
      BEQ to the end), so the body must write the condition itself; ``IF`` runs sub-model 0 when
      it is not 0, else sub-model 1 if given.  Later tasks on the stream wait for it.
    - A product without it refuses with 207000 (``api_impl_stub.cc``; the TS firmware's
      ``TS_FEATURE_ACLGRAPH_COND_OP`` and the software SQ must be there:
      ``CheckCaptureModelSupportCondOp``).
    """

    def cond_handle_create(self, model: Any, default: int = 0, assign_default: bool = False) -> Any:
        """``aclmdlRICondHandleCreate`` on a model being captured."""
        ...
    def cond_handle_get_cond_ptr(self, handle: Any) -> int:
        """``aclmdlRICondHandleGetCondPtr``: the device address of the 8-byte condition."""
        ...
    def add_cond_task(self, handle: Any, kind: CondTaskType, size: int, stream: Any) -> list[Any]:
        """``aclmdlRIAddCondTask``: the conditional task on capturing ``stream``; its sub-models."""
        ...
    def capture_to_model_begin(self, stream: Any, model: Any, mode: int = CaptureMode.GLOBAL) -> None:
        """``aclmdlRICaptureToModelRIBegin``: capture ``stream``'s tasks into the sub-model ``model``
        until ``capture_end(stream)``."""
        ...


def conditional_models(backend: Backend) -> ConditionalModels | None:
    """``backend`` as a :class:`ConditionalModels`, or None when it (or its product) lacks them."""
    return cast(ConditionalModels, backend) if backend.capabilities.conditional_models else None


def stream_ordered_alloc(backend: Backend) -> StreamOrderedAlloc | None:
    """``backend`` as a :class:`StreamOrderedAlloc`, or None when it (or its product) lacks it."""
    return cast(StreamOrderedAlloc, backend) if backend.capabilities.stream_ordered_alloc else None


def peer_access(backend: Backend) -> PeerAccess | None:
    """``backend`` as a :class:`PeerAccess`, or None when it cannot reach other devices' memory."""
    return cast(PeerAccess, backend) if backend.capabilities.peer_access else None


def graph_capture(backend: Backend) -> GraphCapture | None:
    """``backend`` as a :class:`GraphCapture`, or None when it cannot capture."""
    return cast(GraphCapture, backend) if backend.capabilities.graph_capture else None


def launch_tables(backend: Backend) -> LaunchTables | None:
    """``backend`` as a :class:`LaunchTables`, or None when it enqueues records one by one."""
    return cast(LaunchTables, backend) if backend.capabilities.launch_tables else None


def tracing(backend: Backend) -> Tracing | None:
    """``backend`` as a :class:`Tracing`, or None when it cannot record traces."""
    return cast(Tracing, backend) if backend.capabilities.tracing else None


def fault_injection(backend: Backend) -> FaultInjection | None:
    """``backend`` as a :class:`FaultInjection`, or None when it cannot plant faults."""
    return cast(FaultInjection, backend) if backend.capabilities.fault_injection else None


def latching(backend: Backend) -> Latching | None:
    """``backend`` as a :class:`Latching`, or None when it has no latch task."""
    return cast(Latching, backend) if backend.capabilities.latch else None


def sync_streams(stream_sync: Callable[[Any, int], None], streams: Iterable[Any], timeout_ms: int = -1) -> None:
    """``device_sync`` written once for every backend: ``stream_sync`` each of ``streams``, then
    raise the first error seen (a failed stream does not keep the others from being waited for).
    ``timeout_ms`` bounds the whole wait, as ``aclrtSynchronizeDeviceWithTimeout``'s does: streams
    held behind one hung stream time out together, not one timeout after another."""
    first: BackendError | None = None
    deadline = None if timeout_ms < 0 else time.monotonic() + timeout_ms / 1000
    for stream in streams:
        # At least 1 ms: the runtime refuses a 0 ms synchronize (api_error.cc).
        left = -1 if deadline is None else max(1, int((deadline - time.monotonic()) * 1000))
        try:
            stream_sync(stream, left)
        except BackendError as error:
            first = first or error
    if first is not None:
        raise first
