"""The report thread (aclrtLaunchCallback fallback): idle polls in either generation of codes are
no failures, and real failures are kept bounded."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import aclpipe
from aclpipe.backends.ascend import reports
from aclpipe.backends.ascend.reports import MAX_ERRORS, ReportThread


@pytest.mark.parametrize("codes", ["current", "legacy"])
def test_idle_polls_are_not_failures_in_either_generation_of_codes(fake_cann: dict[str, Path],
                                                                   monkeypatch: pytest.MonkeyPatch, codes: str):
    """aclrtProcessReportImpl (src/acl/aclrt_impl/callback.cpp) answers an idle poll with 507012 or
    107012 in current CANN; older releases with 100036 or 100035."""
    monkeypatch.setenv("ACLPIPE_ASCEND_LIB", str(fake_cann["callback"]))
    monkeypatch.setenv("FAKE_CANN_REPORT_CODES", codes)
    monkeypatch.setattr(reports, "POLL_MS", 5)
    with aclpipe.open_device("ascend:0") as device:
        stream = device.create_stream()
        ran = threading.Event()
        stream.host_func(ran.set)
        stream.sync(10)
        assert ran.is_set()
        report_thread = device.backend.streams._reports
        assert report_thread is not None
        time.sleep(0.1)  # about twenty idle polls
        assert report_thread.errors == [] and report_thread.failures == 0


class _FailingRuntime:
    def aclrtSetCurrentContext(self, context):
        return 0

    def aclrtProcessReport(self, timeout):
        return 507000

    def aclrtSubscribeReport(self, thread_id, stream):
        return 0

    def aclrtUnSubscribeReport(self, thread_id, stream):
        return 0


class _FailingLibrary:
    runtime = _FailingRuntime()

    @staticmethod
    def error(code, what):
        return aclpipe.errors.error_from_code(code, what)

    def check(self, code, what):
        return None


def test_failures_are_counted_and_the_first_few_kept(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(reports, "POLL_MS", 1)
    thread = ReportThread(_FailingLibrary(), None, "failing-reports")  # type: ignore[arg-type]
    thread.subscribe(object())
    deadline = time.monotonic() + 10
    while thread.failures <= MAX_ERRORS + 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    thread.close()
    assert thread.failures > MAX_ERRORS and len(thread.errors) == MAX_ERRORS
    assert all(error.code == 507000 for error in thread.errors)
