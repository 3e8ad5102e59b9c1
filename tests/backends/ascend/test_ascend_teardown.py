"""Teardown order, aclInit/aclFinalize pairing, and the conformance kit on the fake CANN."""

from __future__ import annotations

import numpy as np
import pytest

import aclpipe
from aclpipe.backends.ascend import load_library
from aclpipe.runtime import Device

LIFETIME = ("stream", "event", "alloc", "host_alloc")


def busy_device() -> tuple[Device, list[object]]:
    """A device with streams, events, memory and host functions in flight, and what it holds."""
    device = aclpipe.open_device("ascend:0")
    streams = [device.create_stream() for _ in range(3)]
    events = [stream.record(timing=True) for stream in streams]
    streams[1].wait(events[0])
    streams[2].host_func(lambda: None)
    held = [*streams, *events, device.upload(np.ones(32, np.float32)), device.alloc_host(128)]
    return device, held


def positions(trace: list[str], call: str) -> list[int]:
    return [index for index, line in enumerate(trace) if line.split()[0] == call]


def test_close_destroys_events_and_streams_before_the_context_and_resets_last(any_fake_lib, any_hooks):
    before = {kind: any_hooks.live(kind) for kind in LIFETIME}
    any_hooks.clear_trace()
    device, held = busy_device()
    device.close()  # with every handle still referenced: close must release them all
    del held
    trace = any_hooks.trace()
    context, reset, finalize = (positions(trace, call) for call in
                                ("aclrtDestroyContext", "aclrtResetDevice", "aclFinalize"))
    assert len(context) == len(reset) == len(finalize) == 1, trace
    released = positions(trace, "aclrtDestroyStream") + positions(trace, "aclrtDestroyEvent")
    released += positions(trace, "aclrtUnSubscribeReport")
    assert len(positions(trace, "aclrtDestroyStream")) >= 3
    assert max(released) < context[0] < reset[0] < finalize[0], trace
    assert positions(trace, "aclrtSubscribeReport") == [] or len(positions(trace, "aclrtUnSubscribeReport")) >= 3
    assert {kind: any_hooks.live(kind) for kind in LIFETIME} == before


def test_acl_is_finalized_when_the_last_device_closes(fake_lib, hooks):
    hooks.clear_trace()
    first = aclpipe.open_device("ascend:0")
    second = aclpipe.open_device("ascend:1")
    first.close()
    assert positions(hooks.trace(), "aclFinalize") == []
    second.close()
    trace = hooks.trace()
    assert len(positions(trace, "aclInit")) == 1 and positions(trace, "aclFinalize") == [len(trace) - 1]


def test_acl_initialized_by_someone_else_is_left_initialized(fake_lib, hooks):
    runtime = load_library().runtime
    assert runtime.aclInit(aclpipe.backends.ascend.cdefs.ffi.NULL) == 0  # e.g. torch_npu got there first
    try:
        hooks.clear_trace()
        with aclpipe.open_device("ascend:0") as device:
            device.upload(np.zeros(4, np.float32))
        assert positions(hooks.trace(), "aclFinalize") == []
    finally:
        assert runtime.aclFinalize() == 0


def test_the_conformance_kit_passes_on_both_builds(any_fake_lib):
    testing = pytest.importorskip("aclpipe.testing")
    report = testing.check_backend(lambda: aclpipe.open_device("ascend:0"))
    assert report.ok, str(report)
    skipped = {row.name for row in report.rows if row.status == "skipped"}
    assert skipped <= {"fault_surfacing", "sanitizer_race", "sanitizer_use_after_free", "sanitizer_host_read",
                       "sanitizer_padding", "event_limit", "stream_limit"}
    assert {"host_threads", "zero_timeout"} <= {row.name for row in report.rows if row.status == "passed"}
    assert {"stream_ordering", "cross_stream_wait", "event_semantics", "event_timing", "host_functions",
            "memory_errors", "event_kinds", "never_recorded_wait", "continue_on_failure", "stop_on_failure",
            "stream_abort", "d2d_alignment", "async_host_copy", "use_after_free_code", "executor_destroy",
            "capture_model", "op_wait_timeout", "capture_blocks_sync_copies", "captured_event_sync",
            "capture_default_stream"} <= {row.name for row in report.rows if row.status == "passed"}
