"""Preparing: from input shapes to a program that is ready to enqueue, in one step.

``bind`` the graph to the shapes, ``plan`` it (cached per input signature), ``upload`` the
constants it needs (once per pipeline), build the :class:`Program` (per slot: arena,
staging, events, phase one for every node), ``reserve`` its workspaces, and ``capture`` it
as a device graph when the backend can replay one.  Errors name the node and stop before
anything is enqueued; a half-built program is freed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..graph.bound import normalize_shapes
from ..plan import Plan, make_plan
from .cache import LruDict
from .program import Program

if TYPE_CHECKING:
    from ..graph import Graph
    from ..runtime import Device, DeviceBuffer, Stream
    from ..runtime.workspaces import WorkspaceStrategy

__all__ = ["Preparer", "signature"]

#: An input signature: ``((input name, shape), ...)`` sorted by name.
Signature = tuple[tuple[str, tuple[int, ...]], ...]


def signature(shapes: Mapping[str, Sequence[int]]) -> Signature:
    """The hashable key of one set of input shapes (already checked)."""
    return tuple(sorted((name, tuple(int(d) for d in shape)) for name, shape in shapes.items()))


class Preparer:
    """Prepares programs of one graph on one device, sharing constants and cached plans.

    Parameters
    ----------
    graph:
        What to prepare.
    device:
        Where.
    streams:
        The pipeline's streams: compute streams first, then H2D and D2H.
    depth:
        Slots per program.
    max_streams:
        At most this many compute streams in a plan.
    plans:
        Plans kept (per input signature; the least recently used go first).
    """

    def __init__(self, graph: Graph, device: Device, streams: list[Stream], *, depth: int, max_streams: int,
                 plans: int = 64):
        self.graph = graph
        self.device = device
        self.streams = streams
        self.depth = depth
        self.max_streams = max_streams
        self.constants: dict[str, DeviceBuffer] = {}
        self._plans: LruDict[Signature, Plan] = LruDict(plans)

    def plan_for(self, shapes: Mapping[str, Any]) -> Plan:
        """The plan for these input shapes (tuples, or arrays whose shape is used), bound and
        planned once per input signature.  Raises :class:`GraphError` for shapes the graph
        does not take."""
        key = signature(normalize_shapes(self.graph, shapes))
        plan = self._plans.get(key)
        if plan is None:
            plan = make_plan(self.graph.bind(**dict(key)), streams=self.max_streams)
            self._plans[key] = plan
        return plan

    def prepare(self, shapes: Mapping[str, Any], workspaces: WorkspaceStrategy) -> Program:
        """A program ready to enqueue: planned, constants uploaded, phase one done for every
        node of every slot, workspaces reserved, captured where the backend can."""
        plan = self.plan_for(shapes)
        self.upload_constants(plan)
        program = Program(self.device, plan, self.constants, self.streams, self.depth)
        try:
            workspaces.reserve(program.workspace_sizes)
            program.capture(workspaces, len(self.streams) - 1)
        except BaseException:
            program.close()
            raise
        return program

    def upload_constants(self, plan: Plan) -> None:
        """Copy the plan's constants the device does not hold yet."""
        for name, array in plan.constants.items():
            if name not in self.constants:
                self.constants[name] = self.device.upload(np.asarray(array), label=f"constant {name}")

    @property
    def constant_bytes(self) -> int:
        return sum(buffer.nbytes for buffer in self.constants.values())

    def close(self) -> None:
        """Free the constants; the caller has synchronized the streams."""
        for buffer in self.constants.values():
            buffer.close()
        self.constants.clear()
        self._plans.clear()

    def __repr__(self) -> str:
        return f"<Preparer {self.graph.name!r}: {len(self._plans)} plans, {len(self.constants)} constants>"
