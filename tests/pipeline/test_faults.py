"""Fault windows: a stream error spoils the run whose node failed and every run enqueued up to
the moment it was consumed; runs outside the window are unaffected."""

from __future__ import annotations

import pytest

from aclpipe.errors import ExecutionError, error_from_code
from aclpipe.pipeline import Fault, FaultLog


class _Stream:
    """A stand-in stream: ``take_error`` hands out a planted error once."""

    def __init__(self, error=None):
        self.error = error

    def take_error(self):
        error, self.error = self.error, None
        return error


def _kernel_error(run: int | None, node: str = "fc1"):
    context = {"node": node, "op": "Matmul", "stream": "s0"}
    if run is not None:
        context["run"] = run
    return error_from_code(507015, "injected", context)


def test_the_failing_run_and_every_run_enqueued_since_raise():
    log = FaultLog()
    for run in (1, 2, 3, 4):
        log.start(run)
    log.collect([_Stream(_kernel_error(2)), _Stream()], newest_run=4)
    log.check(1)  # before the failing run: unaffected
    with pytest.raises(ExecutionError, match="node 'fc1' \\(Matmul\\) failed on stream s0") as info:
        log.check(2)
    assert info.value.node == "fc1" and info.value.op == "Matmul"
    with pytest.raises(ExecutionError, match="run 3 was aborted: node 'fc1' \\(Matmul\\) of run 2"):
        log.check(3)
    log.start(5)
    log.check(5)  # enqueued after the error was consumed
    assert log.failed == 2


def test_an_error_naming_no_run_is_charged_to_every_live_run():
    log = FaultLog()
    for run in (3, 4):
        log.start(run)
    log.collect([_Stream(_kernel_error(None))], newest_run=4)
    with pytest.raises(ExecutionError, match="run 3 may have lost work"):
        log.check(3)


def test_a_runs_own_error_is_raised_even_when_no_window_covers_it():
    log = FaultLog()
    log.start(7)
    with pytest.raises(ExecutionError, match="failed on stream"):
        log.check(7, own_error=_kernel_error(7))


def test_retired_runs_drop_the_faults_nobody_can_match():
    log = FaultLog()
    log.start(1)
    log.collect([_Stream(_kernel_error(1))], newest_run=1)
    assert log.faults == [Fault(log.faults[0].error, 1, 1)]
    log.retire(1, newest_run=1)
    assert not log.faults and not log.live


def test_a_stream_is_asked_until_found_clean_after_every_run_that_touched_it_completed():
    from aclpipe.pipeline.faults import Touched

    touched = Touched(3)
    assert touched.to_ask() == [0, 1, 2]  # nothing known yet
    touched.found_clean([0, 1, 2], completed_run=0)
    assert touched.to_ask() == []
    touched.touch([2], run=1)
    touched.touch([0, 1, 2], run=2)
    touched.found_clean([0, 1, 2], completed_run=1)  # run 2 may still fail on any of them
    assert touched.to_ask() == [0, 1, 2]
    touched.touch([2], run=3)
    touched.found_clean([0, 1, 2], completed_run=2)
    assert touched.to_ask() == [2]
    touched.touch_all(run=4)
    assert touched.to_ask() == [0, 1, 2]
