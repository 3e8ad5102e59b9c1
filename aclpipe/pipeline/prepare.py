"""Preparing: from input shapes to a program that is ready to enqueue, in one step.

``bind`` the graph to the shapes, ``plan`` it (cached per input signature), ``upload`` the
constants it needs (once per pipeline), build the :class:`Program` (per slot: arena,
staging, events, phase one for every node), ``reserve`` its workspaces, and ``capture`` it
as a device graph when the backend can replay one.  Errors name the node and stop before
anything is enqueued; a half-built program is freed.

A signature is the graph's :class:`~aclpipe.graph.Signature`: the input shapes and, for an
imported ONNX model with host-value inputs (Reshape's shape, an If condition, ...), their
contents, which that program is specialized for (:mod:`aclpipe.graph.signature`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..graph.signature import Signature
from ..plan import Plan, make_plan
from .program import Program

if TYPE_CHECKING:
    from ..graph import Graph
    from ..runtime import Device, DeviceBuffer, Stream
    from ..runtime.workspaces import WorkspaceStrategy

__all__ = ["Preparer"]


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
    """

    def __init__(self, graph: Graph, device: Device, streams: list[Stream], *, depth: int, max_streams: int):
        self.graph = graph
        self.device = device
        self.streams = streams
        self.depth = depth
        self.max_streams = max_streams
        self.constants: dict[str, DeviceBuffer] = {}
        self._plans: dict[Signature, Plan] = {}

    def signature(self, inputs: Mapping[str, Any]) -> Signature:
        """The signature of these inputs: shapes (tuples, or arrays whose shape is used) and the
        contents of the graph's host-value inputs (arrays).  Raises :class:`GraphError` for
        inputs the graph does not take."""
        return self.graph.signature(**inputs)

    def plan_for(self, inputs: Mapping[str, Any] | Signature) -> Plan:
        """The plan for these inputs (see :meth:`signature`), bound and planned once per
        signature."""
        key = inputs if isinstance(inputs, Signature) else self.signature(inputs)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = make_plan(self.graph.bind(**key.bind_arguments()), streams=self.max_streams)
        return plan

    def prepare(self, inputs: Mapping[str, Any] | Signature, workspaces: WorkspaceStrategy) -> Program:
        """A program ready to enqueue: planned, constants uploaded, phase one done for every
        node of every slot, workspaces reserved, captured where the backend can."""
        plan = self.plan_for(inputs)
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
