"""The runtime's Executor: phase one, made repeatable where the op allows, re-pointed, launched
and destroyed; a refusal names the node it was for."""

from __future__ import annotations

import numpy as np
import pytest

from aclpipe.errors import AclpipeError
from aclpipe.runtime.executor import Executor
from aclpipe.tensor import TensorDesc


def test_an_executor_is_prepared_repeated_repointed_and_destroyed(device):
    stream = device.create_stream()
    x = device.upload(np.arange(8, dtype=np.float32))
    y = device.upload(np.full(8, 2, np.float32))
    out = device.alloc(32)
    descs = [TensorDesc.contiguous((8,), "float32", buffer.address) for buffer in (x, y, out)]
    executor = Executor.prepare(device.backend, "Add", descs[:2], descs[2:], {"alpha": 1.0}, repeatable=True)
    assert executor.repeatable and executor.workspace_size == 0 and executor.op == "Add"
    executor.launch(0, 0, stream.handle)
    stream.sync()
    np.testing.assert_array_equal(device.download(out, "float32", (8,)), np.arange(8) + 2)
    executor.point([descs[1], descs[0]], output=False)  # the same shapes, swapped
    executor.launch(0, 0, stream.handle)
    stream.sync()
    np.testing.assert_array_equal(device.download(out, "float32", (8,)), np.arange(8) + 2)
    executor.destroy()
    assert executor.handle.destroyed
    for buffer in (x, y, out):
        buffer.close()


def test_a_refusal_names_the_node_it_was_for(device):
    bad = [TensorDesc.contiguous((8,), "float32", 0x1000), TensorDesc.contiguous((7,), "float32", 0x2000)]
    with pytest.raises(AclpipeError) as caught:
        Executor.prepare(device.backend, "Add", bad, [TensorDesc.contiguous((8,), "float32", 0x3000)],
                         {"alpha": 1.0}, node="n7")
    assert caught.value.context.get("node") == "n7" and caught.value.context.get("op") == "Add"
