"""DeviceBuffer and HostBuffer: lifetime, numpy views, and host-access checks."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from aclpipe import ClosedResourceError, HazardError
from aclpipe.testing import latch


def test_device_buffer_close_is_idempotent_and_frees(device):
    before = device.mem_info().free
    buffer = device.alloc(4096, label="weights")
    assert "weights" in repr(buffer) and "4096" in repr(buffer)
    buffer.close()
    buffer.free()
    assert buffer.closed and "freed" in repr(buffer)
    assert device.mem_info().free == before
    with pytest.raises(ClosedResourceError):
        buffer.check_open()


def test_a_collected_buffer_is_freed(device):
    before = device.mem_info().free
    device.alloc(4096)
    gc.collect()
    assert device.mem_info().free == before


def test_numpy_views_with_dtype_shape_and_offset(device):
    host = device.alloc_host(64)
    assert host.numpy().shape == (64,) and host.numpy().dtype == np.uint8
    view = host.numpy("float32", (4, 4))
    view[...] = np.arange(16).reshape(4, 4)
    assert host.numpy("float32", 4, offset=16).tolist() == [4, 5, 6, 7]
    assert host.numpy("int32").shape == (16,)
    assert host.numpy("float16", offset=32).shape == (16,)
    assert host.numpy("bfloat16", (2,)).dtype.itemsize == 2


def test_numpy_view_beyond_the_buffer_is_a_value_error(device):
    host = device.alloc_host(16)
    with pytest.raises(ValueError, match="needs 20 bytes"):
        host.numpy("float32", (5,))
    with pytest.raises(ValueError):
        host.numpy("uint8", 4, offset=14)
    with pytest.raises(ValueError):
        host.numpy("uint8", 4, offset=-1)


@pytest.mark.parametrize("read", [lambda host: host.numpy(), lambda host: host.copy_out("uint8", (32,))],
                         ids=["numpy", "copy_out"])
def test_host_reads_wait_for_no_copy_but_check_ordering(device, read):
    stream = device.create_stream()
    host = device.alloc_host(32)
    source = device.upload(np.full(32, 7, np.uint8))
    with latch(stream):
        stream.memcpy(host, source)
        with pytest.raises(HazardError, match="host view"):
            read(host)
    stream.sync()
    assert (read(host) == 7).all()


def test_writing_a_host_buffer_an_h2d_copy_still_reads_is_a_hazard(device):
    stream = device.create_stream()
    host, target = device.alloc_host(32), device.alloc(32)
    with latch(stream):
        stream.memcpy(target, host)
        with pytest.raises(HazardError):
            host.numpy()[...] = 1
    stream.sync()


def test_closed_host_buffer_refuses_views(device):
    host = device.alloc_host(8)
    host.close()
    host.close()
    with pytest.raises(ClosedResourceError):
        host.numpy()


def test_copy_out_is_a_copy_and_a_host_read(device):
    stream = device.create_stream()
    host, target = device.alloc_host(32), device.alloc(32)
    host.numpy("float32", (8,))[...] = np.arange(8)
    out = host.copy_out("float32", (2, 4))
    assert out.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    out[...] = -1  # the caller's own array
    assert host.numpy("float32", (8,))[0] == 0
    with latch(stream):
        stream.memcpy(target, host)  # a device read of it in flight: reading too is no hazard
        assert host.copy_out("float32", (8,))[7] == 7
    stream.sync()

    host.close()
    with pytest.raises(ClosedResourceError):
        host.copy_out("float32", (8,))


def test_copy_out_reuses_its_view_only_for_the_same_dtype_and_shape(device):
    host = device.alloc_host(32)
    host.numpy("float32", (8,))[...] = np.arange(8)
    shape = (2, 4)
    first = host.copy_out("float32", shape)
    again = host.copy_out("float32", shape)  # the same objects: the view kept from the call before
    assert again.tolist() == first.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]] and again is not first
    assert host.copy_out("int32", shape).dtype == np.int32  # another dtype: another view
    assert host.copy_out("float32", (4, 2)).shape == (4, 2)  # an equal-valued key made anew
    assert host.copy_out("float32", shape).shape == (2, 4)
    host.close()
    with pytest.raises(ClosedResourceError):
        host.copy_out("float32", shape)  # even with the view it kept
