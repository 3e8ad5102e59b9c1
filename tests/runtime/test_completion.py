"""The completion host function's copies: made on the runtime's thread, before its value is
published, into arrays made fresh for each enqueue; the Python fallback makes the same ones."""

from __future__ import annotations

import anyio
import numpy as np
import pytest

from aclpipe.runtime.completion import COUNTER_LENGTH, HostCopies
from aclpipe.runtime.completion import host_function as completion
from aclpipe.runtime.completion.timeline import Timeline
from aclpipe.testing import latch


def test_each_fresh_table_copies_into_new_arrays_shaped_like_the_sources():
    sources = [np.arange(6, dtype=np.float32).reshape(2, 3), np.zeros(0, np.int64)]
    copies = HostCopies(sources)
    table, arrays = copies.fresh()
    again, others = copies.fresh()
    assert len(table) == len(again) == 2
    for array, other, source in zip(arrays, others, sources, strict=True):
        assert array.shape == source.shape and array.dtype == source.dtype
        assert not np.shares_memory(array, source) and not np.shares_memory(array, other)
    assert [int(entry.nbytes) for entry in table] == [24, 0]


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
@pytest.mark.anyio
async def test_the_host_function_copies_before_its_value_is_published(device):
    stream = device.create_stream()
    timeline = Timeline(1)
    source = np.arange(8, dtype=np.float32)
    table, arrays = HostCopies([source]).fresh()
    arrays[0][...] = -1
    with latch(stream):
        value = timeline.enqueue_advance(device.backend, stream.handle, 0, (table, arrays))
        await anyio.sleep(0.01)
        assert timeline.value(0) < value and (arrays[0] == -1).all()  # held: nothing copied yet
    await timeline.wait(0, value)
    assert arrays[0].tolist() == source.tolist()
    source[...] = 5  # the array is a copy, made once
    assert arrays[0].tolist() == list(range(8))
    # Without copies the same host function publishes as before.
    assert await _advance(timeline, device, stream) == value + 1
    timeline.close()


async def _advance(timeline, device, stream):
    value = timeline.enqueue_advance(device.backend, stream.handle, 0)
    await timeline.wait(0, value)
    return timeline.value(0)


def test_the_python_fallback_makes_the_same_copies():
    ffi, address, callback = completion._fallback()
    counter = ffi.new("int64_t[]", COUNTER_LENGTH)
    source = np.arange(4, dtype=np.int32)
    target, empty = np.zeros(4, np.int32), np.zeros(0, np.int32)
    table = ffi.new("aclpipe_copy[]", 2)
    table[0].dst, table[0].src, table[0].nbytes = ffi.from_buffer(target), ffi.from_buffer(source), 16
    table[1].dst, table[1].src, table[1].nbytes = ffi.from_buffer(empty), ffi.from_buffer(source), 0
    args = ffi.new("aclpipe_advance_args *", {"counter": counter, "value": 3, "wake_fd": -1,
                                              "ncopies": 2, "copies": table})
    ffi.cast("void (*)(void *)", address)(args)
    assert target.tolist() == [0, 1, 2, 3]
    assert (counter[0], counter[1]) == (3, 3)
    assert callback is not None  # kept alive by the caller, as the module keeps its own
