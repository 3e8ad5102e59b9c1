"""The conformance kit: the simulator passes, skips carry reasons, and broken backends fail."""

from __future__ import annotations

import dataclasses
import gc
import threading

import pytest
from rich.console import Console

import aclpipe
from aclpipe.backends.sim import SimBackend
from aclpipe.runtime import Device
from aclpipe.testing import CHECKS, ConformanceReport, check_backend, latch

ALL = [check.name for check in CHECKS]
SANITIZER_CHECKS = ["sanitizer_race", "sanitizer_use_after_free", "sanitizer_host_read"]


def statuses(report):
    return {row.name: row.status for row in report.rows}


def opener(backend_class, **options):
    options.setdefault("sanitizer", False)  # the check itself must notice, not the sanitizer
    return lambda: Device(backend_class(0, **options), "broken:0")


def test_the_simulator_passes_every_check():
    report = check_backend(lambda: aclpipe.open_device("sim", sanitizer=True))
    assert [row.name for row in report.rows] == ALL
    assert set(statuses(report).values()) == {"passed"}, str(report)
    assert report.ok and "sanitizer on" in report.device


def test_missing_capabilities_are_skipped_with_a_reason():
    report = check_backend(lambda: aclpipe.open_device("sim", sanitizer=False))
    assert report.ok
    assert [row.name for row in report.skipped] == SANITIZER_CHECKS
    for row in report.skipped:
        assert "'sanitizer' capability" in row.detail and "sanitizer=True" in row.detail
        assert str(row).startswith(f"{row.name}: skipped: ")
    assert all(status == "passed" for name, status in statuses(report).items() if name not in SANITIZER_CHECKS)


def test_the_report_prints_as_a_rich_table_and_text():
    rows = []
    report = ConformanceReport(on_row=rows.append)
    check_backend(lambda: aclpipe.open_device("sim", sanitizer=False), report=report, checks=CHECKS[:2])
    check_backend(lambda: aclpipe.open_device("sim", sanitizer=False), report=report, checks=CHECKS[-1:])
    assert [row.name for row in rows] == ALL[:2] + ALL[-1:] and report.rows == rows
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
    def _kernel_region(self, address, nbytes, what):
        return self.memory.find_device(address, max(nbytes, 1), what=what), address, nbytes


class BlindSanitizer(SimBackend):
    def __init__(self, index=0, **options):
        super().__init__(index, **{**options, "sanitizer": True})
        self.sanitizer.access_all = lambda *args, **kwargs: None


class UntimedEvents(SimBackend):
    def event_elapsed(self, start, end):
        return 0.0


@pytest.mark.parametrize("backend_class, failing", [
    (IgnoresWaits, {"cross_stream_wait", "event_semantics"}),
    (InlineHostFunctions, {"host_functions"}),
    (HostFunctionsDoNotBlock, {"host_functions"}),
    (ForgetsErrors, {"host_functions", "fault_surfacing"}),
    (LenientFree, {"memory_errors"}),
    (NoAlignmentCheck, {"memory_errors"}),
    (BlindSanitizer, set(SANITIZER_CHECKS)),
    (UntimedEvents, {"event_timing"}),
])
def test_a_backend_breaking_a_rule_fails_that_check(backend_class, failing):
    report = check_backend(opener(backend_class))
    assert {row.name for row in report.failed} == failing, str(report)
    assert not report.ok


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
