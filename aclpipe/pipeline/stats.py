"""What :meth:`Pipeline.stats` reports: a frozen snapshot of a pipeline's counters."""

from __future__ import annotations

import collections
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..runtime.completion.timeline import Timeline

__all__ = ["CompletionLog", "PipelineStats"]


@dataclass(frozen=True)
class PipelineStats:
    """What :meth:`Pipeline.stats` reports.

    Attributes
    ----------
    runs, failed_runs:
        Runs enqueued so far, and runs that raised :class:`ExecutionError`.
    signatures, prepare_hits:
        Programs held now (one per input signature, at most ``max_programs`` while nothing is
        in flight), and runs that found theirs prepared.
    executors:
        Executors held (one per compute node per slot, over every program held).
    events_per_run, waits_per_run:
        Events recorded and waits enqueued by one run (the largest program's).
    arena_bytes, constant_bytes:
        Device bytes of all slots' activation arenas, and of the uploaded weights.
    workspace:
        The workspace strategy's counters (:class:`~aclpipe.runtime.workspaces.WorkspaceStats`
        as a dict: ``strategy``, ``in_use``, ``peak``, ``reserved``, ``acquires``,
        ``allocations``, ``waits``, ``limit`` and ``outstanding``: blocks not yet back).
    device_peak_bytes:
        The device's peak memory use, when the backend reports it.
    in_flight:
        Runs enqueued whose results have not been read or abandoned yet.
    lost_slots:
        Slots of cancelled runs the device had not passed within ``cancel_grace``; never reused.
    prepared, evicted:
        Programs prepared in all, and idle programs freed to stay within ``max_programs`` or to
        make room (events, device memory) for a new one.
    closed:
        Whether :meth:`Pipeline.aclose` was called (everything held is then 0).
    streams, events:
        Streams this pipeline holds (its own: compute, one replay stream per slot where the
        device captures, H2D and D2H; and its captured programs' model streams), and events
        its programs hold.  Both are limited per device (see :mod:`aclpipe.pipeline.budget`).
    captured, starved:
        Programs held now that are captured, and programs prepared uncaptured so far because
        the device had no streams left for their capture (they run from launch tables).
    device_streams:
        ``{"held": ..., "in_use": ..., "limit": ...}``: streams every pipeline on this device
        holds, streams in use on it (the backend's count, where it has one, when larger: streams
        made outside pipelines), and the device's limit.
    completion:
        How long results took to reach their callers over the last runs (at most 1,024): from
        the moment the device passed a run's completion host function (stamped by that host
        function, ``CLOCK_MONOTONIC``) to :meth:`Pipeline.run` returning.  Keys ``samples``,
        ``median_us`` and ``p99_us``; empty before the first sample.  A run read long after
        it completed (``stream()`` keeps ``depth`` in flight) counts its wait in the queue too.
    """

    runs: int
    failed_runs: int
    signatures: int
    prepare_hits: int
    executors: int
    events_per_run: int
    waits_per_run: int
    arena_bytes: int
    constant_bytes: int
    workspace: Mapping[str, Any]
    device_peak_bytes: int | None
    in_flight: int
    lost_slots: int = 0
    prepared: int = 0
    evicted: int = 0
    closed: bool = False
    completion: Mapping[str, float] = field(default_factory=dict)
    streams: int = 0
    events: int = 0
    captured: int = 0
    starved: int = 0
    device_streams: Mapping[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class CompletionLog:
    """The latest completion latencies, in nanoseconds (a bounded window: constant cost per run).

    A run's result only notes when its caller resumes (:meth:`resumed`); the stamp its
    completion host function wrote is looked up later (:meth:`settle`), before the pipeline
    next waits or reports, so that the lookup is not part of the latency it measures.  The
    timeline keeps the last 64 stamps of a lane: one looked up later than that is dropped.
    """

    def __init__(self, keep: int = 1024):
        self.samples: collections.deque[int] = collections.deque(maxlen=keep)
        self.due: list[tuple[int, int]] = []  # (lane value, monotonic ns its caller resumed at)

    def add(self, nanoseconds: int) -> None:
        self.samples.append(nanoseconds)

    def resumed(self, value: int, at: int) -> None:
        """The run that ``value`` completes gave its caller the result at ``at`` (monotonic ns)."""
        self.due.append((value, at))

    def settle(self, timeline: Timeline, lane: int) -> None:
        """Match the runs noted by :meth:`resumed` with their host functions' stamps."""
        for value, at in self.due:
            passed = timeline.passed_at(lane, value)
            if passed is not None:
                self.samples.append(at - passed)
        self.due.clear()

    def summary(self) -> dict[str, float]:
        """``samples``, ``median_us`` and ``p99_us`` (nearest rank); empty without samples."""
        if not self.samples:
            return {}
        ordered = sorted(self.samples)
        p99 = ordered[min(len(ordered), math.ceil(0.99 * len(ordered))) - 1]
        return {"samples": float(len(ordered)), "median_us": statistics.median(ordered) / 1e3, "p99_us": p99 / 1e3}
