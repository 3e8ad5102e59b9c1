"""Plans as Graphviz DOT, annotated with measured device times from a trace."""

from __future__ import annotations

from ..plan import Plan
from .trace import Trace

__all__ = ["plan_dot"]


def plan_dot(plan: Plan, trace: Trace | None = None, *, run: int | None = None) -> str:
    """The plan as Graphviz DOT (:meth:`Plan.to_dot`: a cluster per stream, data edges solid,
    event waits dashed), with each node's measured device time from ``trace`` when given
    (the mean over its launches, or those of ``run``)."""
    if trace is None:
        return plan.to_dot()
    times: dict[str, list[float]] = {}
    for record in trace.engine_tasks():
        if record.node is not None and (run is None or record.run == run):
            times.setdefault(record.node, []).append(record.duration)
    notes = {name: f"{sum(measured) / len(measured) * 1e6:.1f} us" for name, measured in times.items()}
    return plan.to_dot(notes)
