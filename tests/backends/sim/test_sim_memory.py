"""Simulated device memory: opaque addresses, poison, bounds and alignment with ACL codes."""

from __future__ import annotations

import numpy as np
import pytest

from aclpipe import InvalidArgumentError
from aclpipe.backends.protocol import MemcpyKind
from aclpipe.backends.sim.engines import Cost
from aclpipe.backends.sim.memory import DEVICE_BASE, POISON_BYTE


def launch(device, stream, reads=(), writes=(), name="probe"):
    device.backend.launch_kernel(stream.handle, name, lambda: None, reads=reads, writes=writes, cost=Cost())


def test_device_addresses_are_opaque_and_not_host_memory(device):
    buffer = device.alloc(256)
    host = device.alloc_host(256)
    memory = device.backend.memory
    assert buffer.address >= DEVICE_BASE and memory.is_device(buffer.address)
    assert not memory.is_device(host.address)
    assert host.address == host.numpy().ctypes.data  # pinned host memory is real host memory
    assert buffer.address % 32 == 0


def test_addresses_are_never_reused(device):
    first = device.alloc(64)
    address = first.address
    first.close()
    assert device.alloc(64).address != address


def test_fresh_memory_is_poisoned(device):
    buffer = device.alloc(64)
    assert (device.download(buffer, "uint8", (64,)) == POISON_BYTE).all()
    assert np.isnan(device.download(buffer, "float32", (16,))).all()
    assert (device.download(buffer, "int32", (16,)) == -1).all()


def test_freed_memory_is_poisoned_and_stale_addresses_fail_loudly(device):
    stream = device.create_stream()
    buffer = device.upload(np.zeros(64, np.uint8))
    allocation = device.backend.memory.starting_at(buffer.address)
    address = buffer.address
    buffer.close()
    assert (allocation.data == POISON_BYTE).all()
    host = device.alloc_host(64)
    with pytest.raises(InvalidArgumentError, match="already freed") as caught:
        device.backend.memcpy_async(host.address, address, 64, MemcpyKind.DEVICE_TO_HOST, stream.handle)
    assert caught.value.code == 107000


def test_copy_past_the_end_names_the_overrun(device):
    stream = device.create_stream()
    buffer, host = device.alloc(64), device.alloc_host(128)
    with pytest.raises(InvalidArgumentError, match="run past the end .* by 64 bytes") as caught:
        device.backend.memcpy_async(buffer.address, host.address, 128, MemcpyKind.HOST_TO_DEVICE, stream.handle)
    assert caught.value.code == 107000


def test_copy_kind_must_match_the_buffers(device):
    stream = device.create_stream()
    buffer, host = device.alloc(64), device.alloc_host(64)
    with pytest.raises(InvalidArgumentError, match="not a pinned host buffer"):
        device.backend.memcpy_async(buffer.address, buffer.address, 64, MemcpyKind.DEVICE_TO_HOST, stream.handle)
    with pytest.raises(InvalidArgumentError, match="not device memory"):
        device.backend.memcpy_async(host.address, host.address, 64, MemcpyKind.DEVICE_TO_DEVICE, stream.handle)


def test_kernel_address_must_be_32_byte_aligned(device):
    stream, buffer = device.create_stream(), device.alloc(128)
    with pytest.raises(InvalidArgumentError, match="not 32-byte aligned") as caught:
        launch(device, stream, reads=[(buffer.address + 16, 32)])
    assert caught.value.code == 107008


def test_kernel_on_host_memory_is_refused(device):
    stream, host = device.create_stream(), device.alloc_host(64)
    with pytest.raises(InvalidArgumentError, match="pinned host buffer; kernels take device addresses"):
        launch(device, stream, writes=[(host.address, 64)])


def test_kernel_region_past_the_end_is_refused(device):
    stream, buffer = device.create_stream(), device.alloc(64)
    with pytest.raises(InvalidArgumentError, match="run past the end"):
        launch(device, stream, writes=[(buffer.address, 96)])


@pytest.mark.parametrize("sanitizer", [True, False])
def test_double_free_is_acl_memory_free_error(sanitizer):
    import aclpipe

    with aclpipe.open_device("sim", sanitizer=sanitizer) as device:
        address = device.backend.mem_alloc(64)
        device.backend.mem_free(address)
        with pytest.raises(InvalidArgumentError, match="already freed") as caught:
            device.backend.mem_free(address)
        assert caught.value.code == 207002
        with pytest.raises(InvalidArgumentError):
            device.backend.mem_free(address + 32)


def test_allocation_sizes_are_positive(device):
    with pytest.raises(InvalidArgumentError):
        device.backend.mem_alloc(0)
