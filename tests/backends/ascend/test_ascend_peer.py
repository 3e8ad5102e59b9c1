"""Several devices on the ascend backend (fake CANN with two devices): contexts per calling
thread, peer access and copies between devices, events waited on across devices."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import anyio
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


def _graph() -> aclpipe.Graph:
    rng = np.random.default_rng(3)
    g = aclpipe.Graph("two-devices")
    h = g.input("x", shape=(None, 16), dtype="float32")
    for layer in range(4):
        h = g.relu(g.matmul(h, g.constant(f"w{layer}", rng.standard_normal((16, 16)).astype(np.float32))))
    g.output("y", h)
    return g


async def _outputs(device: object, batches: list[np.ndarray], **options: object) -> list[np.ndarray]:
    async with aclpipe.Pipeline(_graph(), device, **options) as pipe:  # type: ignore[arg-type]
        return [out["y"] async for out in pipe.stream({"x": batch} for batch in batches)]


@pytest.mark.parametrize("split", ["replicas", "stages"])
def test_a_pipeline_over_both_devices_matches_one_simulated_device(any_fake_lib, split):
    """Completion host functions, report threads and the event loop each call into both devices:
    every call must find its own device's context current."""
    batches = [np.random.default_rng(seed).standard_normal((4, 16)).astype(np.float32) for seed in range(6)]
    both = anyio.run(partial(_outputs, "ascend:0,1", batches, split=split))
    sim = aclpipe.open_device("sim:0")
    try:
        expected = anyio.run(_outputs, sim, batches)
    finally:
        sim.close()
    for got, want in zip(both, expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
