"""A bucket too large for the device is refused before any padding is allocated on the host,
on one device, replicas and stages alike."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from pipeline_graphs import assert_outputs, mlp, reference

import aclpipe
from aclpipe import DeviceOutOfMemory, Pipeline

pytestmark = pytest.mark.timeout(120)

CAPACITY = 16 << 20  # bytes of device memory: a bucket of 2**20 rows of 32 floats (128 MiB) cannot fit
LAYOUTS = {"one device": {}, "replicas": {"split": "replicas"}, "stages": {"split": "stages"}}


def open_pipeline(layout: str, buckets: tuple[int, ...]) -> Pipeline:
    graph = mlp(batch=None)
    if layout == "one device":
        return Pipeline(graph, aclpipe.open_device("sim:0", capacity=CAPACITY), buckets=buckets)
    return Pipeline(graph, device="sim:0,1", buckets=buckets, device_options={"capacity": CAPACITY},
                    **LAYOUTS[layout])


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_bucket_larger_than_the_device_is_refused_before_padding(layout):
    pipe = open_pipeline(layout, buckets=(1, 1 << 20))
    try:
        x = np.ones((2, 32), np.float32)
        tracemalloc.start()
        try:
            with pytest.raises(DeviceOutOfMemory, match="bucket 1048576") as info:
                pipe.run_sync(x=x)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 8 << 20  # nothing near the padded 128 MiB was allocated on the host
        assert info.value.requested == (1 << 20) * 32 * 4 and info.value.limit == CAPACITY
        one = np.ones((1, 32), np.float32)  # a bucket that fits still runs
        assert_outputs(pipe.run_sync(x=one), reference(pipe.graph, {"x": one}))
    finally:
        pipe.close()
        if layout == "one device":
            pipe.device.close()
