"""The timing model: modelled kernels hold their engine for their cost; engines overlap.

Assertions are on device timestamps (events), never on wall time, and bounds are generous.
"""

from __future__ import annotations

import pytest

import aclpipe
from aclpipe.backends.sim.engines import ATLAS_A2, Cost


@pytest.fixture
def slow_device():
    """Timing on, stretched 20 000x: one modelled microsecond is 20 ms of wall time."""
    device = aclpipe.open_device("sim", sanitizer=True, timing=True, time_scale=2e4)
    yield device
    device.close()


def test_a_modelled_kernel_takes_about_its_cost(timed_device):
    stream = timed_device.create_stream()
    cost = Cost(bytes=0.05 * ATLAS_A2.hbm_bytes_per_s, cores=ATLAS_A2.ai_cores)  # 50 ms of HBM traffic
    modelled_ms = cost.seconds(ATLAS_A2, ATLAS_A2.ai_cores) * 1000
    start = stream.record(timing=True)
    timed_device.backend.launch_kernel(stream.handle, "modelled", lambda: None, cost=cost)
    end = stream.record(timing=True)
    end.sync()
    assert modelled_ms * 0.95 <= end - start <= modelled_ms + 2000


def test_fewer_cores_take_longer(timed_device):
    stream = timed_device.create_stream()
    cost = Cost(bytes=0.01 * ATLAS_A2.hbm_bytes_per_s)
    wide, narrow = Cost(bytes=cost.bytes, cores=20), Cost(bytes=cost.bytes, cores=5)
    assert narrow.seconds(ATLAS_A2, 5) > 3 * wide.seconds(ATLAS_A2, 20)
    marks = [stream.record(timing=True)]
    for each in (wide, narrow):
        timed_device.backend.launch_kernel(stream.handle, "k", lambda: None, cost=each)
        marks.append(stream.record(timing=True))
    marks[-1].sync()
    assert marks[2] - marks[1] > marks[1] - marks[0]


def test_h2d_copy_and_kernel_on_two_streams_overlap(slow_device):
    device = slow_device
    copier, computer = device.create_stream(), device.create_stream()
    host, target = device.alloc_host(1 << 20), device.alloc(1 << 20)  # ~23 modelled us of PCIe
    cost = Cost(bytes=20e-6 * ATLAS_A2.hbm_bytes_per_s, cores=20)  # ~23 modelled us of compute
    copy_start = copier.record(timing=True)
    copier.memcpy(target, host)
    copy_end = copier.record(timing=True)
    kernel_start = computer.record(timing=True)
    device.backend.launch_kernel(computer.handle, "compute", lambda: None, cost=cost)
    kernel_end = computer.record(timing=True)
    copy_end.sync()
    kernel_end.sync()
    assert kernel_start - copy_end < 0 and copy_start - kernel_end < 0  # the intervals intersect


def test_two_copies_in_one_direction_take_turns_on_the_engine(slow_device):
    device = slow_device
    first, second = device.create_stream(), device.create_stream()
    nbytes = 1 << 19
    host, targets = device.alloc_host(nbytes), [device.alloc(nbytes) for _ in range(2)]
    copy_ms = device.backend.engines.copy_seconds(nbytes, "h2d") * 1000
    marks = []
    for stream, target in zip((first, second), targets):
        start = stream.record(timing=True)
        stream.memcpy(target, host)
        marks.append((start, stream.record(timing=True)))
    for _, end in marks:
        end.sync()
    span = max(end - start for start in (marks[0][0], marks[1][0]) for end in (marks[0][1], marks[1][1]))
    assert span >= 2 * copy_ms * 0.95  # one H2D engine: the copies cannot overlap
