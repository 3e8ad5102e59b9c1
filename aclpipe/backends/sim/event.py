"""Simulated events: the two documented kinds, records that capture a stream position, resets.

Each ``record`` starts a new generation; a wait or sync enqueued later refers to the
generation current at *its* call, so re-recording an event never changes what an earlier
wait waits for.  A generation completes when its stream reaches it, stamping the device
time (for timing events).

Kinds (``hicann/runtime`` ``docs/zh/api_ref/07_event_management.md``):

- *reusable* events stand for ``aclrtCreateEventExWithFlag``: "each record re-captures the
  stream's tasks and overwrites the event"; a wait uses the latest record;
- *single-use* events stand for ``aclrtCreateEvent``/``aclrtCreateEventWithFlag``, whose
  documented pattern is record, wait, ``aclrtResetEvent``.  Recording one again before a
  reset is behaviour the docs do not promise, so the simulator refuses it (the stricter
  choice), and a reset of a reusable event is refused as the docs say it is.

A wait on an event with no record since it was created (or reset) is an invalid value in
the runtime's event design notes (``docs/zh/design/modules/event/event.md``, 4.2: "cannot
wait on an event that was not recorded"), which :meth:`SimEvent.check_waitable` enforces.

A wait enqueued while an op wait timeout is set (``aclrtSetOpWaitTimeout``,
``07_event_management.md``: seconds, process-wide, 0 or never called: no timeout) fails with
107020 once it has blocked that long; the stream carries the failure and the next synchronize
reports it, as the page says ("calling a synchronous wait such as aclrtSynchronizeStream
returns the error").  The code is ``ACL_ERROR_RT_TASK_TIMEOUT``: the STARS completion marks a
timed-out task with its timeout bit, which the runtime reads as ``TS_ERROR_TASK_TIMEOUT``
(``SetStarsResultCommon``, ``src/runtime/core/src/task/task_info/task_manager.cc``), maps to
``RT_ERROR_TSFW_TASK_TIMEOUT`` (``src/runtime/core/src/common/error_code.cc``) and reports as
107020 (``errcode_manage.cc``; 25-01_aclError.md: "task execution timed out ... set a
reasonable timeout").

A sync of an event whose latest record went into a captured model, after the capture ended,
is refused with 107000: ``ApiErrorDecorator::EventSynchronize``
(``src/runtime/api/impl/api_error.cc``) checks ``Event::IsEventInModel`` (the stream of the
latest record is bound to a model) before it waits.  A record outside a capture ends that.

Errors (a simulator extension, ``Capabilities.event_errors``): a record carries the first
failure its stream saw (its own, or one a waited record carried) after this event's previous
record on that stream and not yet taken by the host (a sync, query or ``take_error``) when
the record was enqueued, so whoever synchronizes the event learns that work it covers may
be garbage, even if someone else consumed the stream's sticky error.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ...errors import BackendError, error_from_code
from .sanitizer import Clock

__all__ = ["SimEvent", "wait_timed_out"]


class SimEvent:
    """A simulated event: every record starts a generation that completes when its stream
    reaches it (see the module docstring)."""

    # Slots, and the tables most events never use made on first use: a 20,000-node program
    # makes about 35,000 events, and every container they hold is one more object for the
    # cyclic collector to traverse.
    __slots__ = ("_cond", "_discarded", "_errors", "_lock", "_marks", "_pending", "_timestamps",
                 "armed", "capture", "destroyed", "generation", "in_model", "name", "reusable", "snapshot", "timing")

    def __init__(self, name: str, timing: bool, reusable: bool = True, created: dict[str, int] | None = None):
        self.name = name
        self.timing = timing
        self.reusable = reusable
        self.destroyed = False
        # A plain lock guards the state; the condition waiters block on is made by the first
        # wait that has to block (most events are never waited on while pending: a program
        # makes tens of thousands, and a Condition costs an RLock, a deque and a dozen bound
        # methods).  Notifiers hold the lock, so a waiter never misses a notify.
        self._lock = threading.Lock()
        self._cond: threading.Condition | None = None
        #: the latest record's generation (0: never recorded); a wait or sync refers to the one
        #: current at its call
        self.generation = 0
        self._pending: set[int] = set()
        self._discarded: set[int] | None = None  # records a stopped or aborted stream will never reach
        self._errors: dict[int, BackendError] | None = None
        self._timestamps: dict[int, float] | None = {} if timing else None  # only timing events are asked
        #: stream name -> the task number of this event's latest record there (at first: how many
        #: tasks the stream had run when the event was made): failures after the mark taint the
        #: next record.
        self._marks: dict[str, int] = dict(created or {})
        self.armed = False  # recorded since creation or the last reset (host order)
        self.snapshot: Clock = {}
        self.capture: Any = None  # the capture its latest record went into, if any
        #: The model its latest record went into, once that capture ended (``IsEventInModel``).
        self.in_model: Any = None

    # -- host side ---------------------------------------------------------------------------
    def begin_record(self, snapshot: Clock) -> int:
        with self._lock:
            self.generation += 1
            self._pending.add(self.generation)
            self.snapshot = snapshot
            self.armed = True
            self.in_model = None
            if self._timestamps:  # only the newest generation's timestamp is ever asked for
                self._timestamps = {g: t for g, t in self._timestamps.items() if g in self._pending}
            return self.generation

    def check_recordable(self) -> None:
        """Refuse a second record of a single-use event that was not reset in between."""
        if not self.reusable and self.armed:
            raise error_from_code(
                107000, f"event {self.name} is single-use (aclrtCreateEventWithFlag): it was recorded and not "
                "reset; call aclrtResetEvent after its waits (07_event_management.md), or create it "
                "reusable (aclrtCreateEventExWithFlag) to record it again")

    def check_waitable(self) -> None:
        """A wait needs a record since creation or the last reset (event design notes, 4.2)."""
        if not self.armed:
            raise error_from_code(
                107000, f"event {self.name} was never recorded (or was reset since): waiting on it is an invalid "
                "value (hicann/runtime docs/zh/design/modules/event/event.md 4.2); record it first")

    def reset(self) -> None:
        """``aclrtResetEvent``: back to the initial state (only single-use events)."""
        if self.reusable:
            raise error_from_code(
                107000, f"event {self.name} is reusable (aclrtCreateEventExWithFlag), which aclrtResetEvent refuses "
                "(07_event_management.md); just record it again")
        with self._lock:
            self.armed = False

    def is_done(self, generation: int | None = None) -> bool:
        with self._lock:
            target = self.generation if generation is None else generation
            return target not in self._pending

    def wait_done(self, generation: int, timeout: float | None = None,
                  interrupted: Callable[[], bool] | None = None) -> bool:
        """Wait for ``generation``; False on timeout or once ``interrupted()`` is true (after a
        :meth:`wake`)."""
        with self._lock:
            pending = self._pending
            if generation not in pending:
                return True
            cond = self._cond
            if cond is None:
                cond = self._cond = threading.Condition(self._lock)
            if interrupted is None:
                return cond.wait_for(lambda: generation not in pending, timeout)
            cond.wait_for(lambda: generation not in pending or interrupted(), timeout)
            return generation not in pending

    def wake(self) -> None:
        """Wake every waiter so that it re-checks its ``interrupted`` (an abort)."""
        with self._lock:
            self._notify()

    def _notify(self) -> None:
        """Wake every blocked waiter (the caller holds the lock)."""
        if self._cond is not None:
            self._cond.notify_all()

    def outcome(self, generation: int) -> tuple[bool, BackendError | None]:
        """Whether ``generation`` has completed and, if it has, the error its record carried:
        what a sync of a record the stream already passed needs, in one look under the lock."""
        with self._lock:
            if generation in self._pending:
                return False, None
            errors = self._errors
            return True, errors.get(generation) if errors else None

    def error_of(self, generation: int) -> BackendError | None:
        with self._lock:
            return self._errors.get(generation) if self._errors else None

    def idle(self) -> bool:
        """No record is pending, other than ones that will never run."""
        with self._lock:
            return not (self._pending - self._discarded if self._discarded else self._pending)

    def timestamp(self) -> float:
        with self._lock:
            generation = self.generation
            if not self.timing:
                raise error_from_code(
                    107006, f"event {self.name} was created without timing; "
                    "use device.create_event(timing=True) to measure elapsed time")
            if generation == 0:
                raise error_from_code(107006, f"event {self.name} was never recorded")
            if generation in self._pending:
                raise error_from_code(507006, f"event {self.name} has not completed; sync it first")
            assert self._timestamps is not None  # a timing event
            return self._timestamps[generation]

    # -- device side -------------------------------------------------------------------------
    def taint_since(self, stream: str, executed: int, failures: list[tuple[int, BackendError]]) -> BackendError | None:
        """The first of a stream's ``failures`` (``(task number, error)``) after this event's
        previous record on that stream, or since the event was made.  The record executing now
        is that stream's task number ``executed``."""
        with self._lock:
            since = self._marks.get(stream, 0)
            self._marks[stream] = executed
        if not failures:
            return None
        return next((error for failed, error in failures if since <= failed < executed), None)

    def complete(self, generation: int, timestamp: float, error: BackendError | None) -> None:
        with self._lock:
            self._pending.discard(generation)
            if self._timestamps is not None:
                self._timestamps[generation] = timestamp
            errors = self._errors
            if error is not None:
                if errors is None:
                    errors = self._errors = {}
                errors[generation] = error
            if errors:
                if error is None:
                    errors.pop(generation, None)
                # Keep the error table small: only generations someone could still ask about.
                for old in [g for g in errors if g < generation - 64]:
                    del errors[old]
            self._notify()

    def discard(self, generation: int) -> None:
        """The record of ``generation`` will never run (its stream stopped or was aborted):
        waits on it stay blocked, as the stream-abort docs warn, until they are aborted."""
        with self._lock:
            if generation in self._pending:
                if self._discarded is None:
                    self._discarded = set()
                self._discarded.add(generation)
            self._notify()


def wait_timed_out(event: SimEvent) -> BackendError:
    """The failure of a wait that blocked past the op wait timeout (see the module docstring)."""
    return error_from_code(107020, f"the wait on event {event.name} blocked past the op wait timeout "
                                   "(aclrtSetOpWaitTimeout, 07_event_management.md): the record it waits for "
                                   "did not complete in time; record the event, or raise op_wait_timeout")
