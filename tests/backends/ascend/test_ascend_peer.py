"""Several devices on the ascend backend (fake CANN with two devices): contexts per calling
thread, peer access and copies between devices, events waited on across devices."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import aclpipe
from aclpipe.errors import InvalidArgumentError
from aclpipe.runtime import Device


@pytest.fixture
def two(fake_lib: Path) -> Iterator[tuple[Device, Device]]:
    first, second = aclpipe.open_device("ascend:0"), aclpipe.open_device("ascend:1")
    yield first, second
    second.close()
    first.close()


def test_peer_access_is_checked_and_one_way(two, hooks):
    first, second = two
    assert first.capabilities.peer_access and first.can_access_peer(second)
    with pytest.raises(InvalidArgumentError, match="must differ"):
        first.backend.device_can_access_peer(0)
    source, target = first.upload(np.arange(16, dtype=np.float32)), second.alloc(64)
    stream = first.create_stream()
    with pytest.raises(InvalidArgumentError, match="not enabled peer access"):
        stream.memcpy(target, source)
    first.enable_peer_access(second)
    assert "aclrtDeviceEnablePeerAccess 0 1" in hooks.trace()
    stream.memcpy(target, source)
    stream.sync()
    np.testing.assert_array_equal(second.download(target, "float32", (16,)), np.arange(16))
    with pytest.raises(InvalidArgumentError, match="not enabled peer access"):
        second.create_stream().memcpy(first.alloc(64), target)  # device 1 was granted nothing
    first.disable_peer_access(second)
    with pytest.raises(InvalidArgumentError, match="never enabled"):
        first.disable_peer_access(second)


def test_a_stream_waits_on_another_devices_event(two):
    first, second = two
    first.enable_peer_access(second)
    source, target = first.upload(np.full(64, 3, np.float32)), second.alloc(256)
    pushing, reading = first.create_stream(), second.create_stream()
    pushing.memcpy(target, source)
    reading.wait(pushing.record())
    result = second.alloc_host(256)
    reading.memcpy(result, target)
    reading.sync()
    np.testing.assert_array_equal(result.numpy("float32"), np.full(64, 3, np.float32))


def test_each_calling_thread_gets_the_right_device(two):
    """The fake refuses a call whose stream belongs to another device than the calling thread's
    current context: interleaving both devices from several threads must never trip it."""
    first, second = two
    first.enable_peer_access(second)
    streams = {id(first): first.create_stream(), id(second): second.create_stream()}

    def work(turn: int) -> float:
        device = (first, second)[turn % 2]
        buffer = device.upload(np.full(32, turn, np.float32))
        copy = device.alloc(128)
        streams[id(device)].memcpy(copy, buffer)
        streams[id(device)].sync()
        return float(device.download(copy, "float32", (32,))[0])

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(work, range(16))) == [float(turn) for turn in range(16)]
