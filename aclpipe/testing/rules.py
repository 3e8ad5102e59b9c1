"""The documented runtime rules as checks: one per rule of the ``hicann/runtime`` docs.

Each check drives a fresh device the way :mod:`.checks` does and fails with
:class:`ConformanceFailure` naming the rule and its page.  A check that cannot apply to the
device (a limit too large to exhaust, say) raises :class:`CheckSkipped` with the reason.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..backends.protocol import (
    CaptureMode,
    CaptureStatus,
    CondTaskType,
    MemcpyKind,
    MemPoolAttr,
    conditional_models,
    fault_injection,
    graph_capture,
    stream_ordered_alloc,
)
from ..errors import BackendError, DeviceFault, HazardError
from ..runtime import Device, DeviceBuffer, Stream
from ..tensor import TensorDesc
from .checks import CONTRACT, HOLD, TIMEOUT, Check, ConformanceFailure, _read, expect, expect_raises
from .latch import latch

__all__ = ["CHECKS", "RULES", "CheckSkipped"]


class CheckSkipped(Exception):
    """The check does not apply to this device; the message says why."""


def _fail_next_copy(device: Device, stream: Stream, target: DeviceBuffer) -> DeviceBuffer | None:
    """Enqueue a device-to-device copy into ``target`` that fails when the stream runs it: a
    planted fault where the backend can plant one (returns the copy's source: keep it until the
    stream passed the copy), else a source freed under the queued copy."""
    backend = device.backend
    faults = fault_injection(backend)
    if faults is not None:
        source = device.alloc(target.nbytes)
        faults.inject_fault("copy", "conformance-failure")
        backend.memcpy_async(target.address, source.address, target.nbytes, MemcpyKind.DEVICE_TO_DEVICE,
                             stream.handle, {"node": "conformance-failure"})
        return source
    source_address = backend.mem_alloc(target.nbytes)
    with latch(stream):
        backend.memcpy_async(target.address, source_address, target.nbytes, MemcpyKind.DEVICE_TO_DEVICE,
                             stream.handle)
        backend.mem_free(source_address)
    return None


# -- events (07_event_management.md, design/modules/event/event.md) ---------------------------------
def event_kinds(device: Device) -> str:
    first, second = device.create_stream(), device.create_stream()
    reusable = device.create_event()
    for _ in range(3):
        first.record(reusable)
        second.wait(reusable)
    second.sync(TIMEOUT)
    expect_raises(BackendError, "aclrtResetEvent refuses aclrtCreateEventExWithFlag events", reusable.reset, second)
    single = device.create_event(reusable=False)
    first.record(single)
    second.wait(single)
    expect_raises(BackendError, "an aclrtCreateEventWithFlag event recorded again before aclrtResetEvent",
                  first.record, single)
    single.reset(second)
    first.record(single)
    second.wait(single)
    second.sync(TIMEOUT)
    return "reusable events re-record; single-use ones need a reset first; a reset of a reusable one is refused"


def never_recorded_wait(device: Device) -> str:
    stream = device.create_stream()
    error = expect_raises(BackendError, "a wait on a never-recorded event (event.md 4.2)", stream.wait,
                          device.create_event())
    expect(error.code == 107000, f"the refusal has code {error.code}, expected 107000 (an invalid value)")
    return "refused with 107000"


def event_limit(device: Device) -> str:
    limit = device.capabilities.max_events
    if limit > 4096:
        raise CheckSkipped(f"the limit of {limit} events is too large to exhaust in a check")
    stream, events = device.create_stream(), list[Any]()
    try:
        while len(events) <= limit:
            event = device.create_event()
            events.append(event)
            stream.record(event)  # reusable events take their resource at the first record
    except BackendError as error:
        expect(error.code == 207007, f"exhausting events failed with {error.code}, expected 207007")
        expect(len(events) >= limit, f"only {len(events)} of the {limit} events could be made")
        stream.sync(TIMEOUT)
        return f"event {len(events) + 1} refused with 207007 (limit {limit})"
    raise ConformanceFailure(f"{len(events)} events were created and recorded, the product allows {limit} "
                             "(07_event_management.md)")


# -- synchronize timeouts (06, 07; src/runtime/api/impl/api_error.cc) ------------------------------
def zero_timeout(device: Device) -> str:
    backend, stream = device.backend, device.create_stream()
    event = stream.record()
    stream.sync(TIMEOUT)
    for call, handle, what in ((backend.stream_sync, stream.handle, "aclrtSynchronizeStreamWithTimeout(0)"),
                               (backend.event_sync, event.handle, "aclrtSynchronizeEventWithTimeout(0)")):
        error = expect_raises(BackendError, f"{what} on finished work (api_error.cc, "
                                            "ApiErrorDecorator::StreamSynchronize/EventSynchronize: -1 or > 0)",
                              call, handle, 0)
        expect(error.code == 107000, f"{what} was refused with {error.code}, expected 107000 (an invalid value)")
    with latch(stream):
        held = stream.record()
        polled = expect_raises(DeviceFault, "Stream.sync(timeout=0) on a held stream (a poll: a query)",
                               stream.sync, 0)
        expect(polled.code == 507046, f"a poll of a held stream raised {polled.code}, expected 507046 (not done)")
        polled = expect_raises(DeviceFault, "Event.sync(timeout=0) on a held record", held.sync, 0)
        expect(polled.code == 507047, f"a poll of a held record raised {polled.code}, expected 507047 (not done)")
    stream.sync(TIMEOUT)
    stream.sync(1e-4)  # a sub-millisecond timeout waits 1 ms; it must not become the refused 0
    held.sync(1e-4)
    held.sync(0)
    return "a 0 ms synchronize is refused with 107000; timeout=0 polls with queries; 0.1 ms waits 1 ms"


def op_wait_timeout(device: Device) -> str:
    seconds = device.capabilities.op_wait_timeout
    producer, waiter = device.create_stream(), device.create_stream()
    if not seconds:
        with latch(producer):
            waiter.wait(producer.record())
            still = expect_raises(DeviceFault, "a synchronize of a stream waiting on a held record", waiter.sync, HOLD)
            expect(still.code == 507046, f"with no op wait timeout set, a wait on a held record failed with "
                                         f"{still.code}; it must block (07_event_management.md, aclrtSetOpWaitTimeout: "
                                         "not called, no timeout): only the synchronize's own timeout (507046) ends it")
        waiter.sync(TIMEOUT)
        return "no op wait timeout set: a wait blocked on a held record went on until it was released"
    if seconds > TIMEOUT / 2:
        raise CheckSkipped(f"an op wait timeout of {seconds:g} s is too long to wait out in a check (open the device "
                           "with op_wait_timeout=1 to run it)")
    target = device.alloc(64)
    with latch(producer):
        waiter.wait(producer.record())  # accepted: the failure surfaces at a later synchronize
        waiter.memset(target, 0x5A)
        error = expect_raises(BackendError, f"a wait blocked past the op wait timeout of {seconds:g} s",
                              waiter.sync, min(TIMEOUT, 2 * seconds + 0.5))
    expect(error.code == 107020, f"a wait past the op wait timeout failed with {error.code}, expected 107020 "
                                 "(ACL_ERROR_RT_TASK_TIMEOUT: the STARS timeout bit read as TS_ERROR_TASK_TIMEOUT)")
    seen = _read(device, waiter, target, 64)
    expect((seen == 0x5A).all(), "the task after a timed-out wait did not run (continue on failure is the default)")
    return f"a wait past {seconds:g} s failed with 107020 at the next synchronize; the stream went on"


# -- streams (06_stream_management.md) -----------------------------------------------------------
def stream_limit(device: Device) -> str:
    capabilities = device.capabilities
    limit, per_device, defaults = capabilities.max_streams, capabilities.device_streams, capabilities.default_streams
    if per_device:
        expect(defaults >= 1, f"the backend claims {defaults} default streams: aclrtSetDevice makes the primary "
                              "context's (06_stream_management.md; context.cc, Context::Setup)")
        expect(limit <= per_device - defaults,
               f"the backend lets {limit} streams be created of the {per_device} per device, but {defaults} of those "
               "are its contexts' default streams (06_stream_management.md, aclrtCreateStream: N = the maximum - "
               "the streams that exist, the default stream included)")
    if limit > 600:  # each stream is a thread on the simulator and the fake
        raise CheckSkipped(f"{limit} streams are too many to exhaust in a check (the declared figures agree: "
                           f"{per_device} per device less {defaults} default streams)")
    backend, handles = device.backend, list[Any]()
    try:
        while len(handles) <= limit:
            handles.append(backend.stream_create())
    except BackendError as error:
        expect(error.code == 207008, f"exhausting streams failed with {error.code}, expected 207008")
        expect(len(handles) == limit, f"stream {len(handles) + 1} was refused, the backend claims {limit}")
        return f"stream {limit + 1} refused with 207008 ({per_device} per device, {defaults} default streams)"
    finally:
        for handle in handles:
            backend.stream_destroy(handle)
    raise ConformanceFailure(f"{len(handles)} streams were created, the backend claims {limit} (06)")


def continue_on_failure(device: Device) -> str:
    stream, target, later = device.create_stream(), device.alloc(64), device.alloc(64)
    expect(stream.failure_mode == "continue", f"a new stream's failure mode is {stream.failure_mode!r}")
    source = _fail_next_copy(device, stream, target)
    stream.memset(later, 0x5A)
    expect_raises(BackendError, "a failed task is reported at sync", stream.sync, TIMEOUT)
    del source  # the stream passed the copy
    seen = _read(device, stream, later, 64)
    expect((seen == 0x5A).all(), "continue-on-failure (the default) did not run the task after the failed one")
    return "the task after a failed one ran; the error was reported at sync"


def stop_on_failure(device: Device) -> str:
    stream = device.create_stream(failure_mode="stop")
    target, later = device.upload(np.full(64, 0x11, np.uint8)), device.upload(np.full(64, 0x11, np.uint8))
    with latch(stream):
        source = _fail_next_copy(device, stream, target)
        stream.memset(later, 0x5A)  # queued behind the failure: dropped
    expect_raises(BackendError, "a failed task is reported at sync", stream.sync, TIMEOUT)
    del source
    expect_raises(BackendError, "a stream stopped on failure refuses new tasks", stream.memset, later, 0x77)
    stream.renew()
    seen = _read(device, stream, later, 64)
    expect((seen == 0x11).all(), "stop-on-failure ran a task queued behind the failed one")
    return "queued work dropped, new work refused; a renewed stream works"


def stream_abort(device: Device) -> str:
    producer, consumer = device.create_stream(failure_mode="stop"), device.create_stream()
    target, later = device.alloc(64), device.alloc(64)
    with latch(producer):
        source = _fail_next_copy(device, producer, target)
        consumer.wait(producer.record())  # the record is dropped when the producer stops
        consumer.memset(later, 0x5A)
    expect_raises(BackendError, "the producer's failure", producer.sync, TIMEOUT)
    del source
    expect_raises(BackendError, "a stream waiting on a stopped stream's record stays blocked", consumer.sync, 0.2)
    consumer.abort()
    consumer.sync(TIMEOUT)
    consumer.memset(later, 0x11)
    seen = _read(device, consumer, later, 64)
    expect((seen == 0x11).all(), "the aborted stream did not run work enqueued after the abort")
    return "a blocked waiter is released by aclrtStreamAbort and takes new work"


def host_threads(device: Device) -> str:
    first, second = device.create_stream(), device.create_stream()
    order: list[str] = []
    threads: set[int] = set()
    started, overlapped = threading.Event(), threading.Event()

    def hold() -> None:
        threads.add(threading.get_ident())
        order.append("first")
        started.set()
        overlapped.wait(HOLD)  # set by the second stream's host function if it runs meanwhile

    def meet() -> None:
        threads.add(threading.get_ident())
        overlapped.set()
        order.append("second")

    first.host_func(hold)
    first.host_func(lambda: order.append("first again"))
    expect(started.wait(TIMEOUT), "a host function never ran")
    second.host_func(meet)  # reached while ``hold`` runs: it must wait for it
    first.sync(TIMEOUT)
    second.sync(TIMEOUT)
    expect(order[:2] == ["first", "second"],
           f"host functions of two streams of one device overlapped (order {order}): the runtime runs them all on "
           "the context's one callback thread (12_execution_control.md, aclrtLaunchHostFunc; "
           "src/runtime/api/impl/api_impl.cc, ApiImpl::LaunchHostFunc)")
    expect(order == ["first", "second", "first again"],
           f"host functions ran in the order {order}, not the order their streams reached them")
    expect(len(threads) == 1, f"host functions of one device ran on {len(threads)} threads, expected the context's one")
    return "two streams' host functions ran one at a time, in the order reached, on one thread"


def host_function_calls(device: Device) -> str:
    stream, other = device.create_stream(), device.create_stream()
    backend = device.backend
    address = backend.mem_alloc(64)
    seen: dict[str, Any] = {}
    calls: dict[str, Any] = {
        "aclrtMalloc": lambda: backend.mem_alloc(64),
        "aclrtFree": lambda: backend.mem_free(address),
        "aclrtSynchronizeStream": lambda: backend.stream_sync(other.handle, -1),  # idle: it would return at once
        "aclrtMemsetAsync": lambda: backend.memset_async(address, 0, 64, other.handle),
    }

    def attempt() -> None:
        for name, call in calls.items():
            try:
                seen[name] = call()
            except (BackendError, HazardError) as error:
                seen[name] = error

    stream.host_func(attempt, name="calls-back-in")
    stream.sync(TIMEOUT)
    other.sync(TIMEOUT)
    allowed = [name for name, result in seen.items() if not isinstance(result, (BackendError, HazardError))]
    if isinstance(seen.get("aclrtMalloc"), int):
        backend.mem_free(seen["aclrtMalloc"])
    if "aclrtFree" not in allowed:
        backend.mem_free(address)
    expect(len(seen) == len(calls), f"the host function made only {sorted(seen)} of its calls")
    expect(not allowed, f"{', '.join(allowed)} from inside a host function succeeded: 12_execution_control.md "
                        "(aclrtLaunchHostFunc, aclrtLaunchCallback) forbids allocating, freeing, synchronizing and "
                        "launching there (the context's one callback thread may deadlock)")
    return "allocation, free, synchronize and launch from inside a host function are refused"


# -- memory (11-01, 11-03, acl_rt.h, 25-01) ---------------------------------------------------------
def d2d_alignment(device: Device) -> str:
    stream, source, target = device.create_stream(), device.alloc(256), device.alloc(256)
    backend = device.backend
    error = expect_raises(BackendError, "a D2D copy from a 32-byte aligned address (acl_rt.h, aclrtMemcpyAsync)",
                          backend.memcpy_async, target.address, source.address + 32, 64,
                          MemcpyKind.DEVICE_TO_DEVICE, stream.handle)
    expect(error.code == 107008, f"refused with {error.code}, expected 107008 (ACL_ERROR_RT_ADDR_UNALIGNED)")
    backend.memcpy_async(target.address + 64, source.address + 128, 64, MemcpyKind.DEVICE_TO_DEVICE, stream.handle)
    stream.sync(TIMEOUT)
    return f"refused with {error.code}; 64-byte aligned copies run"


def async_host_copy(device: Device) -> str:
    stream = device.create_stream()
    error = expect_raises(BackendError, "an async host-to-host copy (11-03, EP form)", stream.memcpy,
                          device.alloc_host(64), device.alloc_host(64))
    expect(error.code == 207000, f"refused with {error.code}, expected 207000 (feature not supported)")
    return "refused with 207000"


def use_after_free_code(device: Device) -> str:
    stream, target = device.create_stream(), device.alloc(64)
    backend = device.backend
    source_address = backend.mem_alloc(64)
    with latch(stream):
        backend.memcpy_async(target.address, source_address, 64, MemcpyKind.DEVICE_TO_DEVICE, stream.handle)
        try:
            backend.mem_free(source_address)
        except HazardError:
            refused = "the sanitizer refused the free"
        else:
            refused = ""
    if refused:
        stream.sync(TIMEOUT)
        backend.mem_free(source_address)
        return refused
    error = expect_raises(BackendError, "a copy from memory freed under it", stream.sync, TIMEOUT)
    expect(error.code != 507053, "a use after free was reported as 507053, the hardware's uncorrectable memory "
                                 "error (25-01_aclError.md)")
    return f"reported as {error.code} ({error.name})"


def sanitizer_padding(device: Device) -> str:
    stream, block = device.create_stream(), device.alloc(256)
    _double(device, stream, block.address + 64, 16, "neighbour")
    _double(device, stream, block.address, 16, "left")  # may touch 32 bytes past its output: the neighbour
    expect_raises(HazardError, "a read of a neighbour inside another kernel's padding (11-01)",
                  _double, device, stream, block.address + 64, 16, "reader")
    stream.sync(TIMEOUT)
    return "reading bytes another kernel may have touched as padding is refused"


def executor_destroy(device: Device) -> str:
    stream, data = device.create_stream(), device.upload(np.ones(16, np.float32))
    backend = device.backend
    with latch(stream):
        executor = _double(device, stream, data.address, 16, "conformance-executor", repeatable=True)
        try:
            backend.op_destroy(executor)
        except HazardError:
            caught = "the sanitizer refused the destroy"
        else:
            caught = ""
    if caught:
        stream.sync(TIMEOUT)
        backend.op_destroy(executor)
        return caught
    expect_raises(BackendError, "a launch whose executor was destroyed while it was queued (acl_meta.h)",
                  stream.sync, TIMEOUT)
    return "the queued launch fails instead of running a freed executor"


def _double(device: Device, stream: Stream, address: int, count: int, node: str, *, repeatable: bool = False,
            launch: bool = True) -> Any:
    """``x = x + x`` on ``count`` float32 at ``address`` through the aclnn primitives (Add, which every
    backend binds); returns the executor."""
    backend = device.backend
    desc = TensorDesc.contiguous((count,), "float32", address)
    executor = backend.op_prepare("Add", [desc, desc], [desc], {"alpha": 1})
    if repeatable:
        backend.op_set_repeatable(executor)
    if launch:
        backend.op_launch(executor, 0, 0, stream.handle, {"node": node})
    return executor


# -- graph capture (15_model_running_instance__management.md) ----------------------------------------
def capture_model(device: Device) -> str:
    backend = graph_capture(device.backend)
    assert backend is not None
    origin, side, runner = device.create_stream(), device.create_stream(), device.create_stream()
    data = device.upload(np.ones(16, np.float32))
    fork, join = device.create_event(), device.create_event()
    backend.capture_begin(origin.handle)
    backend.event_record(fork.handle, origin.handle)
    backend.stream_wait_event(side.handle, fork.handle)
    expect(backend.capture_get_info(side.handle)[0] == CaptureStatus.ACTIVE,
           "a stream waiting on an event recorded in the capture did not join it")
    executor = _double(device, side, data.address, 16, "captured", repeatable=True)
    backend.event_record(join.handle, side.handle)
    backend.stream_wait_event(origin.handle, join.handle)
    model = backend.capture_end(origin.handle)
    seen = _read(device, runner, data, 64).view(np.float32)
    expect((seen == 1).all(), "work submitted during a capture ran instead of being stored")
    backend.model_execute(model, runner.handle)
    backend.model_execute(model, runner.handle)
    seen = _read(device, runner, data, 64).view(np.float32)
    expect((seen == 4).all(), f"two replays on one stream gave {seen[:2]}, expected 1 doubled twice")
    backend.model_destroy(model)
    backend.op_destroy(executor)
    return "origin, joined stream, replays on a third stream"


def capture_sync(device: Device) -> str:
    backend = graph_capture(device.backend)
    assert backend is not None
    origin, runner = device.create_stream(), device.create_stream()
    data = device.upload(np.ones(16, np.float32))
    backend.capture_begin(origin.handle)
    for call, what in ((origin.sync, "aclrtSynchronizeStream"), (lambda: origin.is_done, "aclrtStreamQuery")):
        error = expect_raises(BackendError, f"{what} of a capturing stream", call)
        expect(error.code == 107027, f"{what} of a capturing stream failed with {error.code}, expected 107027 (the "
                                     "stream is captured: api_error.cc, ApiErrorDecorator::StreamSynchronize)")
        expect(backend.capture_get_info(origin.handle)[0] == CaptureStatus.ACTIVE,
               f"{what} of a capturing stream ended or invalidated the capture; the runtime refuses the call "
               "before doing anything and the capture goes on")
    executor = _double(device, origin, data.address, 16, "captured after the refused sync", repeatable=True)
    model = backend.capture_end(origin.handle)
    backend.model_execute(model, runner.handle)
    seen = _read(device, runner, data, 64).view(np.float32)
    expect((seen == 2).all(), f"the capture that went on after a refused sync replayed to {seen[:2]}, expected 2")
    backend.model_destroy(model)
    backend.op_destroy(executor)
    return "sync and query refused with 107027; the capture ended and replayed"


def capture_blocks_sync_copies(device: Device) -> str:
    backend = graph_capture(device.backend)
    assert backend is not None
    sync: Any = device.backend  # memcpy_sync and memset_sync: capabilities.sync_copies
    origin, buffer, host = device.create_stream(), device.alloc(64), device.alloc_host(64)
    calls = {"aclrtMemset": lambda: sync.memset_sync(buffer.address, 3, 64),
             "aclrtMemcpy": lambda: sync.memcpy_sync(host.address, buffer.address, 64, MemcpyKind.DEVICE_TO_HOST)}
    # (mode, refused on the thread that began it, refused on another thread): IsCaptureModeSupport
    # for threads in the default GLOBAL exchange mode.
    for mode, here, elsewhere in ((CaptureMode.GLOBAL, True, True), (CaptureMode.THREAD_LOCAL, True, False),
                                  (CaptureMode.RELAXED, False, False)):
        backend.capture_begin(origin.handle, mode)
        try:
            for name, call in calls.items():
                for refused, where, outcome in ((here, "the capturing thread", _outcome(call)),
                                                (elsewhere, "another thread", _outcome_elsewhere(call))):
                    _expect_refusal(outcome, refused, f"{name} on {where} during a {mode.name} capture")
        finally:
            backend.model_destroy(backend.capture_end(origin.handle))
    for call in calls.values():
        call()
    return "synchronous copies refused with 107030 under GLOBAL (any thread) and THREAD_LOCAL (its thread) captures"


def _outcome(call: Any) -> Any:
    try:
        return call()
    except BackendError as error:
        return error


def _outcome_elsewhere(call: Any) -> Any:
    outcome: list[Any] = [ConformanceFailure("the call on another thread did not finish")]
    thread = threading.Thread(target=lambda: outcome.__setitem__(0, _outcome(call)), daemon=True)
    thread.start()
    thread.join(TIMEOUT)
    return outcome[0]


def _expect_refusal(outcome: Any, refused: bool, what: str) -> None:
    if isinstance(outcome, ConformanceFailure):
        raise outcome
    if not refused:
        expect(not isinstance(outcome, BackendError), f"{what} was refused ({outcome}); the runtime allows it "
                                                     "(context_aclgraph.cc, Context::IsCaptureModeSupport)")
        return
    expect(isinstance(outcome, BackendError), f"{what} succeeded; the runtime refuses it with 107030 "
                                              "(context_aclgraph.cc, Context::IsCaptureModeSupport)")
    expect(outcome.code == 107030, f"{what} was refused with {outcome.code}, expected 107030 "
                                   "(ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT)")


def captured_event_sync(device: Device) -> str:
    backend = graph_capture(device.backend)
    assert backend is not None
    origin, runner, event = device.create_stream(), device.create_stream(), device.create_event()
    backend.capture_begin(origin.handle)
    backend.event_record(event.handle, origin.handle)
    model = backend.capture_end(origin.handle)
    try:
        error = expect_raises(BackendError, "a sync of an event whose latest record is inside a captured model",
                              event.sync, TIMEOUT)
        expect(error.code == 107000, f"the sync was refused with {error.code}, expected 107000 (api_error.cc, "
                                     "ApiErrorDecorator::EventSynchronize: Event::IsEventInModel)")
        backend.model_execute(model, runner.handle)
        runner.record(event)  # a record outside the model ends the refusal
        event.sync(TIMEOUT)
    finally:
        runner.sync(TIMEOUT)
        backend.model_destroy(model)
    return "refused with 107000; synchronizable again once recorded outside the model"


def capture_default_stream(device: Device) -> str:
    backend = graph_capture(device.backend)
    assert backend is not None
    error = expect_raises(BackendError, "aclmdlRICaptureBegin of the default stream (NULL)", backend.capture_begin,
                          None)
    expect(error.code == 100000, f"capturing the default stream was refused with {error.code}, expected 100000 "
                                 "(model_ri.cpp, aclmdlRICaptureBeginImpl: a NULL stream is an invalid parameter)")
    return "refused with 100000"


# -- the stream-ordered allocator (11-10_ordered_stream_memory_allocation.md; soma sources) --------
_POOL_BLOCK = 2 << 20  # DEVICE_POOL_MIN_BLOCK_SIZE (stream_mem_pool.hpp)


def mempool_order(device: Device) -> str:
    """MallocAsync's block serves the stream's later work; FreeAsync gives it back to the pool on
    the host at once but cached: it takes room until TrimTo, after the frees ran."""
    allocator = stream_ordered_alloc(device.backend)
    assert allocator is not None  # the check needs the capability
    stream, host = device.create_stream(), device.alloc_host(64)
    pool = allocator.mem_pool_create(_POOL_BLOCK)
    try:
        expect(allocator.mem_pool_malloc_async(pool, 0, stream.handle) == 0, "0 bytes must allocate nothing (0)")
        with latch(stream):  # nothing below runs before the checks made while it holds
            address = allocator.mem_pool_malloc_async(pool, 64, stream.handle)
            used = allocator.mem_pool_get_attr(pool, MemPoolAttr.USED_MEM_CURRENT)
            expect(used == _POOL_BLOCK, f"64 bytes must count as one 2 MB block in use, the pool says {used}")
            device.backend.memset_async(address, 3, 64, stream.handle)
            device.backend.memcpy_async(host.address, address, 64, MemcpyKind.DEVICE_TO_HOST, stream.handle)
            allocator.mem_pool_free_async(address, stream.handle)
            used = allocator.mem_pool_get_attr(pool, MemPoolAttr.USED_MEM_CURRENT)
            reserved = allocator.mem_pool_get_attr(pool, MemPoolAttr.RESERVED_MEM_CURRENT)
            expect(used == 0 and reserved == _POOL_BLOCK, f"after FreeAsync the block must be back (0 in use) but "
                                                          f"cached ({_POOL_BLOCK} reserved); the pool says {used} in "
                                                          f"use, {reserved} reserved")
            full = expect_raises(BackendError, "a freed block is not reused before aclrtMemPoolTrimTo",
                                 allocator.mem_pool_malloc_async, pool, 64, stream.handle)
            expect(full.code == 507000, f"a full pool must be 507000 (RT_ERROR_MEM_POOL_ALLOC), got {full.code}")
        stream.sync(TIMEOUT)
        seen = host.numpy(np.uint8, (64,))
        expect((seen == 3).all(), f"work queued between MallocAsync and FreeAsync must see the block, read {seen[:4]}")
        allocator.mem_pool_trim_to(pool, 0)
        reserved = allocator.mem_pool_get_attr(pool, MemPoolAttr.RESERVED_MEM_CURRENT)
        expect(reserved == 0, f"TrimTo(0) after the free ran must release the block, {reserved} bytes stay")
        allocator.mem_pool_free_async(allocator.mem_pool_malloc_async(pool, 64, stream.handle), stream.handle)
        stream.sync(TIMEOUT)
    finally:
        allocator.mem_pool_destroy(pool)
        host.close()
    return "usable in stream order; freed blocks cached (507000 when full) until TrimTo"


def _adds_int64(device: Device, stream: Any, source: int, target: int, other: int) -> Any:
    """``target = source + other`` on one int64 through the aclnn two-phase primitives (repeatable)."""
    backend = device.backend
    executor = backend.op_prepare("Adds", [TensorDesc.contiguous((), "int64", source)],
                                  [TensorDesc.contiguous((), "int64", target)], {"other": other})
    backend.op_set_repeatable(executor)
    backend.op_launch(executor, 0, 0, stream, {"node": "conformance-count"})
    return executor


def while_task(device: Device) -> str:
    """A WHILE task tests its 64-bit condition before every run of its sub-model (0: never runs),
    and ASSIGN_DEFAULT sets it again at the start of every execution of the model."""
    backend = conditional_models(device.backend)
    assert backend is not None  # the check needs the capability
    origin, body_stream = device.create_stream(), device.create_stream()
    total, scratch, zero = (device.upload(np.zeros((), np.int64)) for _ in range(3))
    executors: list[Any] = []
    try:
        for start in (0, 3):
            backend.capture_begin(origin.handle)
            _, model = backend.capture_get_info(origin.handle)
            handle = backend.cond_handle_create(model, start, True)
            condition = backend.cond_handle_get_cond_ptr(handle)
            (body,) = backend.add_cond_task(handle, CondTaskType.WHILE, 1, origin.handle)
            backend.capture_to_model_begin(body_stream.handle, body)
            executors.append(_adds_int64(device, body_stream.handle, total.address, scratch.address, 1))
            backend.memcpy_async(total.address, scratch.address, 8, MemcpyKind.DEVICE_TO_DEVICE, body_stream.handle)
            if start:  # one off the condition per run
                executors.append(_adds_int64(device, body_stream.handle, condition, scratch.address, -1))
                backend.memcpy_async(condition, scratch.address, 8, MemcpyKind.DEVICE_TO_DEVICE, body_stream.handle)
            else:  # the condition to 0: a backend that runs the body before testing must not loop on -1
                backend.memcpy_async(condition, zero.address, 8, MemcpyKind.DEVICE_TO_DEVICE, body_stream.handle)
            backend.capture_end(body_stream.handle)
            model = backend.capture_end(origin.handle)
            try:
                for replays in (1, 2):
                    backend.model_execute(model, origin.handle)
                    origin.sync(TIMEOUT)
                    counted = int(_read(device, origin, total, 8).view(np.int64)[0])
                    expect(counted == start * replays,  # start 0 runs first: the total is 0 until start 3
                           f"a WHILE task whose condition starts at {start} (ASSIGN_DEFAULT) must run its body "
                           f"{start} times per execution: after {replays} executions the body ran {counted} times in "
                           "all")
            finally:
                backend.model_destroy(model)
    finally:
        for executor in executors:
            device.backend.op_destroy(executor)
        for buffer in (total, scratch, zero):
            buffer.close()
    return "tested before each run (0: never), ASSIGN_DEFAULT set at every execution"


_API = "docs/zh/api_ref/"
_API_ERROR = "src/runtime/api/impl/api_error.cc"

RULES: tuple[Check, ...] = (
    Check("event_kinds", "reusable events re-record; single-use ones need aclrtResetEvent (07)", event_kinds,
          ("reusable_events",), doc=f"{_API}07_event_management.md (aclrtCreateEventExWithFlag, aclrtResetEvent)"),
    Check("never_recorded_wait", "a wait on a never-recorded event is an invalid value (event.md 4.2)",
          never_recorded_wait, doc="docs/zh/design/modules/event/event.md 4.2"),
    Check("event_limit", "events per device are limited by the product (07)", event_limit,
          doc=f"{_API}07_event_management.md (aclrtCreateEvent* constraints)"),
    Check("zero_timeout", "a 0 ms *WithTimeout synchronize is 107000; polls are queries (06, 07; api_error.cc)",
          zero_timeout, doc=f"{_API}06_stream_management.md (aclrtSynchronizeStreamWithTimeout), "
                            "07_event_management.md (aclrtSynchronizeEventWithTimeout): -1 or > 0",
          source=f"{_API_ERROR}: ApiErrorDecorator::StreamSynchronize, ApiErrorDecorator::EventSynchronize "
                 "(0 is RT_ERROR_INVALID_VALUE)"),
    Check("stream_limit", "default streams count against the streams per device (06; context.cc)", stream_limit,
          doc=f"{_API}06_stream_management.md (aclrtCreateStream constraints: N = maximum - existing streams, "
              "the default stream included)",
          source="src/runtime/core/src/context/context.cc: Context::Setup (a default stream per context)"),
    Check("continue_on_failure", "by default a stream runs the tasks after a failed one (06)", continue_on_failure,
          doc=f"{_API}06_stream_management.md (aclrtSetStreamFailureMode)"),
    Check("stop_on_failure", "ACL_STOP_ON_FAILURE drops queued work and refuses new work (06)", stop_on_failure,
          ("stop_on_failure",), doc=f"{_API}06_stream_management.md (aclrtSetStreamFailureMode)"),
    Check("stream_abort", "aclrtStreamAbort releases a stream blocked on a stopped one (06)", stream_abort,
          ("stop_on_failure", "stream_abort"), doc=f"{_API}06_stream_management.md (aclrtStreamAbort)"),
    Check("host_threads", "one callback thread per context: host functions of a device never overlap (12; "
          "api_impl.cc)", host_threads, ("host_callbacks",),
          doc=f"{_API}12_execution_control.md (aclrtLaunchHostFunc: the thread registered for the stream)",
          source="src/runtime/api/impl/api_impl.cc: ApiImpl::LaunchHostFunc (Context::CreateContextCallBackThread)"),
    Check("host_function_calls", "no allocation, free, synchronize or launch from inside a host function (12)",
          host_function_calls, ("host_callbacks",),
          doc=f"{_API}12_execution_control.md (aclrtLaunchHostFunc, aclrtLaunchCallback constraints)"),
    Check("d2d_alignment", "device-to-device copies need 64-byte aligned addresses (acl_rt.h)", d2d_alignment,
          doc="include/external/acl/acl_rt.h (aclrtMemcpyAsync restriction)"),
    Check("async_host_copy", "asynchronous host-to-host copies are not supported (11-03)", async_host_copy,
          doc=f"{_API}11-03_memory_copy_and_set.md (aclrtMemcpyAsync constraints)"),
    Check("use_after_free_code", "a use after free is not reported as 507053, a memory UCE (25-01)",
          use_after_free_code, doc=f"{_API}25-01_aclError.md"),
    Check("executor_destroy", "destroying an executor whose launch may run is caught (acl_meta.h)",
          executor_destroy, doc="aclnn acl_meta.h (aclDestroyAclOpExecutor)"),
    Check("sanitizer_padding", "kernels may touch 32 bytes past an output: an unpadded neighbour is caught (11-01)",
          sanitizer_padding, ("sanitizer",), doc=f"{_API}11-01_device_memory_malloc_and_free.md (aclrtMalloc)"),
    Check("capture_model", "aclmdlRI capture: origin, joins, replay on one stream (15)",
          capture_model, ("graph_capture",), doc=f"{_API}15_model_running_instance__management.md"),
    Check("capture_sync", "synchronizing a capturing stream is 107027 and leaves the capture intact (15; "
          "api_error.cc)", capture_sync, ("graph_capture",),
          doc=f"{_API}15_model_running_instance__management.md (aclmdlRICaptureBegin)",
          source=f"{_API_ERROR}: ApiErrorDecorator::StreamSynchronize, ApiErrorDecorator::StreamQuery "
                 "(RT_ERROR_STREAM_CAPTURED before anything is done)"),
    Check("op_wait_timeout", "a wait blocked past aclrtSetOpWaitTimeout fails with 107020 at the next synchronize; "
          "none by default (07; task_manager.cc)", op_wait_timeout,
          doc=f"{_API}07_event_management.md (aclrtSetOpWaitTimeout)",
          source="src/runtime/core/src/task/task_info/task_manager.cc: SetStarsResultCommon (the timeout bit is "
                 "TS_ERROR_TASK_TIMEOUT, reported as 107020 by src/runtime/core/src/common/errcode_manage.cc)"),
    Check("capture_blocks_sync_copies", "synchronous copies are 107030 while a GLOBAL capture (any thread) or a "
          "THREAD_LOCAL one (its thread) is open (context_aclgraph.cc)", capture_blocks_sync_copies,
          ("graph_capture", "sync_copies"),
          doc=f"{_API}15_model_running_instance__management.md (aclmdlRICaptureBegin modes)",
          source="src/runtime/feature/aclgraph/context_aclgraph.cc: Context::IsCaptureModeSupport (checked by "
                 "ApiImpl::MemCopySync and ApiImpl::MemSetSync, src/runtime/api/impl/api_impl.cc)"),
    Check("captured_event_sync", "a sync of an event recorded inside a captured model is 107000 (api_error.cc)",
          captured_event_sync, ("graph_capture",), doc=f"{_API}07_event_management.md (aclrtSynchronizeEvent)",
          source=f"{_API_ERROR}: ApiErrorDecorator::EventSynchronize (Event::IsEventInModel, "
                 "src/runtime/core/src/event/event.cc)"),
    Check("capture_default_stream", "the default stream cannot be captured: 100000 (model_ri.cpp)",
          capture_default_stream, ("graph_capture",),
          doc=f"{_API}15_model_running_instance__management.md (aclmdlRICaptureBegin)",
          source="src/acl/aclrt_impl/model_ri.cpp: aclmdlRICaptureBeginImpl (a NULL stream is ACL_ERROR_INVALID_PARAM; "
                 "the runtime refuses the default stream too: ApiImpl::StreamBeginCapture, "
                 "src/runtime/feature/aclgraph/v100/api_impl_aclgraph.cc)"),
    Check("mempool_order", "MallocAsync serves the stream's later work; FreeAsync caches the block until "
          "TrimTo (11-10; soma)", mempool_order, ("stream_ordered_alloc",),
          doc=f"{_API}11-10_ordered_stream_memory_allocation.md (aclrtMemPoolMallocAsync, aclrtMemPoolFreeAsync, "
              "aclrtMemPoolTrimTo)",
          source="src/runtime/api/impl/api_impl_soma.cc: ApiImplSoma::MemPoolMallocAsync, MemPoolFreeAsync (host "
                 "bookkeeping now, SomaMemMng task in stream order); src/runtime/feature/soma/stream_mem_pool.cc: "
                 "SegmentManager::TryToReuse (reuses nothing), SegmentManager::TrimTo"),
    Check("while_task", "a WHILE conditional task tests its condition before each run of its sub-model; "
          "ASSIGN_DEFAULT sets it at every execution (15; aclgraph_cond_task.cc)", while_task,
          ("conditional_models",),
          doc=f"{_API}15_model_running_instance__management.md (aclmdlRICondHandleCreate, aclmdlRIAddCondTask, "
              "aclmdlRICaptureToModelRIBegin); include/external/acl/acl_rt.h (aclmdlRICondTaskParams)",
          source="src/runtime/core/src/task/stars_cond_isa_helper.cc: ConstructWhileCondSetupBranch (64-bit load, "
                 "BNE before the first run); src/runtime/core/src/task/task_info/cond_op/aclgraph_cond_task.cc: "
                 "ConstructCaptureConditionJumpBackFc (BEQ 0 ends the loop); src/runtime/core/inc/cond_handle/"
                 "cond_handle.hpp (RT_COND_HANDLE_ASSIGN_DEFAULT: the default at each model execution)"),
)

#: Every check the kit runs: the backend contract, then the documented runtime rules.
CHECKS: tuple[Check, ...] = CONTRACT + RULES
