"""Launch tables on ascend over the fake CANN: rows walked in C (or by the Python fallback) do
what the primitives do one by one, refuse what they cannot hold, and name the failing row."""

from __future__ import annotations

import numpy as np
import pytest

from aclpipe.backends.ascend import launch_table
from aclpipe.backends.protocol import LaunchKind, LaunchRecord, MemcpyKind
from aclpipe.errors import BackendError, ClosedResourceError, InvalidArgumentError
from aclpipe.tensor import TensorDesc


@pytest.fixture(params=["compiled", "python"])
def walker(request, monkeypatch):
    """Each way of walking a table: the C helper compiled at install, and the Python fallback."""
    if request.param == "python":
        monkeypatch.setattr(launch_table, "api_ffi", None)
        monkeypatch.setattr(launch_table, "api_lib", None)
    elif not launch_table.compiled():
        pytest.skip("the launch-table helper was not compiled (python setup.py build_ext --inplace)")
    return request.param


def _relu_rows(ascend, x, y, stream, *, repeatable=True):
    backend = ascend.backend
    desc = TensorDesc.contiguous((8,), "float32")
    executor = backend.op_prepare("Relu", [desc.at(x.address)], [desc.at(y.address)], {})
    if repeatable:
        backend.op_set_repeatable(executor)
    return executor, LaunchRecord(LaunchKind.KERNEL, stream.handle, executor=executor, context={"node": "relu1",
                                                                                                "op": "Relu"})


def test_a_table_enqueues_its_rows_in_order_every_time_it_runs(ascend, walker):
    backend = ascend.backend
    first, second = ascend.create_stream(), ascend.create_stream()
    x, y = ascend.upload(np.linspace(-1, 1, 8, dtype=np.float32)), ascend.alloc(32)
    host = ascend.alloc_host(32)
    executor, kernel = _relu_rows(ascend, x, y, first)
    done = ascend.create_event()
    table = backend.table_create([
        kernel,
        LaunchRecord(LaunchKind.RECORD, first.handle, done.handle),
        LaunchRecord(LaunchKind.WAIT, second.handle, done.handle),
        LaunchRecord(LaunchKind.COPY, second.handle, dst=host.address, src=y.address, nbytes=32,
                     copy_kind=MemcpyKind.DEVICE_TO_HOST)])
    for scale in (1.0, 2.0):
        source = ascend.upload(np.linspace(-scale, scale, 8, dtype=np.float32))
        first.memcpy(x, source)
        backend.table_enqueue(table, run=1)
        second.sync()
        first.sync()
        np.testing.assert_array_equal(host.numpy("float32", 8),
                                      np.maximum(np.linspace(-scale, scale, 8, dtype=np.float32), 0))
    backend.table_destroy(table)
    backend.op_destroy(executor)


def test_a_refused_row_names_its_node_and_index_and_leaves_earlier_rows_enqueued(ascend, walker):
    backend = ascend.backend
    stream = ascend.create_stream()
    x, y, host = ascend.upload(np.ones(8, np.float32)), ascend.alloc(32), ascend.alloc_host(32)
    executor, kernel = _relu_rows(ascend, x, y, stream)
    gone = ascend.alloc(32)
    stale = gone.address
    gone.close()  # a copy from freed memory: the runtime refuses it at enqueue
    table = backend.table_create([
        kernel,
        LaunchRecord(LaunchKind.COPY, stream.handle, dst=host.address, src=stale, nbytes=32,
                     copy_kind=MemcpyKind.DEVICE_TO_HOST, context={"node": "d2h:y", "op": "D2H"})])
    with pytest.raises(BackendError) as caught:
        backend.table_enqueue(table, run=7)
    assert caught.value.context["node"] == "d2h:y" and caught.value.context["index"] == 1
    assert caught.value.context["run"] == 7 and "aclrtMemcpyAsync" in str(caught.value)
    stream.sync()  # the kernel before it was enqueued and ran
    np.testing.assert_array_equal(ascend.download(y, "float32", (8,)), np.ones(8, np.float32))
    backend.op_destroy(executor)


def test_what_a_table_cannot_hold_is_refused_when_it_is_made(ascend, walker):
    backend = ascend.backend
    stream = ascend.create_stream()
    x, y = ascend.upload(np.ones(8, np.float32)), ascend.alloc(32)
    single_use, row = _relu_rows(ascend, x, y, stream, repeatable=False)
    with pytest.raises(InvalidArgumentError, match="repeatable"):  # a table launches it every run
        backend.table_create([row])
    event = ascend.create_event()
    event.close()
    with pytest.raises(ClosedResourceError):
        backend.table_create([LaunchRecord(LaunchKind.RECORD, stream.handle, event.handle)])
    backend.op_destroy(single_use)


def test_a_handle_destroyed_after_the_table_was_made_is_refused_before_anything_runs(ascend, walker):
    backend = ascend.backend
    stream = ascend.create_stream()
    x, y = ascend.upload(np.ones(8, np.float32)), ascend.alloc(32)
    executor, kernel = _relu_rows(ascend, x, y, stream)
    table = backend.table_create([kernel])
    backend.op_destroy(executor)
    with pytest.raises(InvalidArgumentError, match="destroyed"):
        backend.table_enqueue(table)
