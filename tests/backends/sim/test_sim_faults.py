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


@pytest.mark.parametrize("requested, spec, effective", [
    (None, "atlas-a2", 1091.0), (None, "atlas-310p", 547.0), (0, "atlas-a2", 1091.0), (5000, "atlas-a2", 1091.0),
    (1, "atlas-a2", 1091.0 / 254), (5, "atlas-a2", 2 * 1091.0 / 254), (1091.0 / 254, "atlas-a2", 1091.0 / 254),
])
def test_the_op_execute_timeout_is_the_products_default_or_rounded_up_to_its_interval(requested, spec, effective):
    """12_execution_control.md, aclrtSetOpExecuteTimeOut: 1091 s on A2, 547 on inference cards; 0 is
    the maximum; a set timeout is rounded up to interval x N, N <= 254."""
    import aclpipe

    with aclpipe.open_device("sim", spec=spec, op_execute_timeout=requested, sanitizer=False) as device:
        assert device.capabilities.op_execute_timeout == pytest.approx(effective)


def test_a_hung_kernel_fails_with_an_aicore_timeout_after_the_op_execute_timeout():
    import aclpipe

    # 1 s rounds up to A2's interval (1091 / 254 s); time_scale makes that 43 ms of wall time.
    with aclpipe.open_device("sim", op_execute_timeout=1, time_scale=0.01, sanitizer=False) as device:
        stream, ran = device.create_stream(), []
        device.inject_fault("kernel", "stuck", hang=True)
        kernel(device, stream, "stuck", ran)
        kernel(device, stream, "after", ran)
        with pytest.raises(DeviceFault) as caught:
            stream.sync(10)
        assert caught.value.code == 507014 and "op execute timeout of 4.29" in str(caught.value)
        assert ran == ["after"]  # continue on failure: the next kernel ran
        device.inject_fault("copy", hang=True)  # copies have no op timeout: they hang until released
        target = device.alloc(64)
        stream.memset(target, 0)
        with pytest.raises(DeviceFault) as caught:
            stream.sync(0.2)
        assert caught.value.code == 507046
        device.release_hangs()
        stream.sync(10)


def test_a_negative_op_execute_timeout_is_refused():
    import aclpipe

    with pytest.raises(ValueError, match="op_execute_timeout must be >= 0"):
        aclpipe.open_device("sim", op_execute_timeout=-1)
