"""The runtime's capture object: record an origin stream's work (and the streams that join it)
into a model, replay it on any stream, close it once; a capture that fails part way leaves the
origin out of capture with nothing behind."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import aclpipe
from aclpipe.errors import BackendError
from aclpipe.runtime.capture import Capture, can_capture


def test_a_captured_copy_replays_on_another_stream_as_often_as_asked(device):
    origin, other = device.create_stream(), device.create_stream()
    source = device.upload(np.arange(16, dtype=np.float32))
    target = device.alloc(64)
    with Capture(origin) as capture:
        origin.memcpy(target, source, 64)
    run = capture.run
    assert run is not None and run.model is not None
    for value in (1.0, 2.0):  # the source changes between replays, the model copies it again
        source_values = np.full(16, value, np.float32)
        staged = device.upload(source_values)
        other.memcpy(source, staged, 64)
        run.replay(other, {"run": int(value)})
        other.sync()
        staged.close()
        np.testing.assert_array_equal(device.download(target, "float32", (16,)), source_values)
    run.close()
    run.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        run.replay(other)
    for buffer in (source, target):
        buffer.close()


def test_a_capture_that_fails_part_way_ends_and_leaves_no_model(device):
    origin = device.create_stream()
    with pytest.raises(RuntimeError, match="part way"):
        with Capture(origin):
            raise RuntimeError("part way")
    with Capture(origin) as capture:  # the origin left capture: a new one begins
        pass
    assert capture.run is not None
    capture.run.close()


def test_a_backend_without_capture_says_so():
    with aclpipe.open_device("sim") as device:
        device.backend.capabilities = dataclasses.replace(device.backend.capabilities, graph_capture=False)
        assert not can_capture(device)
        with pytest.raises(NotImplementedError, match="cannot capture"):
            Capture(device.create_stream())


def test_the_runtime_refusing_the_end_abandons_the_capture(device):
    origin, joined = device.create_stream(), device.create_stream()
    fork = device.create_event()
    with pytest.raises(BackendError):
        with Capture(origin):
            origin.record(fork)
            joined.wait(fork)  # joins the capture and never rejoins: the end is refused
    with Capture(origin) as capture:
        pass
    capture.run.close()
