"""Launch tables on the simulator (no native tables): the Python loop enqueues the rows in
order, every time; a refused row names its node, index and run; a closed table refuses."""

from __future__ import annotations

import numpy as np
import pytest

from aclpipe.backends.protocol import LaunchKind, LaunchRecord, MemcpyKind, launch_tables
from aclpipe.errors import BackendError, ClosedResourceError
from aclpipe.runtime.launches import LaunchTable
from aclpipe.tensor import TensorDesc


def _relu(device, x, y, stream):
    backend = device.backend
    desc = TensorDesc.contiguous((8,), "float32")
    executor = backend.op_prepare("Relu", [desc.at(x.address)], [desc.at(y.address)], {})
    backend.op_set_repeatable(executor)
    return executor, LaunchRecord(LaunchKind.KERNEL, stream.handle, executor=executor,
                                  context={"node": "relu1", "op": "Relu"})


def test_the_simulator_has_no_native_tables_so_the_python_loop_walks_them(device):
    assert launch_tables(device.backend) is None
    stream = device.create_stream()
    table = LaunchTable(device.backend, [LaunchRecord(LaunchKind.COPY, stream.handle)])
    assert not table.native and len(table) == 1 and "native" not in repr(table)
    table.enqueue(run=0)  # a zero-byte copy row enqueues nothing
    stream.sync()


def test_rows_run_in_order_across_streams_every_time_the_table_is_enqueued(device):
    first, second = device.create_stream(), device.create_stream()
    x, y = device.alloc(32), device.alloc(32)
    host = device.alloc_host(32)
    executor, kernel = _relu(device, x, y, first)
    done = device.create_event()
    table = LaunchTable(device.backend, [
        kernel,
        LaunchRecord(LaunchKind.RECORD, first.handle, done.handle),
        LaunchRecord(LaunchKind.WAIT, second.handle, done.handle),
        LaunchRecord(LaunchKind.COPY, second.handle, dst=host.address, src=y.address, nbytes=32,
                     copy_kind=MemcpyKind.DEVICE_TO_HOST)])
    for scale in (1.0, 3.0):
        values = np.linspace(-scale, scale, 8, dtype=np.float32)
        source = device.upload(values)
        first.memcpy(x, source)
        table.enqueue(run=1)
        second.sync()
        first.sync()  # the source may go only once the copy from it is done (the sanitizer checks)
        np.testing.assert_array_equal(host.numpy("float32", 8), np.maximum(values, 0))
    table.close()
    device.backend.op_destroy(executor)


def test_a_refused_row_names_its_node_index_and_run(device):
    stream = device.create_stream()
    x, y, host = device.upload(np.ones(8, np.float32)), device.alloc(32), device.alloc_host(32)
    executor, kernel = _relu(device, x, y, stream)
    gone = device.alloc(32)
    stale = gone.address
    gone.close()
    table = LaunchTable(device.backend, [
        kernel,
        LaunchRecord(LaunchKind.COPY, stream.handle, dst=host.address, src=stale, nbytes=32,
                     copy_kind=MemcpyKind.DEVICE_TO_HOST, context={"node": "d2h:y", "op": "D2H"})])
    with pytest.raises(BackendError) as caught:
        table.enqueue(run=5)
    context = caught.value.context
    assert context["node"] == "d2h:y" and context["index"] == 1 and context["run"] == 5
    assert "d2h:y" in str(caught.value)
    stream.sync()  # the row before it was enqueued and ran
    np.testing.assert_array_equal(device.download(y, "float32", (8,)), np.ones(8, np.float32))
    table.close()
    device.backend.op_destroy(executor)


def test_a_closed_table_refuses_to_enqueue_and_closing_twice_is_harmless(device):
    stream = device.create_stream()
    table = LaunchTable(device.backend, [LaunchRecord(LaunchKind.COPY, stream.handle)])
    table.close()
    table.close()
    with pytest.raises(ClosedResourceError, match="closed with its program"):
        table.enqueue()
