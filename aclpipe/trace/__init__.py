"""Timelines of what ran on a device: capture, overlap figures, Chrome trace JSON, Gantt PNG.

.. code-block:: python

    with aclpipe.trace.record_trace(device) as recording:
        async for out in pipe.stream(batches):
            ...
    trace = recording.trace
    print(trace.stats().overlap_share)          # share of the time two or more engines were busy
    trace.save_chrome("run.json")               # open in https://ui.perfetto.dev or chrome://tracing
    trace.save_gantt("run.png")                 # needs matplotlib (pip install 'aclpipe[plot]')

- :mod:`.recording`: :func:`record_trace` on a device whose backend can trace.
- :mod:`.trace`: :class:`Trace` (figures, Chrome JSON).
- :mod:`.gantt`: the Gantt chart; :mod:`.dot`: plans as DOT with measured times.
"""

from .dot import plan_dot
from .gantt import COPY_COLOURS, save_gantt
from .recording import TraceRecording, record_trace
from .trace import ENGINES, Trace, TraceRecord, TraceStats, describe, engine_bound, format_seconds

__all__ = ["COPY_COLOURS", "ENGINES", "Trace", "TraceRecord", "TraceRecording", "TraceStats", "describe",
           "engine_bound", "format_seconds", "plan_dot", "record_trace", "save_gantt"]
