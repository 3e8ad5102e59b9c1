"""What :meth:`Pipeline.stats` reports: a frozen snapshot of a pipeline's counters."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["PipelineStats"]


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
        Programs prepared in all, and programs freed to stay within ``max_programs``.
    closed:
        Whether :meth:`Pipeline.aclose` was called (everything held is then 0).
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

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)
