"""Benchmark hooks of the simulated executors: kernels timed, kernels skipped."""

from __future__ import annotations

import numpy as np

from aclpipe.backends.sim.executor import kernel_clock, kernels_skipped
from aclpipe.tensor import TensorDesc


def _negate(device, stream, buffer) -> None:
    desc = TensorDesc.contiguous((8,), "float32", buffer.address)
    executor = device.backend.op_prepare("Neg", [desc], [desc], {})
    device.backend.op_launch(executor, 0, 0, stream.handle, {"node": "neg"})
    stream.sync()


def test_skipped_kernels_leave_their_outputs_alone_until_the_block_ends(device):
    stream = device.create_stream()
    buffer = device.upload(np.arange(8, dtype=np.float32))
    with kernels_skipped():
        _negate(device, stream, buffer)
    np.testing.assert_array_equal(device.download(buffer, "float32", (8,)), np.arange(8))
    _negate(device, stream, buffer)
    np.testing.assert_array_equal(device.download(buffer, "float32", (8,)), -np.arange(8))


def test_the_kernel_clock_times_each_kernel_run_inside_its_block(device):
    stream = device.create_stream()
    buffer = device.upload(np.arange(8, dtype=np.float32))
    with kernel_clock() as clock:
        _negate(device, stream, buffer)
        _negate(device, stream, buffer)
    _negate(device, stream, buffer)
    assert clock.count == 2 and clock.seconds >= 0
    np.testing.assert_array_equal(device.download(buffer, "float32", (8,)), -np.arange(8))


def test_the_kernel_clock_knows_each_kernel_at_its_fastest(device):
    stream = device.create_stream()
    buffer = device.upload(np.arange(8, dtype=np.float32))
    desc = TensorDesc.contiguous((8,), "float32", buffer.address)
    executor = device.backend.op_prepare("Neg", [desc], [desc], {})
    device.backend.op_set_repeatable(executor)
    with kernel_clock() as clock:
        for _ in range(3):  # one kernel, launched three times
            device.backend.op_launch(executor, 0, 0, stream.handle, {"node": "neg"})
        stream.sync()
    assert len(set(map(id, clock.kernels))) == 1
    assert clock.fastest(clock.kernels[-1:]) == min(clock.spans)
