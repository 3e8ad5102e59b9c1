"""Stream batches through a pipeline and measure it: host latency per run, wall time, and the
device timeline (a :class:`~aclpipe.trace.Trace`) when the device can record one."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..pipeline import Pipeline, PipelineStats
from ..trace import Trace, TraceStats, record_trace

__all__ = ["Measurement", "can_trace", "measure", "percentile"]


@dataclass
class Measurement:
    """What :func:`measure` saw: per-run host latency (submit to result, seconds), the wall time
    of the whole stream, the trace (None when not recorded), the pipeline's counters, every
    run's outputs (when kept) and the last run's."""

    latencies: list[float]
    wall: float
    stats: PipelineStats
    trace: Trace | None = None
    outputs: list[dict[str, np.ndarray]] = field(default_factory=list)
    last: dict[str, np.ndarray] | None = None

    @property
    def trace_stats(self) -> TraceStats | None:
        return self.trace.stats() if self.trace is not None else None


def can_trace(pipe: Pipeline) -> bool:
    """Whether the pipeline's device can record a timeline trace."""
    return pipe.device.capabilities.tracing


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile of ``values`` (NaN when there are none)."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else float("nan")


async def measure(pipe: Pipeline, batches: Iterable[Mapping[str, Any]], *, trace: bool = True,
                  keep_outputs: bool = False, on_result: Callable[[], None] | None = None) -> Measurement:
    """Run every batch through ``pipe.stream`` (``depth`` in flight) and measure it.

    A run's latency is the time from the moment the pipeline takes its batch to the moment its
    result comes back, so it includes waiting for a free slot, as a caller would see it.
    """
    taken: list[float] = []
    latencies: list[float] = []
    outputs: list[dict[str, np.ndarray]] = []
    last: dict[str, np.ndarray] | None = None

    async def feed() -> AsyncIterator[Mapping[str, Any]]:
        for batch in batches:
            taken.append(time.perf_counter())
            yield batch

    recording = record_trace(pipe.device) if trace and can_trace(pipe) else None
    start = time.perf_counter()
    try:
        async for result in pipe.stream(feed()):
            latencies.append(time.perf_counter() - taken[len(latencies)])
            last = result
            if keep_outputs:
                outputs.append(result)
            if on_result is not None:
                on_result()
    finally:
        wall = time.perf_counter() - start
        recorded = recording.stop() if recording is not None else None
    return Measurement(latencies, wall, pipe.stats(), recorded, outputs, last)
