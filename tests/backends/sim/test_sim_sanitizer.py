"""The sanitizer: races, use after free and early host reads raise HazardError; ordered code does not."""

from __future__ import annotations

import numpy as np
import pytest

import aclpipe
from aclpipe import HazardError
from aclpipe.backends.sim.engines import Cost
from aclpipe.tensor import TensorDesc
from aclpipe.testing import latch


def kernel(device, stream, reads=(), writes=(), node="k"):
    device.backend.launch_kernel(stream.handle, "kernel", lambda: None, cost=Cost(), context={"node": node},
                                 reads=[(b.address, b.nbytes) for b in reads],
                                 writes=[(b.address, b.nbytes) for b in writes])


@pytest.mark.parametrize("first_writes, second_writes", [(True, False), (False, True), (True, True)])
def test_unordered_accesses_on_two_streams_race(device, first_writes, second_writes):
    a, b = device.create_stream(), device.create_stream()
    data = device.alloc(256)
    with latch(a):
        kernel(device, a, **{"writes" if first_writes else "reads": [data]}, node="producer")
        with pytest.raises(HazardError) as caught:
            kernel(device, b, **{"writes" if second_writes else "reads": [data]}, node="consumer")
    error = caught.value
    assert a.name in error.first and "producer" in error.first
    assert b.name in error.second and "consumer" in error.second
    a.sync()


def test_two_reads_do_not_race(device):
    a, b = device.create_stream(), device.create_stream()
    data = device.upload(np.zeros(64, np.uint8))
    kernel(device, a, reads=[data])
    kernel(device, b, reads=[data])
    a.sync()
    b.sync()


def test_bytes_apart_by_the_padding_do_not_race(device):
    a, b = device.create_stream(), device.create_stream()
    data = device.alloc(160)
    device.backend.launch_kernel(a.handle, "left", lambda: None, writes=[(data.address, 64)])
    # ALIGN_UP(64, 32) + 32 = 96: the left kernel may touch bytes up to 96, not beyond.
    device.backend.launch_kernel(b.handle, "right", lambda: None, writes=[(data.address + 96, 64)])
    a.sync()
    b.sync()


def test_a_neighbour_inside_the_padding_races(device):
    """11-01: kernels may touch ALIGN_UP(len, 32) + 32 bytes, so an unpadded neighbour is not disjoint."""
    a, b = device.create_stream(), device.create_stream()
    data = device.alloc(128)
    device.backend.launch_kernel(a.handle, "left", lambda: None, writes=[(data.address, 64)])
    with pytest.raises(HazardError, match="padding write"):
        device.backend.launch_kernel(b.handle, "right", lambda: None, writes=[(data.address + 64, 64)])
    a.sync()


def test_ordered_cross_stream_producer_consumer_is_not_a_hazard(device):
    producer, consumer = device.create_stream(), device.create_stream()
    data, out = device.alloc(256), device.alloc(256)
    for _ in range(3):  # repeated: the producer overwrites only after the consumer's event
        kernel(device, producer, writes=[data])
        consumer.wait(producer.record())
        kernel(device, consumer, reads=[data], writes=[out])
        producer.wait(consumer.record())
    producer.sync()
    consumer.sync()


def test_same_stream_reuse_is_not_a_hazard(device):
    stream = device.create_stream()
    scratch, out = device.alloc(256), device.alloc(256)
    for _ in range(3):
        kernel(device, stream, writes=[scratch])
        kernel(device, stream, reads=[scratch], writes=[out])
    stream.sync()


def test_order_through_the_host_after_a_sync_is_not_a_hazard(device):
    a, b = device.create_stream(), device.create_stream()
    data = device.alloc(256)
    kernel(device, a, writes=[data])
    a.sync()  # the host now knows; everything it enqueues later is ordered after
    kernel(device, b, writes=[data])
    b.sync()


def test_free_while_a_copy_may_still_read_is_a_use_after_free(device):
    stream = device.create_stream()
    data, copy = device.alloc(256), device.alloc(256)
    with latch(stream):
        stream.memcpy(copy, data)
        with pytest.raises(HazardError, match="free of device allocation"):
            data.close()
    stream.sync()


def test_free_after_sync_is_fine(device):
    stream = device.create_stream()
    data, copy = device.alloc(256), device.alloc(256)
    stream.memcpy(copy, data)
    stream.sync()
    data.close()


def test_free_after_an_event_sync_covering_the_use_is_fine(device):
    stream = device.create_stream()
    data, copy = device.alloc(256), device.alloc(256)
    stream.memcpy(copy, data)
    done = stream.record()
    stream.memset(copy, 0)  # later work still in flight does not matter
    done.sync()
    data.close()
    stream.sync()


def test_reading_a_host_buffer_before_its_d2h_copy_is_a_hazard(device):
    stream = device.create_stream()
    data, host = device.upload(np.arange(32, dtype=np.uint8)), device.alloc_host(32)
    with latch(stream):
        stream.memcpy(host, data)
        with pytest.raises(HazardError, match="host view"):
            host.numpy()
    stream.sync()
    assert (host.numpy() == np.arange(32)).all()


def test_a_host_function_tells_the_host_what_ran_before_it(device):
    # Completion through a host function (the pipeline's path) orders later host reads.
    stream = device.create_stream()
    data, host = device.upload(np.ones(16, np.uint8)), device.alloc_host(16)
    stream.memcpy(host, data)
    stream.host_func(lambda: None)
    stream.sync()
    assert (host.numpy() == 1).all()


def test_a_refused_launch_leaves_no_trace(device):
    a, b = device.create_stream(), device.create_stream()
    data = device.alloc(64)
    with latch(a):
        kernel(device, a, writes=[data])
        with pytest.raises(HazardError):
            kernel(device, b, writes=[data])
    a.sync()
    b.wait(a.record())
    kernel(device, b, writes=[data])  # the refused access must not haunt this ordered one
    b.sync()


def test_without_the_sanitizer_nothing_is_checked():
    import aclpipe

    with aclpipe.open_device("sim", sanitizer=False) as device:
        a, b = device.create_stream(), device.create_stream()
        data = device.alloc(64)
        kernel(device, a, writes=[data])
        kernel(device, b, writes=[data])
        device.sync()


def test_the_sanitizer_is_on_by_default_and_switched_off_explicitly(monkeypatch):
    monkeypatch.delenv("ACLPIPE_SANITIZER", raising=False)
    with aclpipe.open_device("sim") as device:
        assert device.capabilities.sanitizer and "sanitizer on" in device.describe()
    with aclpipe.open_device("sim", sanitizer=False) as device:
        assert not device.capabilities.sanitizer
    monkeypatch.setenv("ACLPIPE_SANITIZER", "0")
    with aclpipe.open_device("sim") as device:
        assert not device.capabilities.sanitizer


def test_destroying_an_executor_whose_launch_may_run_is_a_hazard(device):
    stream = device.create_stream()
    data = device.upload(np.ones(8, np.float32))
    desc = TensorDesc.contiguous((8,), "float32", data.address)
    backend = device.backend
    executor = backend.op_prepare("Neg", [desc], [desc], {})
    backend.op_set_repeatable(executor)
    with latch(stream):
        backend.op_launch(executor, 0, 0, stream.handle, {"node": "neg"})
        with pytest.raises(HazardError, match="aclDestroyAclOpExecutor") as caught:
            backend.op_destroy(executor)
        assert "neg" in caught.value.first
    stream.sync()
    backend.op_destroy(executor)  # the host knows the launch finished: fine
