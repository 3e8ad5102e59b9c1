"""The planner: pure passes over frozen data that turn a bound graph into a :class:`Plan`.

``order`` (launch order, critical path), ``streams`` (chains onto compute streams),
``events`` (minimal waits), ``memory`` (arena offsets); :func:`make_plan` runs them all.
:func:`batchable` says whether requests may share a run (``batch_axis``).
"""

from __future__ import annotations

from .arena import A2_RULE, ASCEND_950_RULE, ArenaRule
from .batch_axis import BatchVerdict, batch_verdict, batchable
from .events import EventPlacement, place_events
from .memory import ALIGNMENT, Buffer, MemoryPlan, plan_memory
from .order import Dag, critical_path, estimate_cost, topological_order
from .plan import Plan, PlannedNode, ValuePlacement, make_plan
from .streams import assign_streams, chains, transitive_reduction

__all__ = [
    "A2_RULE",
    "ALIGNMENT",
    "ASCEND_950_RULE",
    "ArenaRule",
    "BatchVerdict",
    "Buffer",
    "Dag",
    "EventPlacement",
    "MemoryPlan",
    "Plan",
    "PlannedNode",
    "ValuePlacement",
    "assign_streams",
    "batch_verdict",
    "batchable",
    "chains",
    "critical_path",
    "estimate_cost",
    "make_plan",
    "place_events",
    "plan_memory",
    "topological_order",
    "transitive_reduction",
]
