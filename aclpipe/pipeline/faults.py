"""Fault windows: which runs a device error may have spoiled, and what each of them raises.

Device faults are sticky on their stream: the rest of the stream's work (up to the moment
the error is consumed) is skipped.  Every launch carries its run number, so when a run
completes and finds a stream error, the log records the run whose node failed and the
newest run enqueued at that moment: every run in that window may have lost work and raises
:class:`ExecutionError` naming the failing node; runs outside it are unaffected.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ExecutionError

if TYPE_CHECKING:
    from ..runtime import Stream

__all__ = ["Fault", "FaultLog"]


@dataclass(frozen=True)
class Fault:
    """A stream error and the window of runs it may have spoiled."""

    error: BaseException
    first_run: int  # the run whose node failed
    last_run: int  # the newest run enqueued when the error was consumed

    def covers(self, run: int) -> bool:
        return self.first_run <= run <= self.last_run


def _context(error: BaseException) -> dict[str, Any]:
    return dict(getattr(error, "context", {}) or {})


class FaultLog:
    """The faults collected so far, and the runs still live (enqueued, not finished)."""

    def __init__(self) -> None:
        self.faults: list[Fault] = []
        self.live: set[int] = set()  # run numbers enqueued and not yet finished or abandoned
        self.failed = 0  # runs that raised ExecutionError

    def start(self, run: int) -> None:
        """``run`` got its number: faults collected from now on must cover it."""
        self.live.add(run)

    def collect(self, streams: Iterable[Stream], newest_run: int) -> None:
        """Take every stream's sticky error and note which runs it may have spoiled.

        A stream skips the rest of its failed generation until the error is taken, so every run
        enqueued up to now, from the failing one on, may have lost work.  An error that names no
        run (a host function's) is charged to every run still live: any of them may have had
        work skipped behind it.
        """
        for stream in streams:
            error = stream.take_error()
            if error is not None:
                named = _context(error).get("run")
                first = int(named) if named is not None else min(self.live, default=newest_run + 1)
                self.faults.append(Fault(error, first, newest_run))

    def retire(self, run: int, newest_run: int) -> None:
        """``run`` has finished or was abandoned: drop faults no live or future run can match."""
        self.live.discard(run)
        oldest = min(self.live, default=newest_run + 1)
        self.faults = [fault for fault in self.faults if fault.last_run >= oldest]

    def check(self, run: int, own_error: BaseException | None = None) -> None:
        """Raise for ``run`` if a recorded fault's window covers it, or if its own ``done`` event
        reported ``own_error`` (which no one else's consuming of stream errors can hide)."""
        faults = [fault for fault in self.faults if fault.covers(run)]
        if not faults and own_error is not None:
            first = _context(own_error).get("run")
            faults = [Fault(own_error, int(first) if first is not None else run, run)]
        if faults:
            self.failed += 1
            raise _execution_error(run, faults[0]) from faults[0].error


def _execution_error(run: int, fault: Fault) -> ExecutionError:
    error = fault.error
    context = _context(error)
    node, op, stream = context.get("node"), context.get("op"), context.get("stream")
    what = f"node {node!r} ({op})" if node is not None else f"{context.get('task') or 'a task'}"
    if context.get("run") is None:
        message = f"run {run} may have lost work: {what} failed on stream {stream} while it was in flight: {error}"
    elif fault.first_run == run:
        message = f"{what} failed on stream {stream}: {error}"
    else:
        message = (f"run {run} was aborted: {what} of run {fault.first_run} failed earlier on a stream this "
                   f"run shares: {error}")
    return ExecutionError(message, node=node, op=op, stream=stream, cause=error)
