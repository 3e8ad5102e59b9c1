"""Simulated device memory: opaque addresses, poison, bounds and alignment with ACL codes."""

from __future__ import annotations

import numpy as np
import pytest

import aclpipe
from aclpipe import BackendError, DeviceFault, HazardError, InvalidArgumentError
from aclpipe.backends.protocol import MemcpyKind
from aclpipe.backends.sim.engines import Cost
from aclpipe.backends.sim.memory import DEVICE_BASE, POISON_BYTE
from aclpipe.testing import latch


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


# -- documented rules (hicann/runtime 11-01, 11-03, acl_rt.h, 25-01) -------------------------------
def test_allocations_start_64_byte_aligned(device):
    """11-01, aclrtMalloc: "the start address is 64-byte aligned"."""
    addresses = [device.alloc(size).address for size in (1, 33, 100, 4096, 7)]
    assert all(address % 64 == 0 for address in addresses)


def test_a_32_byte_aligned_device_to_device_copy_is_refused(device):
    """acl_rt.h, aclrtMemcpyAsync restriction: on-chip D2D copies need 64-byte aligned addresses."""
    stream = device.create_stream()
    source, target = device.alloc(256), device.alloc(256)
    with pytest.raises(InvalidArgumentError) as caught:
        device.backend.memcpy_async(target.address, source.address + 32, 64, MemcpyKind.DEVICE_TO_DEVICE,
                                    stream.handle)
    assert caught.value.code == 107008 and "64-byte" in str(caught.value)
    with pytest.raises(InvalidArgumentError):
        device.backend.memcpy_async(target.address + 32, source.address, 64, MemcpyKind.DEVICE_TO_DEVICE,
                                    stream.handle)
    device.backend.memcpy_async(target.address + 64, source.address + 128, 64, MemcpyKind.DEVICE_TO_DEVICE,
                                stream.handle)
    stream.sync()


def test_asynchronous_host_to_host_copies_are_not_supported(device):
    """11-03, aclrtMemcpyAsync constraints: EP form returns ACL_ERROR_RT_FEATURE_NOT_SUPPORT for H2H."""
    stream = device.create_stream()
    with pytest.raises(BackendError) as caught:
        stream.memcpy(device.alloc_host(64), device.alloc_host(64))
    assert caught.value.code == 207000


@pytest.mark.parametrize(("reads", "code"), [(True, 507042), (False, 507043)])
def test_a_kernel_touching_freed_memory_is_an_ai_core_trap_not_a_memory_uce(reads, code):
    """25-01_aclError.md: 507053 is an uncorrectable memory error; a freed buffer is an access trap."""
    with aclpipe.open_device("sim", sanitizer=False) as device:
        stream = device.create_stream()
        buffer = device.alloc(64)
        with latch(stream):
            region = [(buffer.address, 64)]
            launch(device, stream, reads=region if reads else (), writes=() if reads else region)
            buffer.close()
        with pytest.raises(DeviceFault) as caught:
            stream.sync()
        assert caught.value.code == code and "use after free" in str(caught.value)


def test_a_copy_touching_freed_memory_is_a_dma_error():
    with aclpipe.open_device("sim", sanitizer=False) as device:
        stream = device.create_stream()
        source, target = device.alloc(64), device.alloc(64)
        with latch(stream):
            stream.memcpy(target, source)
            source.close()
        with pytest.raises(DeviceFault) as caught:
            stream.sync()
        assert caught.value.code == 507013


def test_kernels_touch_the_padding_after_their_outputs():
    """11-01: pieces carved from one allocation need ALIGN_UP(len, 32) + 32 bytes: kernels may touch
    them, so an unpadded neighbour is clobbered (here, without the sanitizer, it reads garbage)."""
    with aclpipe.open_device("sim", sanitizer=False) as device:
        stream = device.create_stream()
        block = device.upload(np.zeros(64, np.float32))  # 256 bytes
        launch(device, stream, writes=[(block.address, 64)])  # 64 bytes: may touch up to byte 96
        stream.sync()
        seen = device.download(block, "float32", (64,))
        assert (seen[:16] == 0).all()  # the output itself is the kernel's (a no-op here)
        assert np.isnan(seen[16:24]).all()  # the 32 bytes of padding: clobbered
        assert (seen[24:] == 0).all()  # beyond the piece: untouched


def test_a_bound_kernel_clobbers_its_padding_on_every_launch():
    """The guard keeps its padding's bytes from the first run: a neighbour rewritten between
    two launches of one bound kernel is clobbered again by the second, and a freed allocation
    is not scribbled on (its launch is refused as a use after free)."""
    with aclpipe.open_device("sim", sanitizer=False) as device:
        stream = device.create_stream()
        block, zeros = device.upload(np.zeros(64, np.float32)), device.upload(np.zeros(64, np.float32))
        backend = device.backend
        bound = backend.bind_kernel(lambda: None, writes=[(block.address, 64)], cost=Cost())
        for _ in range(2):
            backend.submit_kernel(stream.handle, "probe", bound, {})
            stream.sync()
            seen = device.download(block, "float32", (64,))
            assert (seen[:16] == 0).all() and np.isnan(seen[16:24]).all() and (seen[24:] == 0).all()
            stream.memcpy(block, zeros)  # the neighbour writes again
            stream.sync()
            assert (device.download(block, "float32", (64,)) == 0).all()
        with latch(stream):
            backend.submit_kernel(stream.handle, "probe", bound, {})
            block.close()
        with pytest.raises(DeviceFault) as caught:
            stream.sync()
        assert caught.value.code == 507043 and "use after free" in str(caught.value)


def test_the_sanitizer_reports_a_read_of_a_clobbered_neighbour(device):
    stream = device.create_stream()
    block = device.alloc(256)
    launch(device, stream, writes=[(block.address + 64, 64)], name="neighbour")
    launch(device, stream, writes=[(block.address, 64)], name="left")  # its padding covers the neighbour
    with pytest.raises(HazardError, match="padding") as caught:
        launch(device, stream, reads=[(block.address + 64, 64)], name="reader")
    assert "left" in caught.value.first and "reader" in caught.value.second
    launch(device, stream, writes=[(block.address + 64, 64)], name="rewrite")
    launch(device, stream, reads=[(block.address + 64, 64)], name="reader")  # rewritten since: fine
    stream.sync()


def test_an_allocation_the_host_cannot_hold_is_refused_before_numpy_is_asked(device, monkeypatch):
    # Simulated memory lives in host RAM: filling more than the host has would get the process
    # killed, so a large request beyond what the host has available is refused (207001) first,
    # and the device's counters are left as they were.
    from aclpipe.backends.sim import memory

    monkeypatch.setattr(memory, "_host_available_bytes", lambda: 100 << 20)
    used = device.mem_info().used
    with pytest.raises(aclpipe.DeviceOutOfMemory, match="device allocation of 134217728 bytes: the simulator "
                                                        "keeps it in host memory, which has 104857600") as caught:
        device.alloc(128 << 20)
    assert caught.value.code == 207001 and caught.value.requested is not None
    with pytest.raises(aclpipe.DeviceOutOfMemory, match="pinned host allocation of 134217728 bytes"):
        device.alloc_host(128 << 20)
    assert device.mem_info().used == used
    device.alloc(1 << 20).close()  # what the host can hold still works


def test_numpy_running_out_of_host_memory_is_a_device_out_of_memory(device, monkeypatch):
    from aclpipe.backends.sim import memory

    def no_memory(*args: object, **kwargs: object) -> np.ndarray:
        raise MemoryError("Unable to allocate")

    used = device.mem_info().used
    monkeypatch.setattr(memory.np, "full", no_memory)
    with pytest.raises(aclpipe.DeviceOutOfMemory, match="the host could not provide the memory"):
        device.alloc(4096)
    with pytest.raises(aclpipe.DeviceOutOfMemory, match="pinned host allocation of 4096 bytes"):
        device.alloc_host(4096)
    monkeypatch.undo()
    assert device.mem_info().used == used


def test_a_closed_device_lets_go_of_its_bytes_at_once():
    """The backend and its satellites refer to each other, so the backend waits for a cycle
    collection; its memory must not (the suite once peaked at 10 GB of closed devices)."""
    import aclpipe

    device = aclpipe.open_device("sim", sanitizer=True)
    buffer = device.upload(np.ones(1 << 20, np.float32))
    allocation = device.backend.memory.live_allocations()[0]
    assert allocation.data.nbytes >= 4 << 20
    device.close()
    assert allocation.data.nbytes == 0 and allocation.sanitizer_state is None
    buffer.close()  # after the device: a no-op, nothing to free
