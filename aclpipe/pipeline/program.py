"""A prepared program: one plan bound to device memory and executors, for one input signature.

Preparing does all the slow work once (ARCHITECTURE.md 5): for each of ``depth`` slots it
allocates the activation arena and pinned staging buffers, creates the events the plan
records, and runs phase one for every node against that slot's addresses, making each
executor repeatable.  Enqueueing a run then only walks precomputed steps: waits, launches,
records and copies, with no planning, allocation or executor building on the way.

Events are reusable (``aclrtCreateEventExWithFlag``): every run records them again, which
only that kind promises to support (``hicann/runtime`` ``07_event_management.md``).

Workspaces are pinned where the strategy can (:meth:`WorkspaceStrategy.pin`: one block per
stream held by the program until it closes; every strategy but ``per-call``): then nothing
varies between runs, and each slot's run becomes a flat table of launch records
(:mod:`aclpipe.runtime.launches`) enqueued with one call, or captured
(:mod:`aclpipe.runtime.capture`).  Otherwise (``per-call``, a pool too
small to pin, an op that refuses repeatable executors) a run takes its workspaces node by
node.

Capture follows the ``aclmdlRI`` model (``15_model_running_instance__management.md``): each
slot's run is captured from a *replay stream* of its own (the origin), which first records a
*fork* event that every stream the run uses waits on (so they join the capture), and last
waits on every stream's tail (so they rejoin it).  A run is then one ``model_execute`` on
that replay stream, joined by the D2H stream (which runs the completion) through the slot's
``joined`` event.  Why a replay stream per slot: ``aclmdlRIExecuteAsync`` is ordered on its
stream like any task (the stream's later work waits for the whole model), so replays on one
shared stream would run one after another, and consecutive runs would never overlap their
copies and compute.  On streams of their own, the replays of different slots run at once,
each on its own model streams.  For the same reason a captured slot pins workspaces of its
own: two slots' kernels of one pipeline stream may then run at the same time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from ..backends.protocol import LaunchKind, LaunchRecord, MemcpyKind
from ..dtypes import DType
from ..errors import BackendError, error_from_code
from ..plan import Plan, PlannedNode
from ..runtime.capture import Capture, CapturedRun, can_capture
from ..runtime.completion import HostCopies
from ..runtime.executor import Executor
from ..runtime.launches import LaunchTable, enqueue_records
from ..runtime.workspaces import NO_WORKSPACE, Workspace
from ..tensor import TensorDesc
from .loop import LoopBody, LoopRunner, region_models
from .segments import Segments, loop_events, segment_streams, split_steps

if TYPE_CHECKING:
    from ..runtime import Device, DeviceBuffer, Event, HostBuffer, Stream
    from ..runtime.completion.timeline import Timeline
    from ..runtime.workspaces import WorkspaceStrategy
    from .budget import StreamBudget

__all__ = ["Program", "Slot", "Step", "events_per_slot", "model_streams_per_slot"]


#: ACL_ERROR_RT_NO_STREAM_RESOURCE: capturing ran out of streams (see Program.capture).
_NO_STREAM_RESOURCE = 207008


def events_per_slot(plan: Plan, streams: int, *, done_joins: bool = False) -> int:
    """Events one slot of ``plan`` holds on ``streams`` pipeline streams (compute, replay, H2D,
    D2H), at most: one per recording node, a tail per stream the run uses other than D2H, the
    run's ``done``, and a capture's fork, D2H tail and join (the join is the ``done`` event on
    backends whose events carry errors: ``done_joins``).  CANN limits events per device
    (07_event_management.md)."""
    copies = {plan.h2d_stream: streams - 2, plan.d2h_stream: streams - 1}
    lanes = {copies.get(node.stream, node.stream) for node in plan.nodes} - {streams - 1}
    loops = sum(1 for node in plan.nodes if node.op == "Loop")  # captured around (pipeline.segments)
    extra = loop_events(loops, streams) if loops else 0
    return sum(1 for node in plan.nodes if node.record) + len(lanes) + (3 if done_joins else 4) + extra


def model_streams_per_slot(plan: Plan, streams: int) -> int:
    """Streams one captured slot's model of ``plan`` holds on ``streams`` pipeline streams (see
    :meth:`Program.model_streams`): the replay stream, each compute and copy stream its run
    uses, D2H included (captured streams consume stream resources,
    15_model_running_instance__management.md)."""
    copies = {plan.h2d_stream: streams - 2, plan.d2h_stream: streams - 1}
    if any(node.op == "Loop" for node in plan.nodes):
        return _around_loops(plan, copies)
    lanes = {copies.get(node.stream, node.stream) for node in plan.nodes} - {streams - 1}
    return 2 + len(lanes)


def _around_loops(plan: Plan, copies: Mapping[int, int]) -> int:
    """Model streams of a slot holding loops: each loop's models, and per segment around them
    its replay stream and every stream it uses (as :meth:`Program.model_streams` counts)."""
    total, lanes = 0, set[int]()
    for node in plan.nodes:
        if node.op != "Loop":
            lanes.add(copies.get(node.stream, node.stream))
            continue
        total += region_models(node.attrs["region"]) + (1 + len(lanes) if lanes else 0)
        lanes = set()
    return total + (1 + len(lanes) if lanes else 0)


_WAIT, _COPY, _KERNEL, _RECORD = LaunchKind.WAIT, LaunchKind.COPY, LaunchKind.KERNEL, LaunchKind.RECORD
_H2D = MemcpyKind.HOST_TO_DEVICE  # the field's default, where a record copies nothing


@dataclass(eq=False, slots=True)
class Step:
    """One node of one slot, ready to enqueue."""

    node: PlannedNode
    stream: Any  # backend stream handle
    lane: int  # index of the pipeline stream (and timeline lane) it runs on
    waits: tuple[Any, ...]  # backend event handles
    record: Any | None
    executor: Any | None = None  # compute nodes
    repeatable: bool = True
    inputs: tuple[TensorDesc | None, ...] = ()
    outputs: tuple[TensorDesc | None, ...] = ()
    workspace_size: int = 0
    copy: tuple[int, int, int, MemcpyKind] | None = None  # (dst, src, nbytes, kind) for H2D/D2H
    key: tuple[int, int] = (0, 0)  # (slot, node): what the ``cached`` workspace strategy keys on
    region: LoopRunner | None = None  # a Loop node: its body, run as control flow (pipeline.loop)


@dataclass(eq=False)
class Slot:
    index: int
    arena: DeviceBuffer | None
    staging_in: dict[str, HostBuffer]
    staging_out: dict[str, HostBuffer]
    steps: list[Step] = field(default_factory=list)
    events: dict[int, Event] = field(default_factory=dict)  # node index -> event it records
    tails: list[tuple[int, Event]] = field(default_factory=list)  # (lane, event) per used stream
    #: Recorded on the D2H stream after the run's last work, behind the tails: on backends whose
    #: events carry their producer's error, an error on it is this run's, whoever consumed the
    #: streams' sticky errors.
    done: Event | None = None
    executors: list[Executor] = field(default_factory=list)
    graph: CapturedRun | None = None  # the captured run (an aclmdlRI model), when the backend can capture
    fork: Event | None = None  # recorded first by a captured run; every stream it uses waits on it
    #: The lane a captured run replays on (its capture's origin): one per slot, see the module doc.
    replay_lane: int | None = None
    #: Recorded on the replay lane after each replay, waited on by the D2H stream before the
    #: completion: the slot's ``done`` where the backend has one (an error in the model is then
    #: the run's), else an event of its own.
    joined: Event | None = None
    #: A captured slot's own pinned workspaces (stream -> workspace); None: the program's.
    pinned: dict[Stream, Workspace] | None = None
    body: LaunchTable | None = None  # every step's launches, when workspaces are pinned
    tail: LaunchTable | None = None  # each used stream's tail, joined by the D2H stream
    #: (output, staging view, address, nbytes, what) per graph output: see Program.read_outputs
    reads: list[tuple[str, np.ndarray, int, int, str]] | None = None
    #: input -> (staging view, address, nbytes, what): see Program.write_inputs
    writes: dict[str, tuple[np.ndarray, int, int, str]] | None = None
    copies: HostCopies | None = None  # staging -> each run's result arrays, in its completion
    results: dict[str, np.ndarray] | None = None  # the arrays the run in flight fills
    #: In place of ``body`` when the program holds Loop nodes: launch tables cut around them.
    segments: list[LaunchTable | Step] | None = None
    #: Those segments captured, replayed on ``replay_lane`` around the loops (pipeline.segments).
    around: Segments | None = None

    @property
    def event_count(self) -> int:
        """Events this slot holds (CANN limits them per device)."""
        extras = {id(event) for event in (self.done, self.fork, self.joined) if event is not None}
        return len(self.events) + len(self.tails) + len(extras)


class Program:
    """Everything one input signature needs, for ``depth`` slots."""

    def __init__(self, device: Device, plan: Plan, constants: Mapping[str, DeviceBuffer], streams: list[Stream],
                 depth: int, bound: Mapping[str, DeviceBuffer] | None = None):
        """``streams`` are the pipeline's: compute streams first, then the H2D and D2H streams.
        Plan stream ``k`` runs on compute stream ``k``; the plan's copy streams on the last two.
        ``bound``: values (by name) whose storage is a caller's device buffer instead of the
        arena, in every slot (:meth:`Pipeline.bind_storage <aclpipe.Pipeline.bind_storage>`)."""
        self.device = device
        self.plan = plan
        self.bound = dict(bound or {})  # as bound when it was prepared
        self.streams = streams
        copies = {plan.h2d_stream: len(streams) - 2, plan.d2h_stream: len(streams) - 1}
        #: plan stream index -> pipeline stream index (the timeline lane)
        self.lane_of = [copies.get(s, s) for s in range(plan.num_streams + 2)]
        self.constants = constants
        self.slots: list[Slot] = []
        #: stream -> the largest workspace a node on it needs (what the workspaces reserve)
        self.workspace_sizes: dict[Stream, int] = {}
        self.fallback_nodes: set[str] = set()
        #: stream -> the workspace this program's launches there use, once pinned
        self.pinned: dict[Stream, Workspace] | None = None
        self._pinned_by: WorkspaceStrategy | None = None
        self._slots_pinned_by: WorkspaceStrategy | None = None  # who pinned each captured slot's own
        self._streams_held: tuple[StreamBudget, int] | None = None  # see hold_streams
        #: Not captured because the device ran out of streams (see pipeline.budget).
        self.starved = False
        self._building: Slot | None = None  # a half-built slot, for close() after a failure
        self._locations: dict[str, tuple[TensorDesc, str | None, int]] = {}  # see _location
        self._contexts: dict[int, Mapping[str, Any]] = {}  # see _context
        #: value -> its descriptor at its constant's address: the same in every slot, built once
        self._constant_descs: dict[str, TensorDesc] = {}
        #: value -> its descriptor in the slot being built (see _descs); emptied when it is built
        self._slot_descs: dict[str, TensorDesc] = {}
        #: Loop node -> its body, prepared once for every slot (see pipeline.loop)
        self.loop_bodies: dict[str, LoopBody] = {}
        try:
            for index in range(depth):
                self.slots.append(self._build_slot(index))
        except BaseException:
            self.close()
            raise

    # -- building --------------------------------------------------------------------------------
    def _build_slot(self, index: int) -> Slot:
        plan, device = self.plan, self.device
        # Zero-size activations (a batch of 0 rows) still need an address inside a live
        # allocation: their arena then holds the smallest block the device gives.
        needs_arena = plan.arena_size or any(v.arena_offset is not None for v in plan.values.values())
        arena = device.alloc(max(plan.arena_size, 1), label=f"arena slot {index}") if needs_arena else None
        slot = self._building = Slot(index, arena, {}, {})
        for name in plan.inputs:
            desc = plan.values[name].desc
            slot.staging_in[name] = device.alloc_host(max(desc.nbytes, 1), label=f"input {name}")
        for output, value in plan.outputs.items():
            desc = plan.values[value].desc
            slot.staging_out[output] = device.alloc_host(max(desc.nbytes, 1), label=f"output {output}")
        events = slot.events = {node.index: device.create_event() for node in plan.nodes if node.record}
        handles = [stream.handle for stream in self.streams]
        for node in plan.nodes:
            slot.steps.append(self._build_step(slot, node, handles, events))
        used = sorted({self.lane_of[node.stream] for node in plan.nodes} - {len(handles) - 1})
        slot.tails = [(lane, device.create_event()) for lane in used]
        if device.capabilities.event_errors:
            slot.done = device.create_event()
        slot.tail = LaunchTable(device.backend, self._tail_records(slot))
        self._building = None
        self._slot_descs = {}  # the steps hold what they use
        return slot

    def address(self, slot: Slot, value: str) -> int:
        _, constant, offset = self._location(value)
        if constant is not None:
            return self._storage(constant).address
        assert slot.arena is not None
        return slot.arena.address + offset

    def _location(self, value: str) -> tuple[TensorDesc, str | None, int]:
        """``value``'s descriptor, and where its storage is in every slot: the constant that
        holds it, else its offset in the arena (the same for every slot: looked up once)."""
        location = self._locations.get(value)
        if location is None:
            values = self.plan.values
            storage = values[value].base or value
            if values[storage].kind == "constant" or storage in self.bound:
                location = (values[value].desc, storage, 0)
            else:
                offset = values[storage].arena_offset
                assert offset is not None
                location = (values[value].desc, None, offset)
            self._locations[value] = location
        return location

    def _desc(self, slot: Slot, value: str | None) -> TensorDesc | None:
        return None if value is None else self._descs(slot, (value,))[0]

    def _descs(self, slot: Slot, values: Sequence[str | None]) -> tuple[TensorDesc | None, ...]:
        """The descriptors of ``values`` at their addresses in ``slot`` (None stays None).  Per
        node and slot, so written for speed.  Descriptors are immutable, so each is made once
        and shared: an activation's by its writer and readers in the slot being built, a
        constant's by every slot."""
        made = self._slot_descs
        descs: list[TensorDesc | None] = []
        for value in values:
            if value is None:
                descs.append(None)
                continue
            desc = made.get(value)
            if desc is None:
                desc = made[value] = self._make_desc(slot, value)
            descs.append(desc)
        return tuple(descs)

    def _make_desc(self, slot: Slot, value: str) -> TensorDesc:
        desc, constant, offset = self._locations.get(value) or self._location(value)
        if constant is None:
            assert slot.arena is not None
            return desc.at(slot.arena.address + offset)
        shared = self._constant_descs.get(value)
        if shared is None:
            shared = self._constant_descs[value] = desc.at(self._storage(constant).address)
        return shared

    def _storage(self, name: str) -> DeviceBuffer:
        """The buffer of a constant, or of a value bound to a caller's buffer."""
        bound = self.bound.get(name)
        return bound if bound is not None else self.constants[name]

    def _build_step(self, slot: Slot, node: PlannedNode, handles: list[Any], events: dict[int, Event]) -> Step:
        lane = self.lane_of[node.stream]
        step = Step(node, handles[lane], lane, tuple([events[w].handle for w in node.waits]),
                    events[node.index].handle if node.record else None, key=(slot.index, node.index))
        if node.op == "H2D":
            name = node.attrs["input"]
            desc = self.plan.values[name].desc
            step.copy = (self.address(slot, name), slot.staging_in[name].address, desc.nbytes,
                         MemcpyKind.HOST_TO_DEVICE)
        elif node.op == "D2H":
            output, value = node.attrs["output"], node.inputs[0]
            assert value is not None
            desc = self.plan.values[value].desc
            step.copy = (slot.staging_out[output].address, self._desc(slot, value).data_address,  # type: ignore[union-attr]
                         desc.nbytes, MemcpyKind.DEVICE_TO_HOST)
        else:
            self._prepare_node(slot, step)
        return step

    def _prepare_node(self, slot: Slot, step: Step) -> None:
        node = step.node
        if node.op == "Loop":
            self._prepare_loop(slot, step)
            return
        step.inputs = self._descs(slot, node.inputs)
        step.outputs = self._descs(slot, node.outputs)
        executor = Executor.prepare(self.device.backend, node.op, step.inputs, step.outputs, node.attrs,
                                    node=node.name, repeatable=True)
        slot.executors.append(executor)
        if not executor.repeatable:
            # The op refuses repeatable executors: phase one again at each run (ARCHITECTURE.md 5).
            step.repeatable = False
            self.fallback_nodes.add(node.name)
        step.executor = executor.handle
        step.workspace_size = executor.workspace_size
        if step.workspace_size:
            stream = self.streams[step.lane]
            self.workspace_sizes[stream] = max(self.workspace_sizes.get(stream, 0), step.workspace_size)

    def _prepare_loop(self, slot: Slot, step: Step) -> None:
        """A Loop node: its body prepared once per program, run by a runner of the slot's own."""
        node = step.node
        step.inputs = self._descs(slot, node.inputs)
        step.outputs = self._descs(slot, node.outputs)
        body = self.loop_bodies.get(node.name)
        if body is None:
            body = self.loop_bodies[node.name] = LoopBody(self.device, node.attrs["region"], node.name)
        step.region = LoopRunner(body, step.inputs, step.outputs, self.streams[step.lane], step.lane)

    @property
    def executor_count(self) -> int:
        """Executors prepared for every slot, loop bodies' included."""
        return sum(len(slot.executors) + sum(step.region.executor_count for step in slot.steps if step.region)
                   for slot in self.slots)

    @property
    def has_loops(self) -> bool:
        """Whether the program holds Loop nodes (runs cut around them, never captured whole)."""
        return bool(self.loop_bodies)

    @property
    def event_count(self) -> int:
        """Events this program holds, over all its slots."""
        return sum(slot.event_count for slot in self.slots)

    def rebind(self) -> None:
        """Point every step at the streams' current device streams (after :meth:`Stream.renew`)."""
        handles = [stream.handle for stream in self.streams]
        for slot in self.slots:
            for step in slot.steps:
                step.stream = handles[step.lane]
                if step.region is not None:
                    step.region.rebind()
            if slot.graph is None and slot.around is None:  # a captured slot replays its models: no table to renew
                self._build_tables(slot)

    # -- fixing what varies: pinned workspaces, launch tables, capture ----------------------------
    def pin_workspaces(self, workspaces: WorkspaceStrategy) -> bool:
        """Hold one workspace per stream for this program's launches until :meth:`close`
        (:meth:`WorkspaceStrategy.pin`), and turn each slot's run into a launch table.  False
        when something varies between runs: an op refused repeatable executors, or the strategy
        cannot pin without waiting (``per-call`` never pins)."""
        if self.fallback_nodes:
            return False
        if self.pinned is not None:
            return True
        pinned = workspaces.pin(self.workspace_sizes, self) if self.workspace_sizes else {}
        if pinned is None:
            return False
        self.pinned, self._pinned_by = pinned, workspaces if pinned else None
        for slot in self.slots:
            self._build_tables(slot)
        return True

    def _build_tables(self, slot: Slot) -> None:
        backend = self.device.backend
        if slot.tail is not None:
            slot.tail.close()
        slot.tail = LaunchTable(backend, self._tail_records(slot))
        pinned = slot.pinned if slot.pinned is not None else self.pinned
        if pinned is None:
            return
        if slot.body is not None:
            slot.body.close()
        if self.has_loops:
            self._build_segments(slot, pinned)
            return
        slot.body = self._table(slot.steps, pinned)

    def _table(self, steps: Sequence[Step], pinned: Mapping[Stream, Workspace]) -> LaunchTable:
        """A launch table of ``steps`` with their streams' pinned workspaces."""
        records = [record for step in steps for record in self._pinned_records(step, pinned)]
        return LaunchTable(self.device.backend, records)

    def _pinned_records(self, step: Step, pinned: Mapping[Stream, Workspace]) -> list[LaunchRecord]:
        """``step``'s launch records with its stream's pinned workspace, where it needs one."""
        workspace = pinned[self.streams[step.lane]].address if step.workspace_size else 0
        return self._records(step, step.executor, workspace)

    def _build_segments(self, slot: Slot, pinned: Mapping[Stream, Workspace]) -> None:
        """The slot's launches as tables cut around its Loop steps, which run in between."""
        for segment in slot.segments or ():
            if isinstance(segment, LaunchTable):
                segment.close()
        slot.segments = [self._table(part, pinned) if isinstance(part, list) else part
                         for part in split_steps(slot.steps)]

    def _pin_per_slot(self, workspaces: WorkspaceStrategy) -> bool:
        """Give every slot workspaces of its own (see the module doc: captured slots replay at
        once), in place of the program's shared ones.  False, holding nothing more, when the
        strategy cannot pin them all without waiting."""
        if not self.workspace_sizes:
            for slot in self.slots:
                slot.pinned = {}
            return True
        if not workspaces.exclusive_pins:
            return False
        held: list[Slot] = []
        for slot in self.slots:
            pinned = workspaces.pin(self.workspace_sizes, (self, slot.index))
            if pinned is None:
                for done in held:  # nothing was launched with them yet
                    workspaces.unpin((self, done.index), passed=True)
                    done.pinned = None
                return False
            slot.pinned = pinned
            held.append(slot)
        self._slots_pinned_by = workspaces
        if self._pinned_by is not None:  # the shared blocks served no launch yet
            self._pinned_by.unpin(self, passed=True)
            self._pinned_by = None
        self.pinned = None
        return True

    def model_streams(self, replay_lanes: Sequence[int]) -> int:
        """Streams the models of a capture of every slot would hold (0: it cannot be captured):
        one per stream each slot's run uses, its replay stream and D2H included (captured
        streams consume stream resources, 15_model_running_instance__management.md)."""
        if not can_capture(self.device) or not replay_lanes or self.fallback_nodes:
            return 0
        if self.has_loops:  # each loop's iterations and the segments around them (see _capture_loops)
            loops = sum(step.region.models for slot in self.slots for step in slot.steps if step.region is not None)
            return loops + sum(segment_streams(slot.steps) for slot in self.slots)
        d2h_lane = len(self.streams) - 1
        return sum(2 + sum(1 for lane, _ in slot.tails if lane != d2h_lane) for slot in self.slots)

    def hold_streams(self, budget: StreamBudget, count: int) -> None:
        """Book ``count`` streams in ``budget`` until :meth:`close` (the captured models')."""
        self._streams_held = (budget, count)

    @property
    def streams_held(self) -> int:
        """Streams this program's captured models hold (0 when it is not captured)."""
        return self._streams_held[1] if self._streams_held is not None else 0

    def capture(self, workspaces: WorkspaceStrategy, replay_lanes: Sequence[int]) -> bool:
        """Capture every slot's run as a model when nothing in it varies between runs
        (:meth:`pin_workspaces`, then workspaces of each slot's own); afterwards a run is one
        ``model_execute`` on its slot's replay lane (``replay_lanes[slot.index]``, modulo their
        number).  Returns whether the program was captured; without replay lanes, without room
        for each slot's workspaces, or when the device runs out of streams part way
        (``starved`` is then set), it is left to run from its launch tables."""
        if not can_capture(self.device) or not replay_lanes or not self.pin_workspaces(workspaces):
            return False
        if self.has_loops:
            return self._capture_loops(workspaces, replay_lanes)
        if not self._pin_per_slot(workspaces):
            return False
        for slot in self.slots:
            self._build_tables(slot)
            slot.replay_lane = replay_lanes[slot.index % len(replay_lanes)]
            slot.fork = self.device.create_event()
            slot.joined = slot.done if slot.done is not None else self.device.create_event()
            try:
                with Capture(self.streams[slot.replay_lane]) as capture:
                    self._capture_run(slot, self.streams[slot.replay_lane].handle)
                slot.graph = capture.run
            except BackendError as error:
                if error.code != _NO_STREAM_RESOURCE:
                    raise
                # Streams made outside any pipeline's budget: run from launch tables instead.
                self.starved = True
                for done in self.slots:
                    self._uncapture(done)
                return False
            for table in (slot.body, slot.tail):
                if table is not None:
                    table.close()  # the model holds the launches now
            slot.body = slot.tail = None
        return True

    def _uncapture(self, slot: Slot) -> None:
        """Undo a slot's capture (or its start): its model and capture events go, and it runs
        from launch tables (with the workspaces it pinned for itself)."""
        if slot.graph is not None:
            slot.graph.close()
        slot.graph = None
        for event in (slot.fork, None if slot.joined is slot.done else slot.joined):
            if event is not None:
                event.close()
        slot.fork = slot.joined = slot.replay_lane = None
        d2h_lane = len(self.streams) - 1
        for _, event in [tail for tail in slot.tails if tail[0] == d2h_lane]:
            event.close()
        slot.tails = [tail for tail in slot.tails if tail[0] != d2h_lane]
        self._build_tables(slot)

    def _capture_loops(self, workspaces: WorkspaceStrategy, replay_lanes: Sequence[int]) -> bool:
        """A program with Loop nodes runs host-driven (each loop reads its exit back between
        iterations), so it is not captured whole: each loop's iteration is, from the slot's
        replay lane, and replayed on the loop's stream (see :mod:`~aclpipe.pipeline.loop`);
        then, where each slot can pin workspaces of its own, the launches between the loops
        (:mod:`~aclpipe.pipeline.segments`)."""
        runners = [step.region for slot in self.slots for step in slot.steps if step.region is not None]
        try:
            for slot in self.slots:
                origin = self.streams[replay_lanes[slot.index % len(replay_lanes)]]
                for step in slot.steps:
                    if step.region is not None:
                        step.region.capture(origin)
            if self._pin_per_slot(workspaces):
                for slot in self.slots:
                    self._capture_around(slot, replay_lanes[slot.index % len(replay_lanes)])
        except BackendError as error:
            if error.code != _NO_STREAM_RESOURCE:
                raise
            self.starved = True
            for slot in self.slots:
                self._uncapture_around(slot)
            for runner in runners:
                runner.uncapture()
            return False
        return any(runner.captured for runner in runners) or any(slot.around for slot in self.slots)

    def _capture_around(self, slot: Slot, replay_lane: int) -> None:
        pinned = slot.pinned if slot.pinned is not None else self.pinned
        assert pinned is not None
        self._build_tables(slot)  # the fallback, with the slot's own workspaces
        slot.around = Segments.capture(self.device, self.streams, replay_lane, slot.steps,
                                       lambda step: self._pinned_records(step, pinned))
        slot.replay_lane = replay_lane
        slot.joined = slot.done if slot.done is not None else self.device.create_event()

    def _uncapture_around(self, slot: Slot) -> None:
        if slot.around is None:
            return
        slot.around.close()
        slot.around = None
        if slot.joined is not None and slot.joined is not slot.done:
            slot.joined.close()
        slot.joined = slot.replay_lane = None

    def _capture_run(self, slot: Slot, origin: Any) -> None:
        """Capture one run from ``origin`` (the slot's replay stream): every stream the run uses,
        D2H included, joins the capture through the fork and rejoins the origin through its tail
        (an unjoined stream would fail aclmdlRICaptureEnd)."""
        backend = self.device.backend
        assert slot.fork is not None and slot.body is not None and slot.replay_lane is not None
        d2h_lane = len(self.streams) - 1
        if all(lane != d2h_lane for lane, _ in slot.tails):
            slot.tails.append((d2h_lane, self.device.create_event()))
        backend.event_record(slot.fork.handle, origin)
        for lane, _ in slot.tails:
            backend.stream_wait_event(self.streams[lane].handle, slot.fork.handle)
        slot.body.enqueue(None)
        enqueue_records(backend, self._tail_records(slot, joiner=slot.replay_lane), None)

    async def enqueue(self, slot: Slot, run: int, workspaces: WorkspaceStrategy, timeline: Timeline | None = None
                      ) -> None:
        """Enqueue one run's work on ``slot``.

        It may stop part way by raising (a host-side failure such as a workspace allocation);
        either way the caller must then call :meth:`enqueue_completion`, because whatever was
        enqueued is on the device and the slot may come back only once the device passed it.

        A device whose streams stop on failure is refused: a stopped stream drops the records
        the other streams wait on, so a run would never complete (see :mod:`.faults`).

        A Loop node reads its exit condition back through ``timeline`` (the pipeline's), else by
        synchronizing an event in a worker thread (see :mod:`~aclpipe.pipeline.loop`).
        """
        if self.device.failure_mode == "stop":
            raise error_from_code(
                207000, f"{self.device.name} stops its streams on failure (a stream was created with "
                "failure_mode='stop', which CANN applies to every stream of the device): a failed run would leave "
                "the pipeline's other streams waiting for ever; run pipelines on a device whose streams continue "
                "on failure")
        if slot.graph is not None:
            assert slot.replay_lane is not None
            slot.graph.replay(self.streams[slot.replay_lane], {"run": run})
        elif slot.around is not None:
            await slot.around.enqueue(run, timeline)
        elif slot.body is not None:
            slot.body.enqueue(run)
        elif slot.segments is not None:
            for segment in slot.segments:
                if isinstance(segment, LaunchTable):
                    segment.enqueue(run)
                else:
                    await self._run_loop(segment, run, timeline)
        else:
            for step in slot.steps:
                if step.region is not None:
                    await self._run_loop(step, run, timeline)
                else:
                    await self._launch(step, run, workspaces)

    async def _run_loop(self, step: Step, run: int, timeline: Timeline | None) -> None:
        """A Loop step: its waits, the whole loop on its stream, then its record."""
        backend = self.device.backend
        for event in step.waits:
            backend.stream_wait_event(step.stream, event)
        assert step.region is not None
        await step.region.run(run, timeline)
        if step.record is not None:
            backend.event_record(step.record, step.stream)

    def lanes(self, slot: Slot) -> Sequence[int]:
        """The streams (by lane) a run on ``slot`` puts work on: a captured slot replays its
        model on its replay lane and completes on the D2H stream; otherwise any of them."""
        if slot.graph is not None and slot.replay_lane is not None:
            return (slot.replay_lane, len(self.streams) - 1)
        return range(len(self.streams))

    def enqueue_completion(self, slot: Slot, workspaces: WorkspaceStrategy, timeline: Timeline,
                           d2h_lane: int) -> int:
        """Enqueue the end of a run (after :meth:`enqueue`, whether it finished or raised): every
        used stream's tail joins the D2H stream, then one completion host function, which also
        copies the outputs from the staging into the run's result arrays (made now; see
        :meth:`read_outputs`).  Returns the D2H lane value that marks the run complete."""
        backend, d2h = self.device.backend, self.streams[d2h_lane].handle
        if slot.graph is None and slot.around is None:
            if slot.body is None and slot.segments is None:
                workspaces.publish()
            assert slot.tail is not None
            slot.tail.enqueue(None)
        else:  # the model holds its tails; the D2H stream joins its replay lane
            assert slot.joined is not None and slot.replay_lane is not None
            # Outside any model: records inside one synchronize only the model.
            backend.event_record(slot.joined.handle, self.streams[slot.replay_lane].handle)
            backend.stream_wait_event(d2h, slot.joined.handle)
        if slot.done is not None and slot.done is not slot.joined:
            backend.event_record(slot.done.handle, d2h)
        return timeline.enqueue_advance(backend, d2h, d2h_lane, self._result_copies(slot))

    def _tail_records(self, slot: Slot, joiner: int | None = None) -> list[LaunchRecord]:
        """Each used stream's tail: a record there, waited on by the ``joiner`` lane (D2H unless
        given)."""
        target = self.streams[-1 if joiner is None else joiner].handle
        records = []
        for lane, event in slot.tails:
            records.append(LaunchRecord(LaunchKind.RECORD, self.streams[lane].handle, event.handle))
            records.append(LaunchRecord(LaunchKind.WAIT, target, event.handle))
        return records

    def run_error(self, slot: Slot) -> BackendError | None:
        """The error the slot's last run ended with, as its ``done`` event reports it (None when
        it ran cleanly, or when the backend's events carry no errors)."""
        done = slot.done
        if done is None:
            return None
        try:
            # The completion host function ran after it, so this never waits.  Straight to the
            # backend, which refuses a destroyed event as Event.sync would: the result path runs
            # cold after each wait, where every frame counts.
            self.device.backend.event_sync(done.handle, -1)  # never 0: the runtime refuses it (107000)
        except BackendError as error:
            return error
        return None

    def _records(self, step: Step, executor: Any, workspace: int) -> list[LaunchRecord]:
        """The step's waits, its launch or copy, and its record, as launch records."""
        # Positional arguments, in LaunchRecord's field order (kind, stream, event, executor,
        # workspace, workspace_size, dst, src, nbytes, copy_kind, context): half the cost of
        # keywords, for 56,000 records when two slots of a 19,367-node graph are prepared.
        stream, context = step.stream, self._context(step.node)
        records = [LaunchRecord(_WAIT, stream, event, None, 0, 0, 0, 0, 0, _H2D, context) for event in step.waits]
        if step.copy is not None:
            dst, src, nbytes, kind = step.copy
            records.append(LaunchRecord(_COPY, stream, None, None, 0, 0, dst, src, nbytes, kind, context))
        else:
            records.append(LaunchRecord(_KERNEL, stream, None, executor, workspace,
                                        step.workspace_size if workspace else 0, 0, 0, 0, _H2D, context))
        if step.record is not None:
            records.append(LaunchRecord(_RECORD, stream, step.record, None, 0, 0, 0, 0, 0, _H2D, context))
        return records

    def _context(self, node: PlannedNode) -> Mapping[str, Any]:
        """What a node's launch records say about it (read only): one per node, for every slot."""
        context = self._contexts.get(node.index)
        if context is None:
            context = self._contexts[node.index] = {"node": node.name, "op": node.op}
        return context

    async def _launch(self, step: Step, run: int, workspaces: WorkspaceStrategy) -> None:
        node = step.node
        executor = step.executor
        if step.copy is None and not step.repeatable:  # single-use: phase one again, for this launch
            executor = Executor.prepare(self.device.backend, node.op, step.inputs, step.outputs, node.attrs,
                                        node=node.name).handle
        workspace, stream = NO_WORKSPACE, self.streams[step.lane]
        if step.workspace_size:
            found = workspaces.try_acquire(step.workspace_size, stream, step.key)
            workspace = found if found is not None else await workspaces.acquire_async(
                step.workspace_size, stream, step.key)
        try:
            enqueue_records(self.device.backend, self._records(step, executor, workspace.address), run)
        except BaseException:
            # Back to its strategy once the stream passed whatever did get enqueued.
            workspaces.abandon(workspace, stream)
            raise
        if step.workspace_size:
            if workspaces.blocking_release:
                await workspaces.release_after_async(workspace, stream)
            else:
                workspaces.release_after(workspace, stream, publish=False)

    def read_outputs(self, slot: Slot) -> dict[str, np.ndarray]:
        """Copies of the run's outputs, out of the slot's staging (the run has completed): the
        arrays its completion host function copied them into, handed over once."""
        # The result path runs cold after each wait, where every frame and every numpy call
        # counts: the copies were made on the runtime's thread before the wake-up, and the
        # staging views (for the host-read checks) are taken once per slot.
        reads = slot.reads or self._reads(slot)
        access = self.device.backend.host_access
        for _, _, address, nbytes, what in reads:
            access(address, nbytes, write=False, what=what)
        results = slot.results
        if results is None:  # already handed over (or no completion enqueued): copy again
            return {output: view.copy() for output, view, *_ in reads}
        slot.results = None
        return results

    def _reads(self, slot: Slot) -> list[tuple[str, np.ndarray, int, int, str]]:
        """Each output's staging view, taken once per slot (:meth:`close` drops them)."""
        staging = slot.staging_out
        slot.reads = [(output, *staging[output].read_view(dtype, shape)) for output, dtype, shape in self._outputs]
        return slot.reads

    def _result_copies(self, slot: Slot) -> tuple[Any, list[np.ndarray]]:
        """The arrays the run now enqueued returns, made now, and the table of copies into them
        that its completion host function makes (:class:`HostCopies`)."""
        reads = slot.reads or self._reads(slot)
        copies = slot.copies
        if copies is None:
            copies = slot.copies = HostCopies([view for _, view, *_ in reads])
        table, arrays = copies.fresh()
        slot.results = {output: array for (output, *_), array in zip(reads, arrays, strict=True)}
        return table, arrays

    @cached_property
    def _outputs(self) -> list[tuple[str, DType, tuple[int, ...]]]:
        """(output, dtype, shape) of each graph output: what every run's result copies."""
        values = self.plan.values
        return [(output, values[value].desc.dtype, values[value].desc.shape)
                for output, value in self.plan.outputs.items()]

    def write_inputs(self, slot: Slot, arrays: Mapping[str, np.ndarray]) -> None:
        """Copy the run's inputs into the slot's input staging (host writes, checked as
        :meth:`HostBuffer.numpy` checks them)."""
        # The hot path's first step: the staging views are taken once per slot, as
        # read_outputs' are, so a run costs one host-access check and one copy per input.
        writes = slot.writes or self._writes(slot)
        access = self.device.backend.host_access
        for name, array in arrays.items():
            view, address, nbytes, what = writes[name]
            access(address, nbytes, write=True, what=what)
            view[...] = array

    def _writes(self, slot: Slot) -> dict[str, tuple[np.ndarray, int, int, str]]:
        """Each input's staging view, taken once per slot (:meth:`close` drops them)."""
        values, staging = self.plan.values, slot.staging_in
        slot.writes = {name: staging[name].read_view(values[name].desc.dtype, values[name].desc.shape)
                       for name in staging}
        return slot.writes

    # -- stage boundaries (pipeline/several/stages.py) ---------------------------------------------------
    def push_output(self, slot: Slot, output: str, address: int, sent: Event) -> None:
        """Send ``output`` to another device instead of the host: the slot's copy of it becomes a
        device-to-device copy to ``address`` (a peer's memory, over the link this device enabled),
        followed by a record of ``sent``.  Call before :meth:`capture`."""
        step = self._copy_step(slot, "D2H", "output", output)
        assert step.copy is not None and step.record is None  # nothing on this device waits for a D2H
        _, source, nbytes, _ = step.copy
        step.copy = (address, source, nbytes, MemcpyKind.DEVICE_TO_DEVICE)
        step.record = sent.handle
        self._steps_changed(slot)

    def pull_input(self, slot: Slot, name: str, received: Event) -> None:
        """Take input ``name`` from another device instead of the host: the slot's copy of it
        becomes a wait for ``received`` (recorded after the sender's copy into this slot)."""
        step = self._copy_step(slot, "H2D", "input", name)
        assert step.copy is not None
        target, source, _, kind = step.copy
        step.copy = (target, source, 0, kind)  # no bytes from the host
        step.waits = (received.handle, *step.waits)
        self._steps_changed(slot)

    def _steps_changed(self, slot: Slot) -> None:
        if slot.graph is not None:
            raise RuntimeError("a captured slot cannot change its steps: rewire stages before capture")
        if slot.body is not None:
            self._build_tables(slot)

    @staticmethod
    def _copy_step(slot: Slot, op: str, attr: str, name: str) -> Step:
        for step in slot.steps:
            if step.node.op == op and step.node.attrs[attr] == name:
                return step
        raise KeyError(f"the program has no {op} copy of {name!r}")

    def close(self) -> None:
        """Free everything; the caller has synchronized the streams."""
        slots = list(self.slots) + ([self._building] if self._building is not None else [])
        for slot in slots:
            if slot.graph is not None:
                slot.graph.close()
                slot.graph = None
            for table in (slot.body, slot.tail):
                if table is not None:
                    table.close()
            slot.body = slot.tail = None
            for segment in slot.segments or ():
                if isinstance(segment, LaunchTable):
                    segment.close()
            slot.segments = None
            if slot.around is not None:
                slot.around.close()
                slot.around = None
            for step in slot.steps:
                if step.region is not None:
                    step.region.close()
                    step.region = None
            for executor in slot.executors:
                executor.destroy()
            slot.executors.clear()
            # Views of the staging buffers closed below; the caller synchronized the streams,
            # so no completion host function copies out of them any more.
            slot.reads = slot.copies = slot.results = slot.writes = None
            for buffer in [*slot.staging_in.values(), *slot.staging_out.values()]:
                buffer.close()
            if slot.arena is not None:
                slot.arena.close()
            for event in [*slot.events.values(), *(event for _, event in slot.tails)]:
                event.close()
            for extra in {id(event): event for event in (slot.done, slot.fork, slot.joined) if event}.values():
                extra.close()
            if slot.pinned is not None and self._slots_pinned_by is not None:
                self._slots_pinned_by.unpin((self, slot.index), passed=True)
            slot.pinned = None
        self.slots.clear()
        self._building = None
        for body in self.loop_bodies.values():
            body.close()
        self.loop_bodies.clear()
        if self._streams_held is not None:  # the models are destroyed: their streams are free
            budget, count = self._streams_held
            self._streams_held = None
            budget.release(count)
        if self._pinned_by is not None:
            # The caller synchronized the streams, or every run of this program completed (its
            # completion host function ran after all of its launches): the blocks are free now.
            self._pinned_by.unpin(self, passed=True)
            self._pinned_by = None
