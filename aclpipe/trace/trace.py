"""Traces: what ran on a device, with engine-use figures and a Chrome trace export.

A trace is a list of :class:`TraceRecord` (one per task a stream executed: kernels, copies,
memsets, event records and waits, host functions), stamped with the *device* clock: with the
simulator's timing model on, modelled device seconds; off, wall seconds at numpy speed.

Lanes.  Every stream is one lane, showing what it executed in order, waits included (a wait
span is the time the stream sat blocked on another stream's event).  Every engine is one lane
too: ``h2d`` and ``d2h`` (the copy engines) and ``compute`` (the AI cores), split into
``compute #0``, ``compute #1``, ... rows when kernels ran side by side on different cores.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..backends.protocol import TraceRecord

__all__ = ["ENGINES", "Trace", "TraceRecord", "TraceStats", "describe", "engine_bound", "format_seconds"]

#: Engines in lane order.
ENGINES = ("h2d", "compute", "d2h")
_ENGINE_KINDS = frozenset({"kernel", "copy", "memset"})


# -- figures -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TraceStats:
    """What a trace says about engine use, all in device seconds.

    ``span`` runs from the first engine task's start to the last one's end.  ``busy`` is, per
    engine, the time at least one of its tasks ran; ``share`` is that over ``span``.
    ``overlap`` is the time two or more engines were busy at once (copies hidden behind
    compute, or the reverse); ``copy_hidden`` is the share of copy-engine busy time during
    which compute was busy too.  ``max_concurrent_kernels`` counts kernels running at once.
    ``run_spans`` maps a run number to its first start and last end (its device latency).
    ``bound`` is the least span any schedule of the trace's runs could have on these engines:
    the busiest engine's total time (its tasks' durations added up), plus one run's share of
    every other engine (the fill before it and the drain after it); ``bound_ratio`` is
    ``span / bound``, 1.0 for a perfect pipeline and about the number of engines when runs do
    not overlap at all.  Kernels sharing the AI cores can run side by side, so it can dip
    below 1.
    """

    span: float
    busy: Mapping[str, float]
    share: Mapping[str, float]
    overlap: float
    overlap_share: float
    copy_hidden: float
    max_concurrent_kernels: int
    counts: Mapping[str, int]
    run_spans: Mapping[int, tuple[float, float]]
    bound: float = 0.0
    bound_ratio: float = 0.0

    def run_latencies(self) -> list[float]:
        """Device latency of each run (seconds), in run order."""
        return [end - start for _, (start, end) in sorted(self.run_spans.items())]


def engine_bound(tasks: Iterable[TraceRecord], runs: int) -> float:
    """The least makespan of ``runs`` runs whose engine ``tasks`` these are (see
    :attr:`TraceStats.bound`); ``tasks`` may come from several devices' traces (a stage
    pipeline's chain), as long as each task's engine names its device's engine uniquely."""
    totals: dict[str, float] = {}
    for record in tasks:
        engine = record.engine or "compute"
        totals[engine] = totals.get(engine, 0.0) + record.end - record.start
    if not totals or runs < 1:
        return 0.0
    busiest = max(totals.values())
    return busiest + (sum(totals.values()) - busiest) / runs


def _union(intervals: Iterable[tuple[float, float]]) -> float:
    total, current_start, current_end = 0.0, None, None
    for start, end in sorted(intervals):
        if current_end is None or start > current_end:
            if current_end is not None and current_start is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_end is not None and current_start is not None:
        total += current_end - current_start
    return total


def _sweep(intervals: Iterable[tuple[float, float, str]]) -> tuple[float, float, int]:
    """(time >= 2 engines busy, time compute and a copy engine were both busy, max kernels at once)."""
    points: list[tuple[float, int, str]] = []
    for start, end, engine in intervals:
        if end > start:
            points += [(start, 1, engine), (end, -1, engine)]
    points.sort(key=lambda p: (p[0], p[1]))  # ends before starts at the same instant
    active = dict.fromkeys(ENGINES, 0)
    several = hidden = 0.0
    most = 0
    last = points[0][0] if points else 0.0
    for time, delta, engine in points:
        busy = [e for e in ENGINES if active[e] > 0]
        if len(busy) >= 2:
            several += time - last
        if active["compute"] > 0 and (active["h2d"] > 0 or active["d2h"] > 0):
            hidden += time - last
        active[engine] = active.get(engine, 0) + delta
        most = max(most, active["compute"])
        last = time
    return several, hidden, most


# -- the trace ---------------------------------------------------------------------------------------
class Trace:
    """The records of one recording, with figures and exports.

    Parameters
    ----------
    records:
        :class:`TraceRecord` objects (any order).
    timing:
        Whether the device's timing model was on (timestamps are modelled device time).
    """

    def __init__(self, records: Iterable[TraceRecord], *, timing: bool = False):
        self.records: tuple[TraceRecord, ...] = tuple(sorted(records, key=lambda r: (r.start, r.queued)))
        self.timing = timing

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[TraceRecord]:
        return iter(self.records)

    def __repr__(self) -> str:
        return f"<Trace {len(self.records)} records on {len(self.streams)} streams>"

    # -- selections ------------------------------------------------------------------------------
    @property
    def streams(self) -> tuple[str, ...]:
        """Stream names in the order they first appear (streams ``s0, s1, ...`` sort by number)."""
        names = {record.stream for record in self.records}
        return tuple(sorted(names, key=lambda name: (len(name), name)))

    def engine_tasks(self) -> list[TraceRecord]:
        """Kernels, copies and memsets that ran (skipped ones are left out)."""
        return [r for r in self.records if r.kind in _ENGINE_KINDS and r.status != "skipped"]

    def on_stream(self, stream: str) -> list[TraceRecord]:
        return [r for r in self.records if r.stream == stream]

    def stream_role(self, stream: str) -> str:
        """``"H2D"``, ``"D2H"``, ``"compute"`` or ``"sync"``: what the stream's work was."""
        engines = {r.engine for r in self.on_stream(stream) if r.kind in _ENGINE_KINDS}
        if engines == {"h2d"}:
            return "H2D"
        if engines == {"d2h"}:
            return "D2H"
        return "compute" if "compute" in engines or len(engines) > 1 else "sync"

    def stream_label(self, stream: str) -> str:
        return f"stream {stream} ({self.stream_role(stream)})"

    def engine_lanes(self) -> dict[str, list[TraceRecord]]:
        """Engine lane name -> tasks; concurrent kernels are spread over ``compute #k`` rows."""
        lanes: dict[str, list[TraceRecord]] = {}
        rows_end: list[float] = []  # greedy interval packing: first row free at the kernel's start
        for record in self.engine_tasks():
            if record.engine != "compute":
                lanes.setdefault(record.engine or "?", []).append(record)
                continue
            row = next((i for i, end in enumerate(rows_end) if end <= record.start), len(rows_end))
            if row == len(rows_end):
                rows_end.append(record.end)
            rows_end[row] = record.end
            lanes.setdefault(f"compute #{row}", []).append(record)
        order = {"h2d": 0, "d2h": 2}
        return dict(sorted(lanes.items(), key=lambda item: (order.get(item[0], 1), item[0])))

    # -- figures ---------------------------------------------------------------------------------
    def stats(self) -> TraceStats:
        """Engine busy shares, overlap and per-run latency (see :class:`TraceStats`)."""
        tasks = self.engine_tasks()
        intervals = [(r.start, r.end, r.engine or "compute") for r in tasks]
        span = (max(r.end for r in tasks) - min(r.start for r in tasks)) if tasks else 0.0
        busy = {engine: _union((s, e) for s, e, g in intervals if g == engine) for engine in ENGINES}
        several, hidden, most = _sweep(intervals)
        copy_busy = _union((s, e) for s, e, g in intervals if g != "compute")
        runs: dict[int, tuple[float, float]] = {}
        for record in tasks:
            if record.run is not None:
                start, end = runs.get(record.run, (record.start, record.end))
                runs[record.run] = (min(start, record.start), max(end, record.end))
        counts: dict[str, int] = {}
        for record in self.records:
            counts[record.kind] = counts.get(record.kind, 0) + 1
        bound = engine_bound(tasks, len(runs))
        return TraceStats(
            span=span, busy=busy, share={e: (busy[e] / span if span else 0.0) for e in ENGINES},
            overlap=several, overlap_share=several / span if span else 0.0,
            copy_hidden=hidden / copy_busy if copy_busy else 0.0, max_concurrent_kernels=most,
            counts=counts, run_spans=runs, bound=bound, bound_ratio=span / bound if bound else 0.0)

    # -- exports ---------------------------------------------------------------------------------
    def to_chrome(self) -> dict[str, Any]:
        """The trace in the Trace Event Format (``{"traceEvents": [...]}``): process 1 holds one
        thread per stream, process 2 one per engine lane; kernels, copies, host functions and
        waits are complete events (``"X"``), event records instants (``"i"``); timestamps in µs."""
        origin = min((r.queued for r in self.records), default=0.0)
        events: list[dict[str, Any]] = [
            _meta("process_name", 1, 0, "streams"), _meta("process_sort_index", 1, 0, 1),
            _meta("process_name", 2, 0, "engines"), _meta("process_sort_index", 2, 0, 2)]
        for tid, stream in enumerate(self.streams, start=1):
            events += [_meta("thread_name", 1, tid, self.stream_label(stream)),
                       _meta("thread_sort_index", 1, tid, tid)]
            events += [_chrome_event(r, 1, tid, origin) for r in self.on_stream(stream)]
        for tid, (lane, tasks) in enumerate(self.engine_lanes().items(), start=1):
            events += [_meta("thread_name", 2, tid, f"engine {lane}"), _meta("thread_sort_index", 2, tid, tid)]
            events += [_chrome_event(r, 2, tid, origin) for r in tasks]
        stats = self.stats()
        other = {"clock": "modelled device time" if self.timing else "wall time (timing model off)",
                 "span_us": stats.span * 1e6, "overlap_share": stats.overlap_share,
                 "share": dict(stats.share), "copy_hidden": stats.copy_hidden}
        return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}

    def save_chrome(self, path: str | Path) -> Path:
        """Write :meth:`to_chrome` as JSON; open it in Perfetto (ui.perfetto.dev) or chrome://tracing."""
        path = Path(path)
        path.write_text(json.dumps(self.to_chrome(), indent=None, separators=(",", ":")) + "\n", encoding="utf-8")
        return path

    def save_gantt(self, path: str | Path, *, title: str | None = None) -> Path:
        """Draw a Gantt chart (PNG, or any format matplotlib writes by the suffix); needs matplotlib."""
        from .gantt import save_gantt

        return save_gantt(self, path, title=title)


def _meta(name: str, pid: int, tid: int, value: Any) -> dict[str, Any]:
    key = "name" if name.endswith("_name") else "sort_index"
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": {key: value}}


def describe(record: TraceRecord) -> str:
    """A record's display name: its node (``fc1``) for launches, else the task name."""
    return record.node or record.name


def _chrome_event(record: TraceRecord, pid: int, tid: int, origin: float) -> dict[str, Any]:
    args: dict[str, Any] = {"stream": record.stream, "status": record.status}
    for key in ("op", "node", "run", "engine", "event"):
        value = getattr(record, key)
        if value is not None:
            args[key] = value
    if record.cores:
        args["cores"] = record.cores
    if record.start > record.queued:
        args["waited_for_engine_us"] = round((record.start - record.queued) * 1e6, 3)
    event: dict[str, Any] = {"name": describe(record), "cat": record.kind, "pid": pid, "tid": tid,
                             "ts": round((record.start - origin) * 1e6, 3), "args": args}
    if record.kind == "record":
        event.update(ph="i", s="t")
    else:
        event.update(ph="X", dur=round(max(record.end - record.start, 0.0) * 1e6, 3))
    return event


def format_seconds(seconds: float) -> str:
    """``0.0000123`` -> ``"12.3 us"``; picks s, ms or us."""
    if seconds >= 1.0:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"

