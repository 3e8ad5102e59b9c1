"""A trace as a Gantt chart (PNG), drawn with matplotlib (``pip install 'aclpipe[plot]'``).

Rows from the top: one per stream (what it executed, waits hatched, host functions grey,
event records as ticks), then one per engine lane (``h2d``, ``compute #k``, ``d2h``), so
that copies running under compute show at a glance as bars stacked in the same column.
Kernels are coloured by op, copies by direction; the title carries the overlap figures.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._extras import require

if TYPE_CHECKING:
    from .trace import Trace, TraceRecord

__all__ = ["COPY_COLOURS", "save_gantt"]

COPY_COLOURS = {"h2d": "#2ca02c", "d2h": "#9467bd"}
_HOST_COLOUR, _WAIT_COLOUR, _RECORD_COLOUR = "#7f7f7f", "#d9d9d9", "#d62728"
#: Tasks that hold their stream while others work (a captured model's replay, a latch): outlined,
#: so that they are not taken for a kernel of the op that owns the palette's first colour.
_HOLD_COLOUR, _HOLD_EDGE, _HOLD_KINDS = "#f2f2f2", "#666666", frozenset({"control", "graph", "latch"})
_UNKNOWN_OP_COLOUR = "#444444"  # not in the palette


def _pyplot() -> Any:
    matplotlib = require("matplotlib", "drawing a Gantt chart")
    matplotlib.use("Agg", force=False)  # files only: never open a window
    import matplotlib.pyplot as plt

    return plt


def _op_colours(trace: Trace) -> dict[str, Any]:
    import matplotlib

    tab10, dark2 = matplotlib.colormaps["tab10"], matplotlib.colormaps["Dark2"]
    # Green, red, purple and grey are taken by copies, records and host functions.
    palette = [tab10(i) for i in (0, 1, 5, 6, 8, 9)] + [dark2(i) for i in range(8)]
    ops = sorted({r.op or r.name for r in trace.engine_tasks() if r.engine == "compute"})
    return {op: palette[index % len(palette)] for index, op in enumerate(ops)}


def _colour(record: TraceRecord, colours: dict[str, Any]) -> Any:
    if record.engine in COPY_COLOURS:
        return COPY_COLOURS[record.engine]
    return colours.get(record.op or record.name, _UNKNOWN_OP_COLOUR)


def save_gantt(trace: Trace, path: str | Path, *, title: str | None = None) -> Path:
    """Draw ``trace`` into ``path`` (the format follows the suffix; ``.png`` usually).

    Raises :class:`ImportError` when matplotlib is missing and :class:`ValueError` for an
    empty trace.
    """
    if not trace.records:
        raise ValueError("the trace is empty: nothing ran while it was recording")
    plt = _pyplot()
    from .trace import format_seconds

    origin = min(r.queued for r in trace.records)
    span = max(r.end for r in trace.records) - origin
    scale, unit = (1e3, "ms") if span >= 1e-3 else (1e6, "us")
    streams, engines = list(trace.streams), trace.engine_lanes()
    rows = [trace.stream_label(s) for s in streams] + [f"engine {lane}" for lane in engines]
    figure, axes = plt.subplots(figsize=(12, 1.2 + 0.42 * len(rows)), dpi=100)
    colours = _op_colours(trace)

    def bar(row: int, record: TraceRecord, colour: Any, height: float = 0.7, **style: Any) -> None:
        width = max((record.end - record.start) * scale, span * scale / 2000)  # keep tiny tasks visible
        axes.broken_barh([((record.start - origin) * scale, width)], (row - height / 2, height),
                         facecolors=colour, **style)

    for row, stream in enumerate(streams):
        for record in trace.on_stream(stream):
            if record.kind == "record":
                axes.plot([(record.start - origin) * scale] * 2, [row - 0.4, row + 0.4], color=_RECORD_COLOUR,
                          linewidth=0.8)
            elif record.kind == "wait":
                bar(row, record, _WAIT_COLOUR, 0.35, hatch="//", edgecolor="#aaaaaa", linewidth=0)
            elif record.kind == "host_func":
                bar(row, record, _HOST_COLOUR, 0.3)
            elif record.kind in _HOLD_KINDS:
                bar(row, record, _HOLD_COLOUR, 0.5, edgecolor=_HOLD_EDGE, linewidth=0.6)
            elif record.status != "skipped":
                bar(row, record, _colour(record, colours), edgecolor="white", linewidth=0.3)
    for offset, tasks in enumerate(engines.values()):
        for record in tasks:
            bar(len(streams) + offset, record, _colour(record, colours), edgecolor="white", linewidth=0.3)
    if engines:
        axes.axhline(len(streams) - 0.5, color="black", linewidth=0.6)
    axes.set_yticks(range(len(rows)), rows)
    axes.set_ylim(len(rows) - 0.5, -0.5)
    axes.set_xlabel(f"device time ({unit}, {'timing model' if trace.timing else 'timing model off'})")
    axes.grid(axis="x", linestyle=":", linewidth=0.5)
    _legend(axes, colours)
    stats = trace.stats()
    shares = ", ".join(f"{engine} {share:.0%}" for engine, share in stats.share.items())
    summary = (f"span {format_seconds(stats.span)}; busy {shares}; two or more engines busy "
               f"{stats.overlap_share:.0%} of the time; copies hidden under compute {stats.copy_hidden:.0%}")
    axes.set_title(f"{title}\n{summary}" if title else summary, fontsize=9)
    figure.tight_layout()
    path = Path(path)
    figure.savefig(path)
    plt.close(figure)
    return path


def _legend(axes: Any, colours: dict[str, Any]) -> None:
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=colour, label=op) for op, colour in colours.items()]
    handles += [Patch(facecolor=colour, label=f"copy {engine}") for engine, colour in COPY_COLOURS.items()]
    handles += [Patch(facecolor=_WAIT_COLOUR, hatch="//", label="wait"),
                Patch(facecolor=_HOST_COLOUR, label="host function"),
                Patch(facecolor=_HOLD_COLOUR, edgecolor=_HOLD_EDGE, label="replay, latch (holds its stream)"),
                Patch(facecolor=_RECORD_COLOUR, label="event record")]
    axes.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=7, frameon=False)
