"""The kit's WHILE-task check: the simulator passes it, products without conditional tasks skip
it with the reason, and backends built on a misreading fail it."""

from __future__ import annotations

import functools

import pytest

import aclpipe
from aclpipe.backends.sim import SimBackend
from aclpipe.backends.sim.conditional import Conditionals, SimCondHandle, _value
from aclpipe.runtime import Device
from aclpipe.testing import check_backend
from aclpipe.testing.rules import RULES

CHECK = next(check for check in RULES if check.name == "while_task")


class _DoWhile(Conditionals):
    def _run(self, handle: SimCondHandle) -> None:
        assert handle.stream is not None
        inner = handle.model.streams[handle.stream]
        self._run_sub(inner, handle, handle.subs[0])  # before testing the condition
        while _value(handle.condition) != 0:
            self._run_sub(inner, handle, handle.subs[0])


class DoWhile(SimBackend):
    """A WHILE that runs its body once before testing the condition (a do-while)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.conditionals = _DoWhile(self)


class DefaultOnce(SimBackend):
    """ASSIGN_DEFAULT read as "initialized once, at creation", not at every execution."""

    def cond_handle_create(self, model, default=0, assign_default=False):
        handle = super().cond_handle_create(model, default, False)
        handle.condition.data[:8] = memoryview(default.to_bytes(8, "little"))
        return handle


def _opener(backend_class: type[SimBackend]):
    return lambda: Device(backend_class(0, sanitizer=False), "broken:0")


def test_the_simulator_passes_it_and_products_without_it_skip_it():
    for sanitizer in (True, False):
        report = check_backend(functools.partial(aclpipe.open_device, "sim", sanitizer=sanitizer), checks=[CHECK])
        assert report.ok and not report.skipped, str(report)
    report = check_backend(lambda: aclpipe.open_device("sim", spec="atlas-310p"), checks=[CHECK])
    assert [row.name for row in report.skipped] == ["while_task"]
    assert "'conditional_models' capability" in report.skipped[0].detail


@pytest.mark.parametrize("backend_class", [DoWhile, DefaultOnce])
def test_a_backend_built_the_wrong_way_fails_it(backend_class: type[SimBackend]):
    report = check_backend(_opener(backend_class), checks=[CHECK])
    assert [row.name for row in report.failed] == ["while_task"], str(report)
    assert CHECK.doc in report.failed[0].detail and CHECK.source in report.failed[0].detail

