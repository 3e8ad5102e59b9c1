"""The kit's stream-ordered allocator check: the simulator passes it, products without the
allocator skip it with the reason, and backends built on a misreading fail it."""

from __future__ import annotations

import functools

import pytest

import aclpipe
from aclpipe.backends.sim import SimBackend
from aclpipe.runtime import Device
from aclpipe.testing import check_backend
from aclpipe.testing.rules import RULES

CHECK = next(check for check in RULES if check.name == "mempool_order")


def _opener(backend_class: type[SimBackend], **options: object):
    return lambda: Device(backend_class(0, sanitizer=False, **options), "broken:0")


class ReusesBeforeTrim(SimBackend):
    """The documented reading (the docs describe reuse within a stream): a freed block's room
    comes back at once, where the source's TryToReuse finds nothing until a trim."""

    def mem_pool_free_async(self, address, stream):
        pool, block = self.mempools.busy[address]
        super().mem_pool_free_async(address, stream)
        pool.reserved -= block.size


class FreesOnTheHost(SimBackend):
    """FreeAsync that releases the memory when called, not at the stream's point."""

    def mem_pool_free_async(self, address, stream):
        super().mem_pool_free_async(address, stream)
        self.memory.free(address)


def test_the_simulator_passes_it_and_products_without_the_allocator_skip_it():
    for sanitizer in (True, False):
        report = check_backend(functools.partial(aclpipe.open_device, "sim", sanitizer=sanitizer), checks=[CHECK])
        assert report.ok and not report.skipped, str(report)
    report = check_backend(lambda: aclpipe.open_device("sim", spec="atlas-310p"), checks=[CHECK])
    assert [row.name for row in report.skipped] == ["mempool_order"]
    assert "'stream_ordered_alloc' capability" in report.skipped[0].detail


@pytest.mark.parametrize("backend_class", [ReusesBeforeTrim, FreesOnTheHost])
def test_a_backend_built_the_wrong_way_fails_it(backend_class: type[SimBackend]):
    report = check_backend(_opener(backend_class), checks=[CHECK])
    assert [row.name for row in report.failed] == ["mempool_order"], str(report)
    assert CHECK.doc in report.failed[0].detail and CHECK.source in report.failed[0].detail
