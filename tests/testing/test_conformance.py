"""The conformance kit: the simulator passes, skips carry reasons, and broken backends fail."""

from __future__ import annotations

import dataclasses
import gc
import threading

import pytest
from rich.console import Console

import aclpipe
from aclpipe.backends.protocol import CaptureStatus, MemcpyKind
from aclpipe.backends.sim import SimBackend
from aclpipe.backends.sim.callbacks import CallbackThread
from aclpipe.errors import error_from_code
from aclpipe.runtime import Device
from aclpipe.testing import CHECKS, ConformanceReport, check_backend, latch
from aclpipe.testing.rules import RULES

ALL = [check.name for check in CHECKS]
SANITIZER_CHECKS = ["sanitizer_race", "sanitizer_use_after_free", "sanitizer_host_read", "sanitizer_padding"]
TOO_LARGE_ON_A2 = ["event_limit", "stream_limit"]  # 65536 events, 1982 streams: too many to exhaust in a check


def statuses(report):
    return {row.name: row.status for row in report.rows}


def opener(backend_class, **options):
    options.setdefault("sanitizer", False)  # the check itself must notice, not the sanitizer
    return lambda: Device(backend_class(0, **options), "broken:0")


def test_the_simulator_passes_every_check():
    report = check_backend(lambda: aclpipe.open_device("sim", sanitizer=True))
    assert [row.name for row in report.rows] == ALL
    assert {name for name, status in statuses(report).items() if status != "passed"} == set(TOO_LARGE_ON_A2)
    assert report.ok and "sanitizer on" in report.device


def test_an_inference_card_spec_runs_the_event_limit_and_skips_what_it_lacks():
    report = check_backend(lambda: aclpipe.open_device("sim", spec="atlas-310p"))
    assert report.ok, str(report)
    assert statuses(report)["event_limit"] == "passed"
    # 06: abort on A2/A3 only; 11-10: the stream-ordered allocator on A2 only; 15: conditional tasks on A2/A3
    assert [row.name for row in report.skipped] == ["stream_limit", "stream_abort", "mempool_order", "while_task"]
    assert "1024 per device less 2 default streams" in report.skipped[0].detail
    assert "no aclrtStreamAbort" in report.skipped[1].detail


def test_missing_capabilities_are_skipped_with_a_reason():
    report = check_backend(lambda: aclpipe.open_device("sim", sanitizer=False))
    assert report.ok
    assert [row.name for row in report.skipped] == sorted(SANITIZER_CHECKS + TOO_LARGE_ON_A2, key=ALL.index)
    for row in report.skipped:
        if row.name in SANITIZER_CHECKS:
            assert "'sanitizer' capability" in row.detail and "sanitizer=True" in row.detail
        assert str(row).startswith(f"{row.name}: skipped: ")
    assert "too large to exhaust" in statuses_detail(report)["event_limit"]
    skipped = SANITIZER_CHECKS + TOO_LARGE_ON_A2
    assert all(status == "passed" for name, status in statuses(report).items() if name not in skipped)


def statuses_detail(report):
    return {row.name: row.detail for row in report.rows}


def test_the_report_prints_as_a_rich_table_and_text():
    rows = []
    report = ConformanceReport(on_row=rows.append)
    last_sanitizer_check = [check for check in CHECKS if check.name == "sanitizer_host_read"]
    check_backend(lambda: aclpipe.open_device("sim", sanitizer=False), report=report, checks=CHECKS[:2])
    check_backend(lambda: aclpipe.open_device("sim", sanitizer=False), report=report, checks=last_sanitizer_check)
    assert [row.name for row in rows] == ALL[:2] + ["sanitizer_host_read"] and report.rows == rows
    console = Console(record=True, width=200)
    console.print(report.table())
    text = console.export_text()
    assert "stream_ordering" in text and "skipped" in text and "2 passed, 0 failed, 1 skipped" in text
    assert "2 passed" in str(report)


def test_a_device_that_cannot_open_fails_every_check():
    def broken():
        raise OSError("no driver")

    report = check_backend(broken, checks=CHECKS[:3])
    assert not report.ok and len(report.failed) == 3
    assert "could not open a device: OSError: no driver" in report.failed[0].detail


def test_every_documented_rule_cites_its_page_and_the_vague_ones_the_runtime_source():
    for check in RULES:
        assert check.doc.endswith(")") or ".md" in check.doc or ".h" in check.doc, check.name
    settled_by_source = {check.name for check in RULES if check.source}
    assert settled_by_source == {"zero_timeout", "stream_limit", "host_threads", "capture_sync", "op_wait_timeout",
                                 "capture_blocks_sync_copies", "captured_event_sync", "capture_default_stream",
                                 "mempool_order", "while_task"}
    assert all(check.source.startswith("src/") and ": " in check.source for check in RULES if check.source)


# -- backends that break one rule each: the kit must notice ---------------------------------------
class IgnoresWaits(SimBackend):
    def stream_wait_event(self, stream, event):
        self._check_stream(stream)


class InlineHostFunctions(SimBackend):
    def host_func(self, stream, fn, name=""):
        fn()


class HostFunctionsDoNotBlock(SimBackend):
    def host_func(self, stream, fn, name=""):
        threading.Thread(target=fn, daemon=True).start()


class ForgetsErrors(SimBackend):
    def stream_sync(self, stream, timeout_ms=-1):
        try:
            super().stream_sync(stream, timeout_ms)
        except aclpipe.DeviceFault as error:
            if error.code != 507046:
                return
            raise


class LenientFree(SimBackend):
    def mem_free(self, address):
        if self.memory.starting_at(address) is not None:
            super().mem_free(address)


class NoAlignmentCheck(SimBackend):
    def __init__(self, index=0, **options):
        super().__init__(index, **options)
        memory = self.memory
        memory.kernel_regions = lambda accesses, label, kind: tuple(
            (memory.find_device(address, max(nbytes, 1), what=f"{label} {kind}"), address, nbytes)
            for address, nbytes in accesses)


class BlindSanitizer(SimBackend):
    def __init__(self, index=0, **options):
        super().__init__(index, **{**options, "sanitizer": True})
        self.sanitizer.access_all = lambda *args, **kwargs: None


class UntimedEvents(SimBackend):
    def event_elapsed(self, start, end):
        return 0.0


# -- the documented runtime rules (hicann/runtime docs), one broken backend each -------------------
class EventsNeedNoReset(SimBackend):
    def event_create(self, timing=False, reusable=True):
        return super().event_create(timing, True)


class AcceptsUnrecordedWaits(SimBackend):
    def stream_wait_event(self, stream, event):
        if event.armed or event.capture is not None:
            super().stream_wait_event(stream, event)


class NoEventLimit(SimBackend):
    def event_create(self, timing=False, reusable=True):
        self._live_events = 0
        return super().event_create(timing, reusable)


class ZeroTimeoutIsAPoll(SimBackend):
    """The old reading: a 0 ms synchronize asks without waiting."""

    def stream_sync(self, stream, timeout_ms=-1):
        if timeout_ms == 0:
            if not self.stream_query(stream):
                raise error_from_code(507046, "not done")
            return
        super().stream_sync(stream, timeout_ms)

    def event_sync(self, event, timeout_ms=-1):
        if timeout_ms == 0:
            if not self.event_query(event):
                raise error_from_code(507047, "not done")
            timeout_ms = -1
        super().event_sync(event, timeout_ms)


class DefaultStreamsAreFree(SimBackend):
    """The old reading: the whole documented figure may be created."""

    def __init__(self, index=0, **options):
        super().__init__(index, **options)
        self.capabilities = dataclasses.replace(self.capabilities, max_streams=self.spec.max_streams,
                                                default_streams=0)


class SkipsUntilConsumed(SimBackend):
    """The old generation semantics: work behind a failure is skipped until the error is taken."""

    def run_faults(self, task, stream):
        if stream.error is not None:
            stream.skipped += 1
            return True
        return super().run_faults(task, stream)


class StopAcceptsNewWork(SimBackend):
    def stream_create(self, priority=0):
        stream = super().stream_create(priority)
        stream.check_submittable = lambda: None
        return stream


class AbortDoesNothing(SimBackend):
    def stream_abort(self, stream):
        self._check_stream(stream)


class HostThreadPerStream(SimBackend):
    """The old reading of 12_execution_control.md: a host-function thread per stream."""

    def stream_create(self, priority=0):
        stream = super().stream_create(priority)
        own = CallbackThread(f"{stream.name} host thread")
        stream.host_thread = lambda: own
        return stream


class CallsFromHostFunctions(SimBackend):
    """The old way: a host function may allocate, free, synchronize and launch."""

    @staticmethod
    def refuse_in_host_function(what):
        return None


class AnyDeviceCopyAlignment(SimBackend):
    def _check_copy_rules(self, dst, src, kind, what):
        if kind != MemcpyKind.DEVICE_TO_DEVICE:
            super()._check_copy_rules(dst, src, kind, what)


class AsyncHostCopies(SimBackend):
    def _check_copy_rules(self, dst, src, kind, what):
        if kind != MemcpyKind.HOST_TO_HOST:
            super()._check_copy_rules(dst, src, kind, what)


class UseAfterFreeIsAMemoryUCE(SimBackend):
    @staticmethod
    def _live_bytes(allocation, offset, nbytes, what):
        if not allocation.alive:
            raise error_from_code(507053, f"{what}: freed")
        return allocation.data[offset:offset + nbytes]


class LenientExecutorDestroy(SimBackend):
    def op_destroy(self, executor):
        executor.destroyed = True


class NoPadding(SimBackend):
    def __init__(self, index=0, **options):
        super().__init__(index, **{**options, "sanitizer": True})

    @staticmethod
    def _padding(writes):
        return []


class SyncInvalidatesCapture(SimBackend):
    """The old reading: a synchronize inside a capture invalidates it (107041)."""

    def stream_sync(self, stream, timeout_ms=-1):
        if stream.capture is not None:
            self.captures.forbid(stream.capture, 107041, "a synchronize")
        super().stream_sync(stream, timeout_ms)


class CaptureRunsWork(SimBackend):
    def capture_begin(self, stream, mode=0):
        self._check_stream(stream)

    def capture_get_info(self, stream):
        return CaptureStatus.ACTIVE, None


class SyncCopiesIgnoreCaptures(SimBackend):
    """The old model: an open capture leaves aclrtMemcpy and aclrtMemset alone."""

    def __init__(self, index=0, **options):
        super().__init__(index, **options)
        self.captures.check_blocking_call = lambda what: None


class EventsInModelsSync(SimBackend):
    """The old model: a sync of an event recorded inside a captured model waits as usual."""

    def event_sync(self, event, timeout_ms=-1):
        event.in_model = None
        super().event_sync(event, timeout_ms)


class CapturesTheDefaultStream(SimBackend):
    """A backend that takes the default stream's capture as a no-op."""

    def capture_begin(self, stream, mode=0):
        if stream is not None:
            super().capture_begin(stream, mode)


class WaitsNeverTimeOut(SimBackend):
    """Says the op wait timeout is set but lets waits block for ever."""

    def __init__(self, index=0, **options):
        super().__init__(index, **options)
        self.op_wait_timeout = 0.0


class WaitsTimeOutByDefault(SimBackend):
    """Times waits out although nobody set an op wait timeout (the runtime's default is none)."""

    def __init__(self, index=0, **options):
        super().__init__(index, **options)
        self.op_wait_timeout = 0.05


@pytest.mark.parametrize("backend_class, options", [
    (WaitsNeverTimeOut, {"op_wait_timeout": 1, "time_scale": 0.01}), (WaitsTimeOutByDefault, {}),
])
def test_a_backend_breaking_the_op_wait_timeout_fails_its_check(backend_class, options):
    # Alone: with a 10 ms wait timeout, the other checks' held waits would time out too.
    check = [check for check in RULES if check.name == "op_wait_timeout"]
    report = check_backend(opener(backend_class, **options), checks=check)
    assert [row.name for row in report.failed] == ["op_wait_timeout"], str(report)
    assert check[0].doc in report.failed[0].detail


def test_the_simulator_passes_the_op_wait_timeout_check_with_a_timeout_set():
    check = [check for check in RULES if check.name == "op_wait_timeout"]
    report = check_backend(lambda: aclpipe.open_device("sim", op_wait_timeout=1, time_scale=0.01), checks=check)
    assert report.ok and "failed with 107020" in report.rows[0].detail, str(report)


@pytest.mark.parametrize("backend_class, failing, options", [
    (IgnoresWaits, {"cross_stream_wait", "event_semantics", "never_recorded_wait", "stream_abort", "capture_model",
                    "op_wait_timeout"}, {}),
    (InlineHostFunctions, {"host_functions", "host_threads", "host_function_calls"}, {}),
    (HostFunctionsDoNotBlock, {"host_functions", "host_threads", "host_function_calls"}, {}),
    (ForgetsErrors, {"host_functions", "fault_surfacing", "continue_on_failure", "stop_on_failure", "stream_abort",
                     "use_after_free_code", "executor_destroy"}, {}),
    (LenientFree, {"memory_errors"}, {}),
    (NoAlignmentCheck, {"memory_errors"}, {}),
    (BlindSanitizer, set(SANITIZER_CHECKS), {}),
    (UntimedEvents, {"event_timing"}, {}),
    (EventsNeedNoReset, {"event_kinds"}, {}),
    (AcceptsUnrecordedWaits, {"never_recorded_wait"}, {}),
    (NoEventLimit, {"event_limit"}, {"spec": "atlas-310p"}),
    (ZeroTimeoutIsAPoll, {"zero_timeout"}, {}),
    (DefaultStreamsAreFree, {"stream_limit"}, {}),
    (DefaultStreamsAreFree, {"stream_limit"}, {"spec": "atlas-310p"}),
    (SkipsUntilConsumed, {"continue_on_failure"}, {}),
    (StopAcceptsNewWork, {"stop_on_failure"}, {}),
    (AbortDoesNothing, {"stream_abort"}, {}),
    (HostThreadPerStream, {"host_threads"}, {}),
    (CallsFromHostFunctions, {"host_function_calls"}, {}),
    (AnyDeviceCopyAlignment, {"d2d_alignment"}, {}),
    (AsyncHostCopies, {"async_host_copy"}, {}),
    (UseAfterFreeIsAMemoryUCE, {"use_after_free_code"}, {}),
    (LenientExecutorDestroy, {"executor_destroy"}, {}),
    (NoPadding, {"sanitizer_padding"}, {}),
    (SyncInvalidatesCapture, {"capture_sync"}, {}),
    (CaptureRunsWork, {"capture_model", "capture_sync", "capture_blocks_sync_copies", "captured_event_sync",
                       "capture_default_stream", "while_task"}, {}),
    (SyncCopiesIgnoreCaptures, {"capture_blocks_sync_copies"}, {}),
    (EventsInModelsSync, {"captured_event_sync"}, {}),
    (CapturesTheDefaultStream, {"capture_default_stream"}, {}),
])
def test_a_backend_breaking_a_rule_fails_that_check(backend_class, failing, options):
    report = check_backend(opener(backend_class, **options))
    assert {row.name for row in report.failed} == failing, str(report)
    assert not report.ok
    rules = {check.name: check for check in RULES}
    for row in report.failed:  # a failed documented rule says where it comes from
        assert row.name not in rules or rules[row.name].doc in row.detail


# -- the latch --------------------------------------------------------------------------------------
class NoNativeLatch(SimBackend):
    """A backend whose capabilities say it has no latch task: the kit holds streams with a host
    function instead."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.capabilities = dataclasses.replace(self.capabilities, latch=False)


@pytest.mark.parametrize("backend_class, kind", [(SimBackend, "device"), (NoNativeLatch, "host_func")])
def test_latch_holds_only_until_released(backend_class, kind):
    device = opener(backend_class, sanitizer=True)()
    try:
        stream = device.create_stream()
        gate = latch(stream)
        assert gate.kind == kind and "holding" in repr(gate)
        done = stream.record()
        assert not done.is_done and not gate.released
        gate.release()
        gate.release()
        done.sync(timeout=10)
        assert gate.released
    finally:
        device.close()


def test_a_forgotten_latch_is_released_when_collected(device):
    stream = device.create_stream()
    latch(stream)
    gc.collect()
    stream.sync(timeout=10)
