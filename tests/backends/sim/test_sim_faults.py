"""Fault injection: kernel, copy, alloc and host-function faults, hangs, skip and times."""

from __future__ import annotations

import pytest
from sim_kernels import kernel

from aclpipe import DeviceFault, DeviceOutOfMemory


def test_kernel_fault_matches_the_node_and_fires_once(device):
    stream, ran = device.create_stream(), []
    device.inject_fault("kernel", "conv3")
    kernel(device, stream, "aclnnConvolution", ran, node="conv3")
    with pytest.raises(DeviceFault, match="conv3"):
        stream.sync()
    kernel(device, stream, "aclnnConvolution", ran, node="conv3")
    stream.sync()
    assert ran == ["aclnnConvolution"]


def test_skip_and_times_and_a_custom_code(device):
    stream, ran = device.create_stream(), []
    rule = device.inject_fault("kernel", "k", skip=1, times=None, code=507014)
    kernel(device, stream, "k", ran)
    stream.sync()
    for _ in range(2):
        kernel(device, stream, "k", ran)
        with pytest.raises(DeviceFault) as caught:
            stream.sync()
        assert caught.value.code == 507014
    assert ran == ["k"] and rule.fired == 2


def test_copy_fault(device):
    stream = device.create_stream()
    buffer = device.alloc(64)
    device.inject_fault("copy")
    stream.memset(buffer, 1)
    with pytest.raises(DeviceFault) as caught:
        stream.sync()
    assert caught.value.code == 507013  # a DMA error; 507053 is an uncorrectable memory error


def test_alloc_fault_raises_at_the_call_with_fields(device):
    device.inject_fault("alloc", "activations")
    with pytest.raises(DeviceOutOfMemory) as caught:
        device.alloc(1024, label="activations")
    assert caught.value.requested == 1024 and caught.value.limit is not None
    device.alloc(1024, label="activations")


def test_host_function_fault(device):
    stream = device.create_stream()
    device.inject_fault("host_func", "notify")

    def notify():
        pass

    stream.host_func(notify)
    with pytest.raises(DeviceFault, match="injected fault in host function notify"):
        stream.sync()


@pytest.mark.parametrize("kind", ["kernel", "copy"])
def test_a_hang_times_out_the_sync_and_continues_once_released(device, kind):
    stream, ran = device.create_stream(), []
    buffer = device.alloc(64)
    device.inject_fault(kind, hang=True)
    if kind == "kernel":
        kernel(device, stream, "stuck", ran)
    else:
        stream.memset(buffer, 1)
    with pytest.raises(DeviceFault) as caught:
        stream.sync(timeout=0.05)
    assert caught.value.code == 507046
    device.release_hangs()
    stream.sync(timeout=10)
    assert ran == (["stuck"] if kind == "kernel" else [])


def test_bad_fault_rules_are_value_errors(device):
    with pytest.raises(ValueError, match="fault kind"):
        device.inject_fault("disk")
    with pytest.raises(ValueError, match="cannot hang"):
        device.inject_fault("alloc", hang=True)
