"""Pipeline.bind_storage: a node's output kept in a caller's device buffer, across runs and programs."""

from __future__ import annotations

import numpy as np
import pytest

import aclpipe
from aclpipe import Graph, Pipeline


def _graph() -> Graph:
    g = Graph("kept")
    x = g.input("x", ["batch", 8])
    kept = g.op("Relu", x, name="keep", outputs=["kept"])
    g.output("y", g.op("Adds", kept, other=1.0))
    return g


def test_a_bound_value_is_written_to_the_callers_buffer_and_takes_no_arena_room(device):
    graph = _graph()
    buffer = device.upload(np.zeros((4, 8), np.float32))
    try:
        with Pipeline(graph, device, depth=1, streams=1) as pipe:
            pipe.bind_storage("kept", buffer)
            x = np.arange(-8, 8, dtype=np.float32).reshape(2, 8)
            y = pipe.run_sync(x=x)["y"]
            plan = pipe.plan_for(x=(2, 8))
        kept = device.download(buffer, "float32", (2, 8))  # past it: what the kernel may touch
    finally:
        buffer.close()
    np.testing.assert_array_equal(y, np.maximum(x, 0) + 1)
    np.testing.assert_array_equal(kept, np.maximum(x, 0))  # the program's value lives there
    assert plan.values["kept"].arena_offset is None


def test_a_buffer_of_another_device_is_refused(device):
    other = aclpipe.open_device("sim:1")
    buffer = other.alloc(256)
    try:
        with Pipeline(_graph(), device, depth=1) as pipe, pytest.raises(ValueError, match="runs on"):
            pipe.bind_storage("kept", buffer)
    finally:
        buffer.close()
        other.close()
