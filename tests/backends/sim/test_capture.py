"""Graph capture and replay on the simulator: replays behave like the enqueues they captured."""

from __future__ import annotations

import numpy as np
import pytest

import aclpipe
from aclpipe.tensor import TensorDesc


def _relu_chain(device, stream, buffer, length):
    desc = TensorDesc.contiguous((8,), "float32", buffer.address)
    executors = []
    for _ in range(length):
        executor = device.backend.op_prepare("Neg", [desc], [desc], {})
        device.backend.op_set_repeatable(executor)
        device.backend.op_launch(executor, 0, 0, stream.handle, {"node": f"neg{len(executors)}"})
        executors.append(executor)
    return executors


def test_replay_runs_the_captured_work_each_time(device):
    stream = device.create_stream()
    buffer = device.upload(np.arange(8, dtype=np.float32))
    device.backend.graph_capture_begin()
    _relu_chain(device, stream, buffer, 3)  # three negations: x -> -x
    graph = device.backend.graph_capture_end()
    assert graph.size == 3
    stream.sync()
    np.testing.assert_array_equal(device.download(buffer, "float32", (8,)), np.arange(8))  # nothing ran yet
    for expected_sign in (-1, 1, -1):
        device.backend.graph_launch(graph, {"run": 1})
        stream.sync()
        np.testing.assert_array_equal(device.download(buffer, "float32", (8,)), expected_sign * np.arange(8))


def test_replayed_events_order_streams(device):
    producer, consumer = device.create_stream(), device.create_stream()
    source = device.upload(np.full(8, 3, np.float32))
    target = device.alloc(32)
    event = device.create_event()
    backend = device.backend
    backend.graph_capture_begin()
    backend.memcpy_async(target.address, source.address, 32, aclpipe.backends.protocol.MemcpyKind.DEVICE_TO_DEVICE,
                         producer.handle)
    backend.event_record(event.handle, producer.handle)
    backend.stream_wait_event(consumer.handle, event.handle)
    desc = TensorDesc.contiguous((8,), "float32", target.address)
    executor = backend.op_prepare("Neg", [desc], [desc], {})
    backend.op_set_repeatable(executor)
    backend.op_launch(executor, 0, 0, consumer.handle, {"node": "neg"})
    graph = backend.graph_capture_end()
    backend.graph_launch(graph)
    consumer.sync()
    np.testing.assert_array_equal(device.download(target, "float32", (8,)), np.full(8, -3))


def test_a_fault_in_a_replay_names_the_node_and_run(device):
    stream = device.create_stream()
    buffer = device.upload(np.ones(8, np.float32))
    device.backend.graph_capture_begin()
    _relu_chain(device, stream, buffer, 2)
    graph = device.backend.graph_capture_end()
    device.inject_fault("kernel", "neg1")
    device.backend.graph_launch(graph, {"run": 7})
    with pytest.raises(aclpipe.DeviceFault) as caught:
        stream.sync()
    assert caught.value.context["node"] == "neg1" and caught.value.context["run"] == 7
    device.backend.graph_launch(graph, {"run": 8})  # usable after the error was consumed
    stream.sync()


def test_capture_refuses_host_functions_and_nesting(device):
    stream = device.create_stream()
    device.backend.graph_capture_begin()
    with pytest.raises(aclpipe.BackendError, match="captured"):
        stream.host_func(lambda: None)
    with pytest.raises(aclpipe.BackendError, match="already"):
        device.backend.graph_capture_begin()
    device.backend.graph_capture_end()
    with pytest.raises(aclpipe.BackendError, match="without"):
        device.backend.graph_capture_end()


def test_the_sanitizer_checks_replays(device):
    first, second = device.create_stream(), device.create_stream()
    buffer = device.upload(np.ones(8, np.float32))
    device.backend.graph_capture_begin()
    _relu_chain(device, first, buffer, 1)
    _relu_chain(device, second, buffer, 1)  # same bytes, no ordering between the streams
    graph = device.backend.graph_capture_end()
    with pytest.raises(aclpipe.HazardError):
        device.backend.graph_launch(graph)
    device.sync()
