"""Running a ``Loop`` node (:class:`~aclpipe.graph.region.LoopRegion`) as control flow.

A program holding a ``Loop`` node prepares its body once (:class:`LoopBody`: bound and planned
for one stream, its constants uploaded), and per slot a :class:`LoopRunner` that runs it:

- Two *arenas* per runner, each with the body's executors bound to its addresses (phase one
  once per arena).  Iteration ``i`` runs in arena ``i % 2`` and leaves its carried values in
  the other arena's carried inputs: the node computing each one writes it there directly
  (a copy only for carried values that are views, inputs or constants).  The ping-pong keeps
  an iteration's results from overwriting inputs the planner let them share bytes with; the
  other arena is free, since its iteration is over (everything of the loop runs in one
  stream's order) and its inputs share bytes only with values written after their last read.
  Invariants (outer values the body reads) are bound where the enclosing program keeps them.
- Where the device captures (``aclmdlRICapture*``, from the slot's replay lane), one iteration
  per arena is captured as a model, and :data:`GROUP` iterations from each arena as another:
  an iteration, or a group of them, is then one ``aclmdlRIExecuteAsync`` on the node's stream.
  Otherwise each iteration is one launch table.  Scan slices are copied in before an
  iteration and its scan values out after it (per-iteration tables: their addresses differ).
  A body holding a loop is not captured; the nested loop runs host-driven inside it.
- An exit computed on the device is read back as one byte (a copy to pinned memory, then a
  host function advancing the pipeline's timeline, awaited; without a timeline, an event
  synchronized in a worker thread) once per *block* of iterations.  The body keeps its
  carried values once its running flag turns false (see :mod:`aclpipe.graph.region`), so
  iterations past the exit change nothing; block sizes double from 1 up to :data:`MAX_BLOCK`,
  so a loop that ends early runs at most as many spare iterations as it ran, and a long one
  pays one read back per ``MAX_BLOCK`` iterations.  The next block is enqueued before the
  previous one's flag is awaited, so the device is not idle while the host reads it.

- Where the device also has conditional tasks in captured models
  (:class:`~aclpipe.backends.protocol.ConditionalModels`: ``aclmdlRIAddCondTask`` with a
  WHILE sub-model, A2 and A3), a loop whose exit is computed on the device and that has no
  scans is captured *once, whole*, and replayed as one task per run: nothing is read back.
  The parent model copies the node's inputs into arena 0 (and runs one iteration there when
  the trip count is odd), sets the *remaining* counter (body runs left: ``trips // 2``) and
  the WHILE condition (``running * remaining``, an int64 at the handle's address), then holds
  the WHILE task, then copies the carried values out.  The body sub-model runs two
  iterations (one per arena, so each body run starts in the same arena), counts one run
  off the counter and writes the condition again: the loop stops once the flag turns false
  or the trip count is spent.  The second iteration of a run after the exit changes
  nothing (the body keeps its values once the flag is false).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import numpy as np

from ..backends.protocol import CondTaskType, LaunchKind, LaunchRecord, MemcpyKind, conditional_models
from ..dtypes import DType
from ..errors import BackendError, GraphError
from ..plan import Plan, make_plan
from ..runtime.capture import Capture, CapturedRun
from ..runtime.executor import Executor
from ..runtime.launches import LaunchTable
from ..tensor import TensorDesc, contiguous_strides

if TYPE_CHECKING:
    from ..graph.region import LoopRegion
    from ..runtime import Device, DeviceBuffer, HostBuffer, Stream
    from ..runtime.completion.timeline import Timeline

__all__ = ["MAX_BLOCK", "LoopBody", "LoopRunner", "region_models"]

#: The most iterations enqueued between two reads of a device-computed exit condition.
MAX_BLOCK = 64
#: Iterations captured in one model besides the single iteration (a replay costs the runtime
#: more than a task: aclmdlRIExecuteAsync's own work, once per group instead of per iteration).
GROUP = 16

_KERNEL, _COPY = LaunchKind.KERNEL, LaunchKind.COPY
_NOT_SUPPORTED = 207000  # ACL_ERROR_RT_FEATURE_NOT_SUPPORT
_D2D, _D2H = MemcpyKind.DEVICE_TO_DEVICE, MemcpyKind.DEVICE_TO_HOST



def region_models(region: LoopRegion) -> int:
    """The models a captured loop of ``region`` makes, from the region alone (what
    :attr:`LoopRunner.models` gives once prepared; ``aclpipe plan`` counts with it): one
    iteration per arena, and :data:`GROUP` iterations per arena where the loop has at least
    that many trips and no scans; a body holding loops runs host-driven, its loops captured."""
    nested = [node.attrs["region"] for node in region.body.nodes if node.op == "Loop"]
    if nested:
        return sum(region_models(inner) for inner in nested)
    groups = region.trips >= GROUP and not region.scan_inputs and not region.scan_outputs
    return 4 if groups else 2

class LoopBody:
    """A region's body, planned for one stream and with its constants on ``device``: what every
    slot's runner of one program shares."""

    def __init__(self, device: Device, region: LoopRegion, name: str):
        self.device, self.region, self.name = device, region, name
        body = region.body
        bound = body.bind(**{name: spec.shape for name, spec in body.inputs.items()})
        self.plan: Plan = make_plan(bound, streams=1)
        self.constants: dict[str, DeviceBuffer] = {}
        self.nested: dict[str, LoopBody] = {}
        try:
            for constant, array in self.plan.constants.items():
                self.constants[constant] = device.upload(np.asarray(array), label=f"{name} constant {constant}")
        except BaseException:
            self.close()
            raise

    def nested_body(self, node: str, region: LoopRegion) -> LoopBody:
        """The body of a ``Loop`` node inside this one (prepared once)."""
        found = self.nested.get(node)
        if found is None:
            found = self.nested[node] = LoopBody(self.device, region, node)
        return found

    def close(self) -> None:
        for body in self.nested.values():
            body.close()
        self.nested.clear()
        for buffer in self.constants.values():
            buffer.close()
        self.constants.clear()


class _Arena:
    """One arena of a runner: its memory, executors and what each iteration in it enqueues."""

    def __init__(self, buffer: DeviceBuffer | None):
        self.buffer = buffer
        self.executors: list[Executor] = []
        #: launch tables and nested loops, in order; the last table ends with the carry copies
        self.segments: list[LaunchTable | LoopRunner] = []
        self.read_condition: list[LaunchTable] = []  # the running flag to each flag buffer
        self.model: CapturedRun | None = None  # one iteration captured (segments' launches and carry copies)
        self.group: CapturedRun | None = None  # GROUP iterations captured, the first in this arena
        self.finish: LaunchTable | None = None  # carried values from this arena's inputs to the node's outputs


class LoopRunner:
    """One ``Loop`` node of one slot, bound to where the enclosing program keeps its inputs and
    outputs (see the module docs).

    Parameters
    ----------
    body:
        The prepared body.
    inputs, outputs:
        The node's input and output descriptors at their addresses in the slot.
    stream:
        The stream the node runs on.
    lane:
        That stream's lane in the pipeline's timeline.
    """

    def __init__(self, body: LoopBody, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                 stream: Stream, lane: int):
        self.body, self.region, self.device = body, body.region, body.device
        self.stream, self.lane = stream, lane
        self.inputs = [_contiguous(body.name, "input", desc) for desc in inputs]
        self.outputs = [_contiguous(body.name, "output", desc) for desc in outputs]
        self.arenas: list[_Arena] = []
        self.workspace: DeviceBuffer | None = None
        self.flags: list[HostBuffer] = []
        self.start: LaunchTable | None = None
        self.scan_in_tables: list[LaunchTable] = []  # per iteration: its slices of the scan inputs
        self.scan_tables: list[LaunchTable] = []  # per iteration: its scan values to the stacked outputs
        self._scan_executors: list[tuple[list[Executor], list[Executor]]] = []
        #: invariant body input -> its index among the invariants
        self._invariants = {name: index for index, name in enumerate(self.region.invariant_inputs)}
        self._written_ahead = self._carried_in_place()
        self._context = {"node": body.name, "op": "Loop"}
        self.whole: _WholeLoop | None = None  # the loop captured with a WHILE task (see the module docs)
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    # -- building --------------------------------------------------------------------------------
    def _build(self) -> None:
        plan, device = self.body.plan, self.device
        for parity in range(2):
            buffer = device.alloc(max(plan.arena_size, 1), label=f"{self.body.name} arena {parity}")
            self.arenas.append(_Arena(buffer))
        sizes = [self._prepare(arena) for arena in self.arenas]
        if max(sizes):
            self.workspace = device.alloc(max(sizes), label=f"{self.body.name} workspace")
        if self.region.condition is not None:
            self.flags = [device.alloc_host(1, label=f"{self.body.name} condition {k}") for k in range(2)]
        self._build_tables()

    def _address(self, arena: _Arena, value: str) -> int:
        """Where ``value``'s storage is when the body runs in ``arena``."""
        placement = self.body.plan.values[value]
        storage = placement.base or value
        redirected = self._written_ahead.get(storage)
        if redirected is not None:  # written straight into the other arena's carried input
            return self._address(self.arenas[1 - self.arenas.index(arena)], redirected)
        stored = self.body.plan.values[storage]
        if stored.kind == "constant":
            return self.body.constants[storage].address
        invariant = self._invariants.get(storage)
        if invariant is not None:
            return self.inputs[len(self.region.carried_inputs) + invariant].data_address
        assert arena.buffer is not None and stored.arena_offset is not None
        return arena.buffer.address + stored.arena_offset

    def _carried_in_place(self) -> dict[str, str]:
        """Carried output value -> the carried input it becomes, for every one its node may
        write straight into the other arena's input (no copy after each iteration).  Safe: the
        other arena's last iteration is over (one stream), and its inputs share bytes only with
        values written after their last read there.  Views, inputs and constants are copied."""
        plan, ahead = self.body.plan, {}
        for name_in, name_out in zip(self.region.carried_inputs, self.region.carried_outputs):
            value = plan.values[plan.outputs[name_out]]
            if value.kind in ("activation", "output") and value.base is None and value.writer is not None:
                ahead[value.name] = name_in
        return ahead

    def _desc(self, arena: _Arena, value: str | None) -> TensorDesc | None:
        if value is None:
            return None
        return self.body.plan.values[value].desc.at(self._address(arena, value))

    def _prepare(self, arena: _Arena) -> int:
        """Phase one for every body node in ``arena``; returns the largest workspace."""
        backend, largest = self.device.backend, 0
        for node in self.body.plan.nodes:
            if node.op in ("H2D", "D2H", "Loop"):
                continue
            inputs = tuple(self._desc(arena, value) for value in node.inputs)
            outputs = tuple(self._desc(arena, value) for value in node.outputs)
            executor = Executor.prepare(backend, node.op, inputs, outputs, node.attrs, node=node.name,
                                        repeatable=True)
            arena.executors.append(executor)
            if not executor.repeatable:
                raise GraphError(f"node {node.name!r} ({node.op}) in the body of Loop {self.body.name!r} refuses "
                                 "repeatable executors, which a loop body replays each iteration")
            largest = max(largest, executor.workspace_size)
        return largest

    def _build_tables(self) -> None:
        """Every launch table, for the stream the node runs on now."""
        for table in self._tables():
            table.close()
        self._close_nested()
        self.scan_in_tables, self.scan_tables = [], []
        stream = self.stream.handle
        self.start = LaunchTable(self.device.backend, self._carry(None, self.arenas[0], stream))
        for parity, arena in enumerate(self.arenas):
            arena.segments = self._iteration_segments(arena, self.arenas[1 - parity], stream)
            arena.finish = LaunchTable(self.device.backend, self._finish(arena, stream))
            if self.region.condition is not None:
                source = self._desc(arena, self.body.plan.outputs[self.region.condition])
                assert source is not None
                # One per flag buffer: a block's read may still be in flight while the next is enqueued.
                arena.read_condition = [LaunchTable(self.device.backend, [
                    _copy(stream, flag.address, source.data_address, 1, self._context, _D2H)]) for flag in self.flags]
        self._build_scan_tables(stream)

    def _iteration_segments(self, arena: _Arena, other: _Arena, stream: Any) -> list[LaunchTable | LoopRunner]:
        """One iteration in ``arena`` on ``stream``: the body, then the carry copies to ``other``."""
        segments = self._segments(arena, stream)
        last = segments[-1] if segments and isinstance(segments[-1], LaunchTable) else None
        carry = self._carry(arena, other, stream)
        if last is not None:
            segments[-1] = LaunchTable(self.device.backend, [*last.records, *carry])
            last.close()
        else:
            segments.append(LaunchTable(self.device.backend, carry))
        return segments

    def _segments(self, arena: _Arena, stream: Any) -> list[LaunchTable | LoopRunner]:
        """The body's launches in plan order, cut around nested loops."""
        segments: list[LaunchTable | LoopRunner] = []
        records: list[LaunchRecord] = []
        executors = iter(arena.executors)
        workspace = self.workspace.address if self.workspace is not None else 0
        for node in self.body.plan.nodes:
            if node.op in ("H2D", "D2H"):
                continue
            if node.op == "Loop":
                if records:
                    segments.append(LaunchTable(self.device.backend, records))
                    records = []
                nested = self.body.nested_body(node.name, node.attrs["region"])
                segments.append(LoopRunner(nested, [self._desc(arena, v) for v in node.inputs],
                                           [self._desc(arena, v) for v in node.outputs], self.stream, self.lane))
                continue
            records.append(_kernel(stream, next(executors), workspace, {"node": node.name, "op": node.op}))
        if records:
            segments.append(LaunchTable(self.device.backend, records))
        return segments

    def _carry(self, source: _Arena | None, target: _Arena, stream: Any) -> list[LaunchRecord]:
        """Copies of the carried values into ``target``'s carried inputs: from ``source``'s
        carried outputs, or (None) from the node's inputs."""
        records = []
        for index, (name_in, name_out) in enumerate(zip(self.region.carried_inputs, self.region.carried_outputs)):
            if source is not None and self.body.plan.outputs[name_out] in self._written_ahead:
                continue
            dst = self._desc(target, name_in)
            src = self.inputs[index] if source is None else self._desc(source, self.body.plan.outputs[name_out])
            assert dst is not None and src is not None
            records.append(_copy(stream, dst.data_address, src.data_address, dst.nbytes, self._context))
        return records

    def _finish(self, arena: _Arena, stream: Any) -> list[LaunchRecord]:
        """The carried values, as the last iteration left them in ``arena``'s inputs, to the node's outputs."""
        records = []
        for index, name in enumerate(self.region.carried_inputs):
            src = self._desc(arena, name)
            assert src is not None
            records.append(_copy(stream, self.outputs[index].data_address, src.data_address, src.nbytes,
                                 self._context))
        return records

    def _build_scan_tables(self, stream: Any) -> None:
        """Per iteration, the copies of its slice of each scan input into the body's input (before
        it), and of its scan values into their slice of the stacked outputs (after it): an
        ``InplaceCopy`` each, since a slice may be strided, and need not be 64-byte aligned as
        device-to-device copies must."""
        region = self.region
        if not region.scan_inputs and not region.scan_outputs:
            return
        if not self._scan_executors:
            self._scan_executors = [self._scan_copies(iteration) for iteration in range(region.trips)]
        backend = self.device.backend
        for before, after in self._scan_executors:
            self.scan_in_tables.append(LaunchTable(backend, [self._kernel(stream, ex) for ex in before]))
            self.scan_tables.append(LaunchTable(backend, [self._kernel(stream, ex) for ex in after]))

    def _scan_copies(self, iteration: int) -> tuple[list[Executor], list[Executor]]:
        region, arena, backend = self.region, self.arenas[iteration % 2], self.device.backend
        first_sequence = len(region.carried_inputs) + len(region.invariant_inputs)
        before, after = [], []
        for index, (name, axis, reverse) in enumerate(zip(region.scan_inputs, region.scan_input_axes,
                                                           region.scan_input_reverse)):
            step = region.trips - 1 - iteration if reverse else iteration
            source = _slice(self.inputs[first_sequence + index], axis, step)
            target = self._desc(arena, name)
            before.append(Executor.prepare(backend, "InplaceCopy", (source,), (target,), {}, node=self.body.name,
                                           repeatable=True))
        for index, name in enumerate(region.scan_outputs):
            produced = self._desc(arena, self.body.plan.outputs[name])
            stacked = _slice(self.outputs[len(region.carried_inputs) + index], 0, iteration)
            after.append(Executor.prepare(backend, "InplaceCopy", (produced,), (stacked,), {}, node=self.body.name,
                                          repeatable=True))
        return before, after

    def _kernel(self, stream: Any, executor: Executor) -> LaunchRecord:
        return _kernel(stream, executor, 0, self._context)

    # -- capture ---------------------------------------------------------------------------------
    @property
    def capturable(self) -> bool:
        """Whether an iteration can be captured: its body holds no loop (a nested loop reads its
        exit back on the host, between its own iterations)."""
        return all(len(arena.segments) == 1 and isinstance(arena.segments[0], LaunchTable) for arena in self.arenas)

    @property
    def can_capture_whole(self) -> bool:
        """Whether :meth:`capture` makes the whole loop one model with a WHILE task: the
        device has conditional tasks, the exit is computed on it, no scans, nothing nested."""
        return (conditional_models(self.device.backend) is not None and self.region.condition is not None
                and self.capturable and not self.scan_in_tables and not self.scan_tables)

    @property
    def readbacks(self) -> bool:
        """Whether a run reads the exit condition back on the host (False: a WHILE task decides)."""
        return self.region.condition is not None and self.whole is None

    @property
    def models(self) -> int:
        """The models :meth:`capture` makes (each holds one stream): one iteration per arena,
        and, without scans and for at least :data:`GROUP` trips, :data:`GROUP` iterations from
        each arena; for a body holding loops, theirs."""
        if not self.capturable:
            return sum(nested.models for nested in self._nested())
        if self.can_capture_whole:
            return 2  # the loop and its WHILE body
        return 4 if self._groups else 2

    @property
    def executor_count(self) -> int:
        """Executors prepared for this loop: the body's per arena, the scan copies', nested loops'."""
        scans = sum(len(before) + len(after) for before, after in self._scan_executors)
        return (sum(len(arena.executors) for arena in self.arenas) + scans
                + sum(nested.executor_count for nested in self._nested()))

    def _nested(self) -> list[LoopRunner]:
        return [segment for arena in self.arenas for segment in arena.segments if isinstance(segment, LoopRunner)]

    @property
    def _groups(self) -> bool:
        return self.region.trips >= GROUP and not self.scan_tables and not self.scan_in_tables

    def capture(self, origin: Stream) -> bool:
        """Capture one iteration per arena as a model (``aclmdlRICapture*`` from ``origin``, a
        stream nothing else enqueues on meanwhile), and :data:`GROUP` iterations where they fit
        (:attr:`models`); an iteration (or a group) is then one replay on the node's stream.
        A body holding loops runs host-driven, its loops captured instead; False when nothing
        was captured."""
        if not self.capturable:
            captured = [nested.capture(origin) for nested in self._nested()]  # every one, not the first
            return any(captured)
        if self.can_capture_whole:
            try:
                self.whole = _WholeLoop(self, origin)
                return True
            except BackendError as error:
                # A trial feature: the product's firmware may still refuse it (207000 from
                # CheckCaptureModelSupportCondOp); then the exit is read back as elsewhere.
                if error.code != _NOT_SUPPORTED:
                    raise
        for parity, arena in enumerate(self.arenas):
            arena.model = self._capture(origin, [parity])
            if self._groups:
                arena.group = self._capture(origin, [(parity + k) % 2 for k in range(GROUP)])
        return True

    def _capture(self, origin: Stream, parities: Sequence[int]) -> CapturedRun | None:
        """A model of iterations in these arenas, one after another."""
        segments = [segment for parity in parities
                     for segment in self._iteration_segments(self.arenas[parity], self.arenas[1 - parity],
                                                             origin.handle)]
        try:
            with Capture(origin) as capture:
                for segment in segments:
                    assert isinstance(segment, LaunchTable)
                    segment.enqueue(None)
        finally:
            for segment in segments:
                if isinstance(segment, LaunchTable):
                    segment.close()
        return capture.run

    def uncapture(self) -> None:
        """Destroy the captured models (iterations run from launch tables again)."""
        if self.whole is not None:
            self.whole.close()
            self.whole = None
        for arena in self.arenas:
            for model in (arena.model, arena.group):
                if model is not None:
                    model.close()
            arena.model = arena.group = None
        for nested in self._nested():
            nested.uncapture()

    @property
    def captured(self) -> bool:
        """Whether some iteration, of this loop or a nested one, replays a captured model."""
        return (self.whole is not None or any(arena.model is not None for arena in self.arenas)
                or any(n.captured for n in self._nested()))

    # -- running ---------------------------------------------------------------------------------
    async def run(self, run: int | None, timeline: Timeline | None) -> None:
        """Enqueue the whole loop on the node's stream, reading the exit condition back when the
        device computes it (awaiting it, so other tasks run meanwhile)."""
        if self.whole is not None and self.whole.run is not None:
            self.whole.run.replay(self.stream, None if run is None else {"run": run})
            return
        assert self.start is not None
        self.start.enqueue(run)
        trips, done, block = self.region.trips, 0, 1
        pending: tuple[int, Any] | None = None  # the previous block's condition read back
        blocks = 0
        while done < trips:
            end = done + min(block, trips - done)
            while done < end:
                group = self.arenas[done % 2].group
                if group is not None and end - done >= GROUP:
                    group.replay(self.stream, None if run is None else {"run": run})
                    done += GROUP
                else:
                    await self._iteration(done, run, timeline)
                    done += 1
            if self.region.condition is None or done >= trips:
                continue
            read = self._read_condition(done - 1, blocks % 2, timeline)
            blocks += 1
            if pending is not None and not await self._flag(pending, timeline):
                break  # the exit came in the previous block: this one ran frozen
            pending = read
            block = min(block * 2, MAX_BLOCK)
        finish = self.arenas[done % 2].finish
        assert finish is not None
        finish.enqueue(run)

    async def _iteration(self, iteration: int, run: int | None, timeline: Timeline | None) -> None:
        arena = self.arenas[iteration % 2]
        if self.scan_in_tables:
            self.scan_in_tables[iteration].enqueue(run)
        if arena.model is not None:
            # The run only: each captured task keeps its own node and op, for errors.
            arena.model.replay(self.stream, None if run is None else {"run": run})
            if self.scan_tables:
                self.scan_tables[iteration].enqueue(run)
            return
        for segment in arena.segments:
            if isinstance(segment, LaunchTable):
                segment.enqueue(run)
            else:
                await segment.run(run, timeline)
        if self.scan_tables:
            self.scan_tables[iteration].enqueue(run)

    def _read_condition(self, iteration: int, flag: int, timeline: Timeline | None) -> tuple[int, Any]:
        """Enqueue the copy of the running flag after ``iteration`` to flag buffer ``flag``, and
        something to await it by."""
        self.arenas[iteration % 2].read_condition[flag].enqueue(None)
        if timeline is not None:
            return flag, timeline.enqueue_advance(self.device.backend, self.stream.handle, self.lane)
        return flag, self.stream.record()

    async def _flag(self, pending: tuple[int, Any], timeline: Timeline | None) -> bool:
        flag, token = pending
        if timeline is not None:
            await timeline.wait(self.lane, token)
        else:
            await anyio.to_thread.run_sync(token.sync)
            token.close()
        view, address, nbytes, what = self.flags[flag].read_view(np.bool_, ())
        self.device.backend.host_access(address, nbytes, write=False, what=what)
        return bool(view)

    # -- lifetime --------------------------------------------------------------------------------
    def rebind(self) -> None:
        """Rebuild the tables for the stream's current handle (after :meth:`Stream.renew`)."""
        self._build_tables()

    def _tables(self) -> list[LaunchTable]:
        tables = [*self.scan_in_tables, *self.scan_tables]
        if self.start is not None:
            tables.append(self.start)
        for arena in self.arenas:
            tables.extend(segment for segment in arena.segments if isinstance(segment, LaunchTable))
            tables.extend(arena.read_condition)
            if arena.finish is not None:
                tables.append(arena.finish)
        return tables

    def _close_nested(self) -> None:
        for arena in self.arenas:
            for segment in arena.segments:
                if isinstance(segment, LoopRunner):
                    segment.close()
            arena.segments = []

    def close(self) -> None:
        """Free everything; the caller has synchronized the stream."""
        self.uncapture()
        for table in self._tables():
            table.close()
        self._close_nested()
        self.scan_in_tables, self.scan_tables = [], []
        for arena in self.arenas:
            for executor in arena.executors:
                executor.destroy()
            arena.executors.clear()
            if arena.buffer is not None:
                arena.buffer.close()
                arena.buffer = None
        self.arenas.clear()
        for before, after in self._scan_executors:
            for executor in [*before, *after]:
                executor.destroy()
        self._scan_executors.clear()
        for buffer in [*self.flags, *([self.workspace] if self.workspace is not None else [])]:
            buffer.close()
        self.flags, self.workspace = [], None


class _WholeLoop:
    """A loop captured whole, its exit decided on the device by a WHILE task (see the module docs)."""

    def __init__(self, runner: LoopRunner, origin: Stream):
        self.runner = runner
        device, backend = runner.device, conditional_models(runner.device.backend)
        assert backend is not None
        self.backend = backend
        self.executors: list[Executor] = []
        self.buffers: list[DeviceBuffer] = []
        self.workspace: DeviceBuffer | None = None
        self.run: CapturedRun | None = None
        trips, region, name = runner.region.trips, runner.region, runner.body.name
        #: the arena each body run starts (and ends) in: after one iteration outside when trips is odd
        self.first = trips % 2
        try:
            self.initial = device.upload(np.array(trips // 2, np.int64), label=f"{name} body runs")
            self.buffers.append(self.initial)
            self.remaining, self.next, self.flag, self.product = (
                device.alloc(8, label=f"{name} {what}")
                for what in ("runs left", "runs left next", "flag as int64", "condition"))
            self.buffers += [self.remaining, self.next, self.flag, self.product]
            running = region.carried_inputs[region.carried_outputs.index(region.condition or "")]
            flag = runner._desc(runner.arenas[self.first], running)
            assert flag is not None
            int64 = self._scalar
            # condition = int64(running flag) * runs left; runs left -= 1 once per body run
            self._cast = self._prepare("Cast", [flag], int64(self.flag), {"dtype": DType.int64})
            self._mul = self._prepare("Mul", [int64(self.flag), int64(self.remaining)], int64(self.product), {})
            self._adds = self._prepare("Adds", [int64(self.remaining)], int64(self.next), {"other": -1})
            largest = max(executor.workspace_size for executor in self.executors)
            if largest:  # one stream runs them one after another: one workspace serves them all
                self.workspace = device.alloc(largest, label=f"{name} condition workspace")
                self.buffers.append(self.workspace)
            self.run = self._capture(origin)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _scalar(buffer: DeviceBuffer) -> TensorDesc:
        return TensorDesc((), DType.int64).at(buffer.address)

    def _prepare(self, op: str, inputs: Sequence[TensorDesc], output: TensorDesc, attrs: Mapping[str, Any]) -> Executor:
        executor = Executor.prepare(self.runner.device.backend, op, tuple(inputs), (output,), attrs,
                                    node=self.runner.body.name, repeatable=True)
        self.executors.append(executor)
        return executor

    def _kernel(self, stream: Any, executor: Executor) -> LaunchRecord:
        return _kernel(stream, executor, self.workspace.address if self.workspace is not None else 0,
                       self.runner._context)

    def _condition(self, stream: Any, condition: int) -> list[LaunchRecord]:
        """The WHILE condition from the running flag in the first arena: ``flag * runs left``."""
        return [self._kernel(stream, self._cast), self._kernel(stream, self._mul),
                _copy(stream, condition, self.product.address, 8, self.runner._context)]

    def _count(self, stream: Any) -> list[LaunchRecord]:
        """One body run off the counter."""
        return [self._kernel(stream, self._adds),
                _copy(stream, self.remaining.address, self.next.address, 8, self.runner._context)]

    def _capture(self, origin: Stream) -> CapturedRun | None:
        runner, backend = self.runner, self.backend
        arenas, first = runner.arenas, self.first
        stream = origin.handle
        body_stream = backend.stream_create()
        tables: list[LaunchTable] = []

        def enqueue(records: list[LaunchRecord]) -> None:
            table = LaunchTable(backend, records)
            tables.append(table)
            table.enqueue(None)

        def iteration(parity: int, on: Any) -> list[LaunchRecord]:
            segments = runner._iteration_segments(arenas[parity], arenas[1 - parity], on)
            records = [record for segment in segments if isinstance(segment, LaunchTable) for record in segment.records]
            for segment in segments:
                if isinstance(segment, LaunchTable):
                    segment.close()
            return records

        try:
            with Capture(origin) as capture:
                _, parent = backend.capture_get_info(stream)
                handle = backend.cond_handle_create(parent, 0, False)
                condition = backend.cond_handle_get_cond_ptr(handle)
                start = runner._carry(None, arenas[0], stream)
                if first:
                    start += iteration(0, stream)
                start.append(_copy(stream, self.remaining.address, self.initial.address, 8, runner._context))
                enqueue(start + self._condition(stream, condition))
                (body,) = backend.add_cond_task(handle, CondTaskType.WHILE, 1, stream)
                backend.capture_to_model_begin(body_stream, body)
                try:
                    enqueue(iteration(first, body_stream) + iteration(1 - first, body_stream)
                            + self._count(body_stream) + self._condition(body_stream, condition))
                finally:
                    backend.capture_end(body_stream)
                enqueue(runner._finish(arenas[first], stream))
        finally:
            for table in tables:
                table.close()
            backend.stream_destroy(body_stream)
        return capture.run

    def close(self) -> None:
        if self.run is not None:
            self.run.close()
            self.run = None
        for executor in self.executors:
            executor.destroy()
        self.executors.clear()
        for buffer in self.buffers:
            buffer.close()
        self.buffers.clear()


def _copy(stream: Any, dst: int, src: int, nbytes: int, context: Mapping[str, Any],
          kind: MemcpyKind = _D2D) -> LaunchRecord:
    return LaunchRecord(_COPY, stream, None, None, 0, 0, dst, src, nbytes, kind, context)


def _kernel(stream: Any, executor: Executor, workspace: int, context: Mapping[str, Any]) -> LaunchRecord:
    """A launch of ``executor``, given the shared ``workspace`` address where it asks for one."""
    size = executor.workspace_size
    return LaunchRecord(_KERNEL, stream, None, executor.handle, workspace if size else 0, size, 0, 0, 0, _D2D,
                        context)


def _slice(stacked: TensorDesc, axis: int, index: int) -> TensorDesc:
    """Slice ``index`` of ``stacked`` (contiguous) along ``axis``, that axis dropped: a strided view."""
    strides = contiguous_strides(stacked.shape)
    shape = stacked.shape[:axis] + stacked.shape[axis + 1:]
    return TensorDesc(shape, stacked.dtype, strides[:axis] + strides[axis + 1:], stacked.offset + index * strides[axis],
                      stacked.format, stacked.address)


def _contiguous(node: str, what: str, desc: TensorDesc | None) -> TensorDesc:
    if desc is None or not desc.is_contiguous:
        raise GraphError(f"Loop {node!r}: each {what} must be a contiguous tensor (the loop copies it whole), got "
                         f"{desc!r}; make it contiguous before the loop")
    return desc
