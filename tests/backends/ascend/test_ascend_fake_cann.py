"""The fake CANN itself: the rules the binding is proven against must really be enforced.

These call the C API directly (through the binding's declarations), with no backend logic in
between, so a lenient fake cannot make a careless binding look correct.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from cffi import FFI

from aclpipe.backends.ascend.cdefs import ffi
from aclpipe.backends.ascend.library import CannLibrary, load_library


@pytest.fixture
def acl(fake_lib) -> Iterator[CannLibrary]:
    """ACL initialized with device 0 set; reset and finalized afterwards."""
    library = load_library()
    runtime = library.runtime
    assert runtime.aclInit(ffi.NULL) == 0
    assert runtime.aclrtSetDevice(0) == 0
    yield library
    assert runtime.aclrtResetDevice(0) == 0
    assert runtime.aclFinalize() == 0


def make(runtime: Any, kind: str) -> Any:
    handle = ffi.new(f"{kind} *")
    create = runtime.aclrtCreateStreamWithConfig if kind == "aclrtStream" else runtime.aclrtCreateEventWithFlag
    assert (create(handle, 0, 0) if kind == "aclrtStream" else create(handle, 0x1 | 0x8)) == 0
    return handle[0]


def message(library: CannLibrary) -> str:
    return library.recent_message()


def test_symbols_live_in_the_library_that_exports_them_on_cann(fake_cann):
    with_hostfunc, without = (load_library(fake_cann[name]) for name in ("launch_host_func", "callback"))
    assert with_hostfunc.has_launch_host_func and not without.has_launch_host_func
    assert not hasattr(with_hostfunc.runtime, "aclCreateTensor") and hasattr(with_hostfunc.nnopbase, "aclCreateTensor")
    assert with_hostfunc.opapi_function("aclnnAddGetWorkspaceSize") is not None
    assert with_hostfunc.opapi_function("aclnnRmsNormGetWorkspaceSize") is None


def test_reset_refuses_while_streams_live_and_finalize_while_devices_are_set(acl):
    runtime = acl.runtime
    stream = make(runtime, "aclrtStream")
    assert runtime.aclrtResetDevice(0) == 107000 and "streams" in message(acl)
    assert runtime.aclFinalize() == 107000 and "aclrtResetDevice first" in message(acl)
    assert runtime.aclGetRecentErrMsg() == ffi.NULL  # the message is handed out once
    assert runtime.aclrtDestroyStream(stream) == 0


def test_a_thread_without_a_current_context_is_refused(acl):
    runtime, results = acl.runtime, []

    def other_thread() -> None:
        pointer = ffi.new("void **")
        results.append((runtime.aclrtMalloc(pointer, 64, 0), message(acl)))

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert results[0][0] == 107002 and "aclrtSetCurrentContext" in results[0][1]


def test_the_two_event_status_queries_have_opposite_polarity(acl):
    runtime, gate = acl.runtime, threading.Event()
    deprecated = FFI()
    deprecated.cdef("int aclrtQueryEvent(void *event, int *status);")  # aclrtEventStatus: COMPLETE = 0
    old = deprecated.dlopen(str(acl.directory / "libascendcl.so"))
    stream, event = make(runtime, "aclrtStream"), make(runtime, "aclrtEvent")

    def wait_for_the_gate(argument: Any) -> None:
        gate.wait(10)

    hold = ffi.callback("void(void *)", wait_for_the_gate)
    assert runtime.aclrtLaunchHostFunc(stream, hold, ffi.NULL) == 0
    assert runtime.aclrtRecordEvent(event, stream) == 0
    recorded, status = ffi.new("int *"), deprecated.new("int *")
    assert runtime.aclrtQueryEventStatus(event, recorded) == 0 and old.aclrtQueryEvent(event, status) == 0
    assert (recorded[0], status[0]) == (0, 1)  # not ready, both ways
    gate.set()
    assert runtime.aclrtSynchronizeStream(stream) == 0
    assert runtime.aclrtQueryEventStatus(event, recorded) == 0 and old.aclrtQueryEvent(event, status) == 0
    assert (recorded[0], status[0]) == (1, 0)  # complete: RECORDED_STATUS_COMPLETE = 1, EVENT_STATUS_COMPLETE = 0
    assert runtime.aclrtDestroyEvent(event) == 0
    assert runtime.aclrtDestroyStream(stream) == 0


def test_the_two_callback_mechanisms_cannot_be_mixed_on_a_stream(acl):
    runtime = acl.runtime
    stream = make(runtime, "aclrtStream")
    assert runtime.aclrtSubscribeReport(threading.get_ident(), stream) == 0
    noop = ffi.callback("void(void *)", lambda argument: None)
    assert runtime.aclrtLaunchHostFunc(stream, noop, ffi.NULL) == 107000 and "mixed" in message(acl)
    assert runtime.aclrtSubscribeReport(threading.get_ident(), stream) == 100033  # one thread per stream
    assert runtime.aclrtDestroyStream(stream) == 107000 and "aclrtUnSubscribeReport" in message(acl)
    assert runtime.aclrtUnSubscribeReport(threading.get_ident(), stream) == 0
    assert runtime.aclrtDestroyStream(stream) == 0


def test_executors_are_single_use_unless_repeatable_and_launches_check_memory(acl):
    runtime, nnopbase = acl.runtime, acl.nnopbase
    stream = make(runtime, "aclrtStream")
    pointer = ffi.new("void **")
    assert runtime.aclrtMalloc(pointer, 256, 0) == 0
    base = pointer[0]
    dims = ffi.new("int64_t[]", [8])
    tensors = [nnopbase.aclCreateTensor(dims, 1, 0, ffi.new("int64_t[]", [1]), offset, 2, dims, 1, base)
               for offset in (0, 8, 16)]
    size, executor = ffi.new("uint64_t *"), ffi.new("aclOpExecutor **")
    relu, relu_launch = (acl.opapi_function(name) for name in ("aclnnReluGetWorkspaceSize", "aclnnRelu"))
    assert relu(tensors[0], tensors[1], size, executor) == 0 and size[0] == 0
    assert relu_launch(ffi.NULL, 0, executor[0], stream) == 0
    assert relu_launch(ffi.NULL, 0, executor[0], stream) == 561103  # consumed by the first launch
    assert relu(tensors[0], tensors[1], size, executor) == 0
    assert nnopbase.aclSetAclOpExecutorRepeatable(executor[0]) == 0
    misaligned = ffi.cast("char *", base) + 4
    assert nnopbase.aclSetInputTensorAddr(executor[0], 0, tensors[0], misaligned) == 161002
    assert relu_launch(ffi.NULL, 0, executor[0], stream) == 0
    assert relu_launch(ffi.NULL, 0, executor[0], stream) == 0  # repeatable: as often as wanted
    assert runtime.aclrtSynchronizeStream(stream) == 0
    assert nnopbase.aclDestroyAclOpExecutor(executor[0]) == 0
    assert runtime.aclrtFree(base) == 0
    assert relu(tensors[0], tensors[2], size, executor) == 0
    assert relu_launch(ffi.NULL, 0, executor[0], stream) == 161002 and "not in any live allocation" in message(acl)
    for tensor in tensors:
        assert nnopbase.aclDestroyTensor(tensor) == 0
    assert nnopbase.aclDestroyAclOpExecutor(executor[0]) == 0
    assert runtime.aclrtDestroyStream(stream) == 0
