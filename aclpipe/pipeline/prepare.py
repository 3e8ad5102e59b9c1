"""Preparing: from input shapes to a program that is ready to enqueue, in one step.

``bind`` the graph to the shapes, ``plan`` it (cached per input signature), ``upload`` the
constants it needs (once per pipeline), build the :class:`Program` (per slot: arena,
staging, events, phase one for every node), ``pin`` its workspaces (or ``reserve`` room for
runs that take them node by node), and ``capture`` it as a device graph when the backend can
replay one.  Errors name the node and stop before
anything is enqueued; a half-built program is freed.

A signature is the graph's :class:`~aclpipe.graph.Signature`: the input shapes and, for an
imported ONNX model with host-value inputs (Reshape's shape, an If condition, ...), their
contents, which that program is specialized for (:mod:`aclpipe.graph.signature`).

Events are limited per device (``hicann/runtime`` ``07_event_management.md``: 65536 on Atlas
A2, 1023 on Atlas inference cards).  A program that could never fit is refused with an
error naming the limit; one that does not fit beside the programs already prepared asks the
pipeline to evict idle ones (least recently used first) and is refused when none is left.
Device memory is handled the same way: a program whose arenas, staging or workspaces do not
fit evicts idle programs one at a time and tries again before :class:`DeviceOutOfMemory`.
Streams too (:mod:`~aclpipe.pipeline.budget`): a capture's model streams are reserved in the
device's budget first, evicting idle programs (this pipeline's, then any on the device) until
they fit; when nothing idle is left the program is prepared uncaptured instead of failing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ..errors import DeviceOutOfMemory, error_from_code
from ..gc_pause import paused_gc
from ..graph.signature import Signature
from ..plan import Plan, make_plan
from .budget import StreamBudget
from .cache import LruDict
from .program import Program, events_per_slot

if TYPE_CHECKING:
    from ..graph import Graph
    from ..runtime import Device, DeviceBuffer, Stream
    from ..runtime.workspaces import WorkspaceStrategy

__all__ = ["Preparer", "with_room"]

T = TypeVar("T")


def with_room(build: Callable[[], T], make_room: Callable[[], bool] | None) -> T:
    """``build()``, tried again each time it runs out of device memory and ``make_room`` frees
    something (an idle program of another shape: a server that met many batch sizes frees the
    least recently used before refusing); the :class:`DeviceOutOfMemory` once nothing is left."""
    while True:
        try:
            return build()
        except DeviceOutOfMemory:
            if make_room is None or not make_room():
                raise


class Preparer:
    """Prepares programs of one graph on one device, sharing constants and cached plans.

    Parameters
    ----------
    graph:
        What to prepare.
    device:
        Where.
    streams:
        The pipeline's streams: compute streams first, then the replay streams, then H2D and D2H.
    depth:
        Slots per program.
    max_streams:
        At most this many compute streams in a plan.
    plans:
        Plans kept (per input signature; the least recently used go first).
    replay_lanes:
        The lanes of ``streams`` captured slots replay on, one per slot (see
        :mod:`~aclpipe.pipeline.program`); none: programs are not captured.
    budget:
        The device's stream budget captures reserve their model streams in (default: the
        device's own, :meth:`StreamBudget.of`).
    """

    def __init__(self, graph: Graph, device: Device, streams: list[Stream], *, depth: int, max_streams: int,
                 plans: int = 64, replay_lanes: Sequence[int] = (), budget: StreamBudget | None = None):
        self.graph = graph
        self.device = device
        self.streams = streams
        self.depth = depth
        self.max_streams = max_streams
        self.replay_lanes = tuple(replay_lanes)
        self.budget = budget if budget is not None else StreamBudget.of(device)
        self.constants: dict[str, DeviceBuffer] = {}
        #: Values whose storage is a caller's device buffer (see Program): the caller frees them.
        self.bound: dict[str, DeviceBuffer] = {}
        self._plans: LruDict[Signature, Plan] = LruDict(plans)

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
        if plan is None:  # binding and planning pause the collector themselves (aclpipe.gc_pause)
            plan = make_plan(self.graph.bind(**key.bind_arguments()), streams=self.max_streams, external=self.bound)
            self._plans[key] = plan
        return plan

    def bind_storage(self, value: str, buffer: DeviceBuffer) -> None:
        """Keep ``value`` in ``buffer`` in the programs prepared from now on (the plans made so
        far gave it arena room: they are made again)."""
        self.bound[value] = buffer
        self._plans.clear()

    def prepare(self, inputs: Mapping[str, Any] | Signature, workspaces: WorkspaceStrategy,
                make_room: Callable[[], bool] | None = None) -> Program:
        """A program ready to enqueue: planned, constants uploaded, phase one done for every
        node of every slot, workspaces pinned (or reserved), captured where the backend can.

        ``make_room`` frees events and device memory by closing an idle program; it returns
        False when there is none, and the program is then refused (``ACL_ERROR_RT_NO_EVENT_RESOURCE``,
        or the :class:`DeviceOutOfMemory` that preparing met)."""
        plan = self.plan_for(inputs)
        self.reserve_events(plan, make_room)
        return with_room(lambda: self._build(plan, workspaces), make_room)

    def _build(self, plan: Plan, workspaces: WorkspaceStrategy) -> Program:
        """Constants, then the program with its workspaces, captured where its model streams fit
        the device's budget; a half-built one is freed."""
        self.upload_constants(plan)
        with paused_gc():  # per node and slot: descriptors, executors, launch records, tasks; all kept
            program = Program(self.device, plan, self.constants, self.streams, self.depth, self.bound)
            try:
                if not program.pin_workspaces(workspaces):
                    workspaces.reserve(program.workspace_sizes)
                self._capture(program, workspaces)
            except BaseException:
                program.close()
                raise
        return program

    def _capture(self, program: Program, workspaces: WorkspaceStrategy) -> None:
        """Capture ``program`` if its model streams fit the budget (freeing idle programs for
        them); otherwise, or when the device runs out part way, it stays uncaptured (starved)."""
        needed = program.model_streams(self.replay_lanes)
        if not needed:
            return
        if not self.budget.reserve(needed):
            program.starved = True
            return
        captured = False
        try:
            captured = program.capture(workspaces, self.replay_lanes)
        finally:
            if captured:
                program.hold_streams(self.budget, needed)
            else:
                self.budget.release(needed)

    def reserve_events(self, plan: Plan, make_room: Callable[[], bool] | None = None) -> None:
        """Make sure the device has the events a program of ``plan`` needs, or refuse it."""
        device = self.device
        limit = device.capabilities.max_events
        per_slot = events_per_slot(plan, len(self.streams), done_joins=device.capabilities.event_errors)
        needed = per_slot * self.depth
        if needed > limit:
            raise error_from_code(
                207007, f"a program of graph {self.graph.name!r} for these shapes needs {needed} events "
                f"({per_slot} per slot x depth {self.depth}), more than the {limit} {device.name} supports per device "
                "(07_event_management.md); lower depth, or streams (fewer cross-stream waits)")
        while device.live_events + needed > limit:
            if make_room is None or not make_room():
                raise error_from_code(
                    207007, f"a program of graph {self.graph.name!r} needs {needed} events but {device.live_events} of "
                    f"the {limit} that {device.name} supports (07_event_management.md) are held by programs still in "
                    "use or by other code; wait for runs to finish, close other pipelines, or lower depth")

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
