"""Fault windows: which runs a device error may have spoiled, and what each of them raises.

The pipeline's streams keep CANN's default failure mode, ACL_CONTINUE_ON_FAILURE
(``hicann/runtime`` ``docs/zh/api_ref/06_stream_management.md``): after a failed task a
stream goes on with its later tasks, which compute on whatever the failed task left behind,
and the error stays sticky until consumed.  Every launch carries its run number, so when a
run completes and finds a stream error, the log records the run whose node failed and the
newest run enqueued at that moment: every run in that window ran behind the failed task on
a shared stream and raises :class:`ExecutionError` naming the failing node; earlier runs are
unaffected.  The pipeline then renews the failed streams (:meth:`Stream.renew`), so that no
run enqueued later runs behind the failed task either.

Why not ACL_STOP_ON_FAILURE: CANN applies it to every stream of the context (streams the
pipeline does not own included), and a stopped stream never records the events other streams
wait on, which then hang until ``aclrtStreamAbort``, which Atlas inference cards lack.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ExecutionError

if TYPE_CHECKING:
    from ..runtime import Stream

__all__ = ["Fault", "FaultLog", "Touched"]


@dataclass(frozen=True)
class Fault:
    """A stream error and the window of runs it may have spoiled."""

    error: BaseException
    first_run: int  # the run whose node failed
    last_run: int  # the newest run enqueued when the error was consumed

    def covers(self, run: int) -> bool:
        return self.first_run <= run <= self.last_run


class Touched:
    """Which of the pipeline's streams may hold an error nobody took yet.

    Asking a stream costs a runtime query (``aclrtStreamQuery``) that contends with the
    runtime's own threads, and a captured run puts work on two streams only (it replays its
    model on its slot's replay stream, which adopts the model's failures, and completes on
    the D2H stream), so the other streams need not be asked at the end of every run.  A
    stream stays on the list from the moment a run (or preparation) puts work on it until it
    was found clean after every run that touched it had completed: completions pass in
    enqueue order on the D2H stream, which waits for every stream a run used, so nothing
    enqueued up to that run can still fail then.
    """

    def __init__(self, streams: int):
        self.last_run = [0] * streams  # the newest run that put work on each stream
        self.dirty = set(range(streams))  # streams to ask: everything, until found clean

    def touch(self, lanes: Iterable[int], run: int) -> None:
        for lane in lanes:
            self.last_run[lane] = max(self.last_run[lane], run)
            self.dirty.add(lane)

    def touch_all(self, run: int) -> None:
        self.touch(range(len(self.last_run)), run)

    def to_ask(self) -> list[int]:
        return sorted(self.dirty)

    def found_clean(self, lanes: Iterable[int], completed_run: int) -> None:
        """``lanes`` had no error with every run up to ``completed_run`` complete."""
        for lane in lanes:
            if self.last_run[lane] <= completed_run:
                self.dirty.discard(lane)


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

    def collect(self, streams: Iterable[Stream], newest_run: int) -> list[Stream]:
        """Take every stream's sticky error, note which runs it may have spoiled, and return
        the streams that had one.

        Every run enqueued up to now, from the failing one on, ran behind the failed task on a
        shared stream (or waited on one that did).  An error that names no run (a host
        function's, or a backend's that carries no context) is charged to every run still live.
        """
        failed = []
        for stream in streams:
            error = stream.take_error()
            while error is not None:
                named = _context(error).get("run")
                first = int(named) if named is not None else min(self.live, default=newest_run + 1)
                self.faults.append(Fault(error, first, newest_run))
                if stream not in failed:
                    failed.append(stream)
                error = stream.take_error()
        return failed

    def retire(self, run: int, newest_run: int) -> None:
        """``run`` has finished or was abandoned: drop faults no live or future run can match."""
        self.live.discard(run)
        if self.faults:
            oldest = min(self.live, default=newest_run + 1)
            self.faults = [fault for fault in self.faults if fault.last_run >= oldest]

    def check(self, run: int, own_error: BaseException | None = None) -> None:
        """Raise for ``run`` if a recorded fault's window covers it, or if its own ``done`` event
        reported ``own_error`` (which no one else's consuming of stream errors can hide)."""
        if not self.faults and own_error is None:  # every run's question; almost always the answer
            return
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
