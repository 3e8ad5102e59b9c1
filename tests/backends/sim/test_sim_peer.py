"""Several simulated devices in one process: address windows, peer access and peer copies."""

from __future__ import annotations

import numpy as np
import pytest

import aclpipe
from aclpipe.backends.protocol import peer_access
from aclpipe.errors import HazardError, InvalidArgumentError


@pytest.fixture
def pair():
    first, second = aclpipe.open_device("sim:0"), aclpipe.open_device("sim:1")
    yield first, second
    first.close()
    second.close()


def test_each_device_has_its_own_addresses(pair):
    first, second = pair
    a, b = first.alloc(64), second.alloc(64)
    assert a.address != b.address
    assert first.backend.memory.is_device(a.address) and not first.backend.memory.is_device(b.address)


def test_can_access_peer_needs_two_different_existing_devices(pair):
    first, second = pair
    assert first.can_access_peer(second) and second.can_access_peer(first)
    with pytest.raises(InvalidArgumentError, match="another device"):
        first.backend.device_can_access_peer(0)
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        first.backend.device_can_access_peer(99)
    with pytest.raises(TypeError):
        first.can_access_peer("sim:1")  # type: ignore[arg-type]


def test_a_copy_to_a_peer_is_refused_until_access_is_enabled(pair):
    first, second = pair
    source, target = first.upload(np.arange(16, dtype=np.float32)), second.alloc(64)
    stream = first.create_stream()
    with pytest.raises(InvalidArgumentError, match="has not enabled peer access"):
        stream.memcpy(target, source)
    first.enable_peer_access(second)
    stream.memcpy(target, source)
    stream.sync()
    np.testing.assert_array_equal(second.download(target, "float32", (16,)), np.arange(16))


def test_access_is_one_way_and_can_be_disabled(pair):
    first, second = pair
    first.enable_peer_access(second)
    here, there = first.alloc(64), second.upload(np.ones(16, np.float32))
    with pytest.raises(InvalidArgumentError, match="sim:0 has not enabled|has not enabled peer access"):
        second.create_stream().memcpy(here, there)  # the peer's own streams were not granted anything
    first.disable_peer_access(second)
    with pytest.raises(InvalidArgumentError, match="has not enabled peer access"):
        first.create_stream().memcpy(here, there)
    with pytest.raises(InvalidArgumentError, match="never enabled"):
        first.disable_peer_access(second)


def test_enable_refuses_flags_and_itself(pair):
    first, _ = pair
    with pytest.raises(InvalidArgumentError, match="flags"):
        first.backend.device_enable_peer_access(1, 1)
    with pytest.raises(InvalidArgumentError, match="another device"):
        first.backend.device_enable_peer_access(0)


def test_another_opened_instance_of_the_same_device_is_not_a_peer(pair):
    first, second = pair
    again = aclpipe.open_device("sim:0")
    try:
        first.enable_peer_access(second)
        with pytest.raises(InvalidArgumentError, match="another opened instance"):
            first.create_stream().memcpy(again.alloc(64), first.alloc(64))
    finally:
        again.close()


def test_the_sanitizer_orders_peer_copies_only_through_events_across_devices(pair):
    first, second = pair
    first.enable_peer_access(second)
    source, target = first.upload(np.arange(16, dtype=np.float32)), second.alloc(64)
    pushing, reading = first.create_stream(), second.create_stream()
    out = second.alloc_host(64)
    pushing.memcpy(target, source)
    with pytest.raises(HazardError, match="not ordered after"):
        reading.memcpy(out, target)  # no wait on the push: a race across devices
    reading.wait(pushing.record())
    reading.memcpy(out, target)
    reading.sync()
    np.testing.assert_array_equal(out.numpy("float32"), np.arange(16))


def test_a_peer_copy_holds_the_link_engine_in_traces(pair):
    first, second = pair
    first.enable_peer_access(second)
    source, target = first.upload(np.zeros(256, np.float32)), second.alloc(1024)
    stream = first.create_stream()
    with aclpipe.record_trace(first) as recording:
        stream.memcpy(target, source)
        stream.sync()
    engines = {record.engine for record in recording.trace.records if record.kind == "copy"}
    assert engines == {"peer:1"}


def test_peer_access_is_a_capability():
    device = aclpipe.open_device("sim:2")
    try:
        assert device.capabilities.peer_access
        assert peer_access(device.backend) is device.backend
        assert device.backend.spec.peer_bytes_per_s > 0
    finally:
        device.close()
