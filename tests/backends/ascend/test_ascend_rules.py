"""The documented runtime rules through the Ascend binding, over the fake CANN (which follows the
hicann/runtime docs on its own, not the simulator's code)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import numpy as np
import pytest

import aclpipe
from aclpipe import BackendError, DeviceFault, Pipeline
from aclpipe.backends.protocol import CaptureStatus, MemcpyKind
from aclpipe.graph import Graph
from aclpipe.runtime import Device
from aclpipe.tensor import TensorDesc
from aclpipe.testing import latch

TIMEOUT = 10.0


@pytest.fixture
def product(request: pytest.FixtureRequest, fake_lib: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Device]:
    """An ascend device on the fake pretending to be ``request.param`` (FAKE_CANN_PRODUCT)."""
    monkeypatch.setenv("FAKE_CANN_PRODUCT", request.param)
    device = aclpipe.open_device("ascend:0")
    yield device
    device.close()


def _double(device: Device, stream, address: int, count: int, *, repeatable: bool = True):
    backend = device.backend
    desc = TensorDesc.contiguous((count,), "float32", address)
    executor = backend.op_prepare("Add", [desc, desc], [desc], {"alpha": 1})
    if repeatable:
        backend.op_set_repeatable(executor)
    backend.op_launch(executor, 0, 0, stream.handle)
    return executor


def _fail_a_copy(device: Device, stream, target) -> None:
    """A D2D copy whose source is freed under it: a DMA error when the stream gets there."""
    backend = device.backend
    source = backend.mem_alloc(target.nbytes)
    with latch(stream):
        backend.memcpy_async(target.address, source, target.nbytes, MemcpyKind.DEVICE_TO_DEVICE, stream.handle)
        backend.mem_free(source)


# -- events (07_event_management.md, design/modules/event/event.md) -------------------------------
def test_pipeline_events_are_reusable_and_single_use_ones_need_a_reset(ascend: Device, hooks):
    hooks.clear_trace()
    first, second = ascend.create_stream(), ascend.create_stream()
    reusable, single = ascend.create_event(), ascend.create_event(reusable=False)
    assert "aclrtCreateEventExWithFlag 0" in hooks.trace() and "aclrtCreateEventWithFlag 0" in hooks.trace()
    for _ in range(3):
        first.record(reusable)
        second.wait(reusable)
    first.record(single)
    second.wait(single)
    with pytest.raises(BackendError, match="aclrtResetEvent") as caught:
        first.record(single)
    assert caught.value.code == 107000
    single.reset(second)
    first.record(single)
    second.sync(TIMEOUT)
    with pytest.raises(BackendError, match="aclrtCreateEventExWithFlag"):
        reusable.reset(second)


def test_a_wait_on_a_never_recorded_event_is_refused(ascend: Device):
    with pytest.raises(BackendError, match="never recorded") as caught:
        ascend.create_stream().wait(ascend.create_event())
    assert caught.value.code == 107000


@pytest.mark.parametrize("product", ["310p"], indirect=True)
def test_an_inference_card_has_1023_events_and_the_limit_is_enforced(product: Device):
    assert "Atlas inference card" in product.describe()
    assert product.capabilities.max_events == 1023 and not product.capabilities.stream_abort
    stream, events = product.create_stream(), []
    with pytest.raises(BackendError) as caught:
        for _ in range(1024):
            events.append(product.create_event())
            stream.record(events[-1])  # aclrtCreateEventExWithFlag takes its resource at the first record
    assert caught.value.code == 207007 and len(events) == 1024
    stream.sync(TIMEOUT)


# -- synchronize timeouts (api_error.cc, ApiErrorDecorator::StreamSynchronize/EventSynchronize) --------
def test_a_zero_timeout_is_refused_by_the_runtime_and_polls_use_queries(any_ascend: Device):
    backend, stream = any_ascend.backend, any_ascend.create_stream()
    event = stream.record()
    stream.sync(TIMEOUT)
    runtime = backend.library.runtime
    if backend.library.has_stream_sync_timeout:  # the fake itself, below the binding
        assert runtime.aclrtSynchronizeStreamWithTimeout(stream.handle.handle, 0) == 107000
        assert runtime.aclrtSynchronizeEventWithTimeout(event.handle.handle, 0) == 107000
        assert runtime.aclrtSynchronizeStreamWithTimeout(stream.handle.handle, 1) == 0
    for call, handle in ((backend.stream_sync, stream.handle), (backend.event_sync, event.handle)):
        with pytest.raises(BackendError) as caught:
            call(handle, 0)
        assert caught.value.code == 107000
    with pytest.raises(BackendError) as caught:
        backend.device_sync(0)
    assert caught.value.code == 107000
    with latch(stream):
        held = stream.record()
        with pytest.raises(DeviceFault) as caught:
            stream.sync(0)
        assert caught.value.code == 507046
        with pytest.raises(DeviceFault) as caught:
            held.sync(0)
        assert caught.value.code == 507047
    stream.sync(TIMEOUT)
    stream.sync(1e-4)  # idle: a sub-millisecond timeout is 1 ms, not the refused 0
    held.sync(1e-4)
    held.sync(0)
    any_ascend.sync(1e-4)


# -- streams (06_stream_management.md) -----------------------------------------------------------
def test_continue_on_failure_runs_later_work(any_ascend: Device):
    stream, target, later = any_ascend.create_stream(), any_ascend.alloc(64), any_ascend.alloc(64)
    _fail_a_copy(any_ascend, stream, target)
    stream.memset(later, 0x5A)
    with pytest.raises(DeviceFault) as caught:
        stream.sync(TIMEOUT)
    assert caught.value.code == 507013  # a DMA error, not 507053 (an uncorrectable memory error)
    assert (any_ascend.download(later, "uint8", (64,)) == 0x5A).all()


def test_stop_on_failure_drops_and_refuses_and_abort_releases_waiters(ascend: Device):
    producer, consumer = ascend.create_stream(failure_mode="stop"), ascend.create_stream()
    assert consumer.failure_mode == "stop"  # the whole context
    target, later = ascend.alloc(64), ascend.upload(np.full(64, 0x11, np.uint8))
    with latch(producer):
        _fail_a_copy(ascend, producer, target)
        producer.memset(later, 0x5A)
        consumer.wait(producer.record())
    with pytest.raises(DeviceFault):
        producer.sync(TIMEOUT)
    with pytest.raises(BackendError, match="ACL_STOP_ON_FAILURE"):
        producer.memset(later, 0x77)
    with pytest.raises(DeviceFault) as caught:
        consumer.sync(0.2)
    assert caught.value.code == 507046  # blocked on a record the stopped stream dropped
    consumer.abort()
    consumer.sync(TIMEOUT)
    producer.renew()
    assert (ascend.download(later, "uint8", (64,)) == 0x11).all()


def _streams_until_refused(runtime, ffi) -> list:
    handles = []
    while True:
        handle = ffi.new("aclrtStream *")
        code = runtime.aclrtCreateStreamWithConfig(handle, 0, 0)
        if code:
            assert code == 207008
            return handles
        handles.append(handle[0])


@pytest.mark.parametrize("product", ["200i-a2"], indirect=True)
def test_the_default_streams_of_each_context_count_against_the_stream_limit(product: Device):
    """06_stream_management.md, aclrtCreateStream: N = the maximum - the streams that exist, the
    default stream included; one per context (context.cc, Context::Setup)."""
    from aclpipe.backends.ascend.cdefs import ffi

    capabilities = product.capabilities
    assert (capabilities.device_streams, capabilities.default_streams, capabilities.max_streams) == (512, 2, 510)
    runtime = product.backend.library.runtime
    handles = _streams_until_refused(runtime, ffi)  # below the binding: the fake's own count
    assert len(handles) == 510  # aclrtSetDevice's primary context and the binding's own
    assert runtime.aclrtDestroyStream(handles.pop()) == 0
    context = ffi.new("aclrtContext *")
    assert runtime.aclrtCreateContext(context, 0) == 0  # one more context: one more default stream
    try:
        assert _streams_until_refused(runtime, ffi) == []
    finally:
        assert runtime.aclrtDestroyContext(context[0]) == 0
        assert runtime.aclrtSetCurrentContext(product.backend._context) == 0
    for handle in handles:
        assert runtime.aclrtDestroyStream(handle) == 0


@pytest.mark.parametrize("product", ["310p"], indirect=True)
def test_abort_is_refused_where_the_product_lacks_it(product: Device):
    with pytest.raises(BackendError, match="cannot abort"):
        product.create_stream().abort()
    with pytest.raises(BackendError) as caught:
        product.backend.stream_abort(product.create_stream().handle)
    assert caught.value.code == 207000


def test_host_functions_of_two_streams_run_one_at_a_time_on_the_contexts_thread(any_ascend: Device):
    """ApiImpl::LaunchHostFunc (src/runtime/api/impl/api_impl.cc) makes one callback thread per
    context; the report-thread fallback has one per device too."""
    assert any_ascend.capabilities.host_thread_per_context
    first, second, order, threads = any_ascend.create_stream(), any_ascend.create_stream(), [], set()
    started, overlapped = threading.Event(), threading.Event()

    def hold() -> None:
        threads.add(threading.get_ident())
        order.append("first")
        started.set()
        overlapped.wait(0.2)

    first.host_func(hold)
    first.host_func(lambda: order.append("first again"))
    assert started.wait(TIMEOUT)
    second.host_func(lambda: (threads.add(threading.get_ident()), overlapped.set(), order.append("second")))
    first.sync(TIMEOUT)
    second.sync(TIMEOUT)
    assert order == ["first", "second", "first again"] and len(threads) == 1


def test_a_host_function_may_not_allocate_free_synchronize_or_launch(any_ascend: Device):
    """12_execution_control.md: the binding refuses with HazardError before making the context
    current on the runtime's thread, and the fake refuses the C calls themselves."""
    from aclpipe.backends.ascend.cdefs import ffi
    from aclpipe.errors import HazardError

    backend = any_ascend.backend
    stream, other = any_ascend.create_stream(), any_ascend.create_stream()
    address, runtime, seen, codes = backend.mem_alloc(64), backend.library.runtime, [], {}
    calls = {"alloc": lambda: backend.mem_alloc(64), "free": lambda: backend.mem_free(address),
             "sync": lambda: other.sync(TIMEOUT), "memset": lambda: backend.memset_async(address, 0, 64, other.handle)}

    def calls_back_in() -> None:
        for call in calls.values():
            try:
                call()
            except HazardError as error:
                seen.append(error)
        codes["context"] = runtime.aclrtSetCurrentContext(backend._context)  # what the binding no longer does
        pointer = ffi.new("void **")
        codes["aclrtMalloc"] = runtime.aclrtMalloc(pointer, 64, 0)
        codes["aclrtFree"] = runtime.aclrtFree(ffi.cast("void *", address))
        codes["aclrtSynchronizeStream"] = runtime.aclrtSynchronizeStream(other.handle.handle)
        codes["aclrtMemsetAsync"] = runtime.aclrtMemsetAsync(ffi.cast("void *", address), 64, 0, 64,
                                                             other.handle.handle)

    stream.host_func(calls_back_in)
    stream.sync(TIMEOUT)
    assert len(seen) == len(calls) and all("from inside host function" in str(error) for error in seen)
    assert codes == {"context": 0, "aclrtMalloc": 107000, "aclrtFree": 107000, "aclrtSynchronizeStream": 107000,
                     "aclrtMemsetAsync": 107000}
    backend.mem_free(address)


# -- memory (11-01, 11-03, acl_rt.h) ---------------------------------------------------------------
def test_device_memory_is_64_byte_aligned_and_d2d_copies_need_it(any_ascend: Device):
    stream = any_ascend.create_stream()
    source, target = any_ascend.alloc(256), any_ascend.alloc(256)
    assert source.address % 64 == 0 and target.address % 64 == 0
    with pytest.raises(BackendError) as caught:
        any_ascend.backend.memcpy_async(target.address, source.address + 32, 64, MemcpyKind.DEVICE_TO_DEVICE,
                                        stream.handle)
    assert caught.value.code == 107008
    stream.memcpy(target, source, 64, dst_offset=64, src_offset=128)
    stream.sync(TIMEOUT)


def test_asynchronous_host_to_host_copies_are_not_supported(any_ascend: Device):
    with pytest.raises(BackendError) as caught:
        any_ascend.create_stream().memcpy(any_ascend.alloc_host(64), any_ascend.alloc_host(64))
    assert caught.value.code == 207000


def test_kernels_touch_the_32_bytes_past_their_outputs(ascend: Device):
    stream = ascend.create_stream()
    block = ascend.upload(np.zeros(64, np.float32))
    _double(ascend, stream, block.address, 16)  # 64 bytes: may touch up to byte 96
    stream.sync(TIMEOUT)
    seen = ascend.download(block, "float32", (64,))
    assert (seen[:16] == 0).all() and np.isnan(seen[16:24]).all() and (seen[24:] == 0).all()


def test_destroying_an_executor_whose_launch_is_queued_fails_that_launch(ascend: Device):
    stream, data = ascend.create_stream(), ascend.upload(np.ones(16, np.float32))
    with latch(stream):
        executor = _double(ascend, stream, data.address, 16)
        ascend.backend.op_destroy(executor)
    with pytest.raises(DeviceFault) as caught:
        stream.sync(TIMEOUT)
    assert caught.value.code == 507042 and "use after free" in str(caught.value)


# -- graph capture (15_model_running_instance__management.md) --------------------------------------
def test_capture_from_an_origin_with_a_joined_stream_replays_on_one_stream(ascend: Device):
    backend = ascend.backend
    assert ascend.capabilities.graph_capture
    origin, side, runner = ascend.create_stream(), ascend.create_stream(), ascend.create_stream()
    data = ascend.upload(np.ones(16, np.float32))
    fork, join = ascend.create_event(), ascend.create_event()
    backend.capture_begin(origin.handle)
    backend.event_record(fork.handle, origin.handle)
    backend.stream_wait_event(side.handle, fork.handle)
    assert backend.capture_get_info(side.handle)[0] == CaptureStatus.ACTIVE
    executor = _double(ascend, side, data.address, 16)
    backend.event_record(join.handle, side.handle)
    backend.stream_wait_event(origin.handle, join.handle)
    model = backend.capture_end(origin.handle)
    assert backend.capture_get_info(origin.handle) == (CaptureStatus.NONE, None)
    for _ in range(3):
        backend.model_execute(model, runner.handle)
    runner.sync(TIMEOUT)
    assert (ascend.download(data, "float32", (16,)) == 8).all()
    backend.model_destroy(model)
    backend.op_destroy(executor)


def test_an_unjoined_stream_fails_the_capture(ascend: Device):
    backend = ascend.backend
    origin, side = ascend.create_stream(), ascend.create_stream()
    data = ascend.upload(np.ones(16, np.float32))
    fork = ascend.create_event()
    backend.capture_begin(origin.handle)
    backend.event_record(fork.handle, origin.handle)
    backend.stream_wait_event(side.handle, fork.handle)
    executor = _double(ascend, side, data.address, 16)
    with pytest.raises(BackendError) as caught:
        backend.capture_end(origin.handle)
    assert caught.value.code == 107025
    backend.op_destroy(executor)


def test_a_sync_or_query_of_a_capturing_stream_is_refused_and_the_capture_goes_on(ascend: Device):
    """api_error.cc, ApiErrorDecorator::StreamSynchronize/StreamQuery: 107027 before anything is done."""
    backend = ascend.backend
    origin, runner = ascend.create_stream(), ascend.create_stream()
    data = ascend.upload(np.ones(16, np.float32))
    event = ascend.create_event()
    backend.capture_begin(origin.handle)
    backend.event_record(event.handle, origin.handle)
    for call, code in ((lambda: origin.sync(TIMEOUT), 107027), (lambda: origin.is_done, 107027),
                       (lambda: event.sync(TIMEOUT), 107028), (lambda: event.is_done, 107028)):
        with pytest.raises(BackendError) as caught:
            call()
        assert caught.value.code == code
        assert backend.capture_get_info(origin.handle)[0] == CaptureStatus.ACTIVE
    executor = _double(ascend, origin, data.address, 16)
    model = backend.capture_end(origin.handle)
    backend.model_execute(model, runner.handle)
    runner.sync(TIMEOUT)
    assert (ascend.download(data, "float32", (16,)) == 2).all()
    backend.model_destroy(model)
    backend.op_destroy(executor)


def test_a_task_group_is_updated_in_stream_order(ascend: Device):
    backend = ascend.backend
    origin, updater = ascend.create_stream(), ascend.create_stream()
    first, second = ascend.upload(np.ones(16, np.float32)), ascend.upload(np.full(16, 3, np.float32))
    backend.capture_begin(origin.handle)
    backend.capture_task_group_begin(origin.handle)
    old = _double(ascend, origin, first.address, 16)
    group = backend.capture_task_group_end(origin.handle)
    model = backend.capture_end(origin.handle)
    backend.capture_task_update_begin(updater.handle, group)
    new = _double(ascend, updater, second.address, 16)
    backend.capture_task_update_end(updater.handle)
    updater.sync(TIMEOUT)
    backend.model_execute(model, origin.handle)
    origin.sync(TIMEOUT)
    assert (ascend.download(first, "float32", (16,)) == 1).all()
    assert (ascend.download(second, "float32", (16,)) == 6).all()
    backend.model_destroy(model)
    for executor in (old, new):
        backend.op_destroy(executor)


@pytest.mark.parametrize("product", ["200i-a2"], indirect=True)
def test_a_product_without_capture_says_so(product: Device):
    assert not product.capabilities.graph_capture
    assert product.capabilities.max_streams <= 512


# -- the pipeline on the binding ---------------------------------------------------------------------
def _graph() -> Graph:
    g = Graph("chain")
    x = g.input("x", shape=(4, 16))
    g.output("y", g.relu(g.add(g.relu(x), x)))
    return g


def test_a_static_workspace_pipeline_replays_captured_models(ascend: Device, hooks):
    graph = _graph()
    x = np.arange(64, dtype=np.float32).reshape(4, 16) - 30

    async def run() -> list[np.ndarray]:
        async with Pipeline(graph, ascend, streams=2, depth=2, workspace="static") as pipe:
            results = [(await pipe.run(x=x))["y"] for _ in range(4)]
            assert all(slot.graph is not None for entry in pipe._res.cache for slot in entry.program.slots)
            return results

    hooks.clear_trace()
    for result in anyio.run(run):
        np.testing.assert_allclose(result, np.maximum(np.maximum(x, 0) + x, 0))
    assert any(line.startswith("aclmdlRICaptureEnd") for line in hooks.trace())


@pytest.mark.parametrize("product", ["200i-a2"], indirect=True)
def test_without_capture_a_run_walks_each_slots_launch_table(product: Device):
    """A pool pins one workspace per stream for the program, so a run is one call walking the
    slot's rows (in C), even where the product cannot capture."""
    g = Graph("softmaxes")
    x = g.input("x", shape=(4, 16))
    g.output("y", g.relu(g.softmax(g.add(x, x), dim=-1)))
    x_value = np.linspace(-3, 3, 64, dtype=np.float32).reshape(4, 16)

    async def run() -> list[np.ndarray]:
        async with Pipeline(g, product, streams=2, depth=2, workspace="pool") as pipe:
            results = [(await pipe.run(x=x_value))["y"] for _ in range(4)]
            (program,) = [entry.program for entry in pipe._res.cache]
            assert program.pinned and all(slot.graph is None and slot.body is not None and slot.body.native
                                          for slot in program.slots)
            return results

    doubled = 2 * x_value
    expected = np.exp(doubled - doubled.max(-1, keepdims=True))
    for result in anyio.run(run):
        np.testing.assert_allclose(result, expected / expected.sum(-1, keepdims=True), rtol=1e-5)


# -- op execute timeout (12_execution_control.md, aclrtSetOpExecuteTimeOut[V2]) ----------------------
@pytest.mark.parametrize("product, requested, effective", [
    ("a2", None, 1091.0), ("310p", None, 547.0), ("a2", 0, 1091.0), ("a2", 1, 4.295275), ("a2", 5, 8.59055),
], indirect=["product"])
def test_the_op_execute_timeout_is_the_products_default_or_what_the_runtime_rounded_to(
        product: Device, requested, effective, hooks):
    product.close()
    hooks.clear_trace()
    with aclpipe.open_device("ascend:0", op_execute_timeout=requested) as device:
        assert device.capabilities.op_execute_timeout == pytest.approx(effective)
    set_calls = [line for line in hooks.trace() if line.startswith("aclrtSetOpExecuteTimeOutV2")]
    assert len(set_calls) == (requested is not None)


def test_a_negative_op_execute_timeout_is_refused_and_leaves_nothing_open(fake_lib: Path, hooks):
    hooks.clear_trace()
    with pytest.raises(ValueError, match="op_execute_timeout must be >= 0"):
        aclpipe.open_device("ascend:0", op_execute_timeout=-1)
    trace = hooks.trace()
    assert trace[-1] == "aclFinalize" and "aclrtResetDevice 0" in trace


# -- op wait timeout (07_event_management.md, aclrtSetOpWaitTimeout) ---------------------------------
@pytest.fixture
def no_wait_timeout_after(fake_lib: Path) -> Iterator[None]:
    """aclrtSetOpWaitTimeout is process-wide: the fake keeps it for every later test unless reset."""
    yield
    with aclpipe.open_device("ascend:0", op_wait_timeout=0):
        pass


def test_a_wait_past_the_op_wait_timeout_fails_at_the_next_synchronize(no_wait_timeout_after, hooks):
    from aclpipe.testing import check_backend
    from aclpipe.testing.rules import RULES

    hooks.clear_trace()
    check = [check for check in RULES if check.name == "op_wait_timeout"]
    report = check_backend(lambda: aclpipe.open_device("ascend:0", op_wait_timeout=0.5), checks=check)
    assert report.ok and "a wait past 1 s failed with 107020" in report.rows[0].detail, str(report)
    assert "aclrtSetOpWaitTimeout 1" in hooks.trace()  # rounded up to whole seconds


@pytest.mark.parametrize("product", ["310p"], indirect=True)
def test_an_inference_card_refuses_the_op_wait_timeout(product: Device):
    product.close()
    with pytest.raises(BackendError) as caught:
        aclpipe.open_device("ascend:0", op_wait_timeout=5)
    assert caught.value.code == 207000 and "aclrtSetOpWaitTimeout" in str(caught.value)
    with pytest.raises(ValueError, match="op_wait_timeout"):
        aclpipe.open_device("ascend:0", op_wait_timeout=-1)


# -- capture modes, captured events, the default stream (context_aclgraph.cc, api_error.cc, model_ri.cpp)
def test_synchronous_copies_are_refused_with_107030_during_a_global_capture(ascend: Device):
    backend, origin = ascend.backend, ascend.create_stream()
    buffer, host = ascend.alloc(64), ascend.alloc_host(64)
    assert ascend.capabilities.sync_copies
    backend.capture_begin(origin.handle)
    refused: list[int] = []

    def elsewhere() -> None:
        try:
            backend.memset_sync(buffer.address, 1, 64)
        except BackendError as error:
            refused.append(error.code)

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join(TIMEOUT)
    with pytest.raises(BackendError) as caught:
        backend.memcpy_sync(host.address, buffer.address, 64, MemcpyKind.DEVICE_TO_HOST)
    backend.model_destroy(backend.capture_end(origin.handle))
    assert caught.value.code == 107030 and refused == [107030]
    backend.memset_sync(buffer.address, 9, 64)
    backend.memcpy_sync(host.address, buffer.address, 64, MemcpyKind.DEVICE_TO_HOST)
    assert (host.numpy("uint8", (64,)) == 9).all()


def test_upload_and_download_go_on_while_another_thread_captures(ascend: Device):
    backend, origin = ascend.backend, ascend.create_stream()
    backend.capture_begin(origin.handle)
    copied: list[np.ndarray] = []
    values = np.arange(8, dtype=np.float32)
    thread = threading.Thread(target=lambda: copied.append(ascend.download(ascend.upload(values), "float32", (8,))))
    thread.start()
    thread.join(TIMEOUT)
    backend.model_destroy(backend.capture_end(origin.handle))
    np.testing.assert_array_equal(copied[0], values)  # aclpipe never copies synchronously


def test_a_captured_event_cannot_be_synchronized_and_the_default_stream_cannot_be_captured(ascend: Device):
    backend, origin, runner = ascend.backend, ascend.create_stream(), ascend.create_stream()
    event = ascend.create_event()
    backend.capture_begin(origin.handle)
    backend.event_record(event.handle, origin.handle)
    model = backend.capture_end(origin.handle)
    with pytest.raises(BackendError) as caught:
        event.sync(TIMEOUT)
    assert caught.value.code == 107000
    backend.model_execute(model, runner.handle)
    runner.record(event)
    event.sync(TIMEOUT)
    backend.model_destroy(model)
    with pytest.raises(BackendError) as caught:
        backend.capture_begin(None)
    assert caught.value.code == 100000
