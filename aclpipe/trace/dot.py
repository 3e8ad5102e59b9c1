"""Plans as Graphviz DOT, annotated with measured device times from a trace."""

from __future__ import annotations

from ..plan import Plan
from .trace import Trace

__all__ = ["plan_dot"]


def plan_dot(plan: Plan, trace: Trace | None = None, *, run: int | None = None) -> str:
    """The plan as Graphviz DOT (:meth:`Plan.to_dot`: a cluster per stream, data edges solid,
    event waits dashed), with each node's measured device time from ``trace`` when given
    (the mean over its launches, or those of ``run``)."""
    dot = plan.to_dot()
    if trace is None:
        return dot
    times: dict[str, list[float]] = {}
    for record in trace.engine_tasks():
        if record.node is not None and (run is None or record.run == run):
            times.setdefault(record.node, []).append(record.duration)
    lines = dot.splitlines()
    for node in plan.nodes:
        measured = times.get(node.name)
        if not measured:
            continue
        prefix = f"    n{node.index} [label="
        for index, line in enumerate(lines):
            if line.startswith(prefix):
                mean_us = sum(measured) / len(measured) * 1e6
                lines[index] = line.replace('", fillcolor', f'\\n{mean_us:.1f} us", fillcolor', 1)
    return "\n".join(lines) + "\n"
