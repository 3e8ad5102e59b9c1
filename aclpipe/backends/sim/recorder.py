"""An opt-in timeline recorder: one :class:`TraceRecord` per task a simulated stream executes.

``backend.trace_begin()`` installs a :class:`TraceRecorder`; every stream worker then
stamps each task it executes with the device clock (:meth:`Engines.now`) when the stream
reaches it and when it is done, and ``backend.trace_end()`` hands the records back.  When no
recorder is installed the workers only test one attribute per task, so tracing costs nothing
while it is off.  The record type is the backend protocol's :class:`TraceRecord`;
:mod:`aclpipe.trace` turns records into Chrome traces, Gantt charts and
overlap figures.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ..protocol import TraceRecord

if TYPE_CHECKING:
    from .stream import SimStream, Task

__all__ = ["TraceRecorder"]

#: Task kinds that occupy an engine (the others are stream bookkeeping).
ENGINE_KINDS = frozenset({"kernel", "copy", "memset"})


class TraceRecorder:
    """Collects records from every stream worker thread."""

    def __init__(self) -> None:
        self._records: list[TraceRecord] = []
        self._lock = threading.Lock()

    def add(self, stream: SimStream, task: Task, context: dict[str, Any], queued: float, end: float,
            status: str) -> None:
        engine = task.engine if task.kind in ENGINE_KINDS else None
        began = task.began if task.began is not None and engine is not None else queued
        event = f"{task.event.name}#{task.generation}" if task.event is not None else None
        run = context.get("run")
        record = TraceRecord(
            stream=stream.name, kind=task.kind, name=task.name, engine=engine,
            node=_text(context.get("node")), op=_text(context.get("op")),
            run=int(run) if run is not None else None, queued=queued, start=max(queued, began),
            end=max(end, began), cores=task.cores if task.kind == "kernel" else 0, status=status, event=event)
        with self._lock:
            self._records.append(record)

    def records(self) -> list[TraceRecord]:
        """The records so far, ordered by start time."""
        with self._lock:
            return sorted(self._records, key=lambda r: (r.start, r.queued))


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
