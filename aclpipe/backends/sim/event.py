"""Simulated events: a record captures the stream's position at the time of the call.

Each ``record`` starts a new generation; a wait or sync enqueued later refers to the
generation current at *its* call, so re-recording an event never changes what an earlier
wait waits for.  A generation completes when its stream reaches it, stamping the device
time (for timing events) and carrying the stream's sticky error if the stream had failed,
so that work waiting on a failed producer inherits the failure instead of running on
garbage.
"""

from __future__ import annotations

import threading

from ...errors import BackendError, error_from_code
from .sanitizer import Clock

__all__ = ["SimEvent"]


class SimEvent:
    """A simulated event: every record starts a generation that completes when its stream
    reaches it (see the module docstring)."""
    def __init__(self, name: str, timing: bool):
        self.name = name
        self.timing = timing
        self.destroyed = False
        self._cond = threading.Condition()
        self._recorded = 0
        self._pending: set[int] = set()
        self._errors: dict[int, BackendError] = {}
        self._timestamps: dict[int, float] = {}
        self.snapshot: Clock = {}

    # -- host side ---------------------------------------------------------------------------
    def begin_record(self, snapshot: Clock) -> int:
        with self._cond:
            self._recorded += 1
            self._pending.add(self._recorded)
            self.snapshot = snapshot
            # Only the newest generation's timestamp is ever asked for.
            self._timestamps = {g: t for g, t in self._timestamps.items() if g in self._pending}
            return self._recorded

    @property
    def generation(self) -> int:
        return self._recorded

    def is_done(self, generation: int | None = None) -> bool:
        with self._cond:
            target = self._recorded if generation is None else generation
            return target not in self._pending

    def wait_done(self, generation: int, timeout: float | None = None) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: generation not in self._pending, timeout)

    def error_of(self, generation: int) -> BackendError | None:
        with self._cond:
            return self._errors.get(generation)

    def timestamp(self) -> float:
        with self._cond:
            generation = self._recorded
            if not self.timing:
                raise error_from_code(
                    107006, f"event {self.name} was created without timing; "
                    "use device.create_event(timing=True) to measure elapsed time")
            if generation == 0:
                raise error_from_code(107006, f"event {self.name} was never recorded")
            if generation in self._pending:
                raise error_from_code(507006, f"event {self.name} has not completed; sync it first")
            return self._timestamps[generation]

    # -- device side -------------------------------------------------------------------------
    def complete(self, generation: int, timestamp: float, error: BackendError | None) -> None:
        with self._cond:
            self._pending.discard(generation)
            self._timestamps[generation] = timestamp
            if error is not None:
                self._errors[generation] = error
            elif generation in self._errors:
                del self._errors[generation]
            # Keep the error table small: only generations someone could still ask about.
            for old in [g for g in self._errors if g < generation - 64]:
                del self._errors[old]
            self._cond.notify_all()
