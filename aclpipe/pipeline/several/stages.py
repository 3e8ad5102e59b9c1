"""Stages: one graph cut across several devices (pipeline parallelism).

``Pipeline(graph, device=["sim:0", "sim:1"], split="stages")`` makes a :class:`StagePipeline`.
Per input signature the planner cuts the graph into one contiguous stage per device,
balancing modelled cost and fitting each device's memory (:mod:`aclpipe.plan.partition`);
each device holds only its stages' weights, so a model too big for one device runs on
several.  Values cross from stage to stage as device-to-device copies over the peer link,
ordered by events recorded on the sending device and waited on by the receiving one
(:mod:`.stage_program`); peer access is enabled from every device to the later ones when
the pipeline opens.

The engine is the single-device one's: per device its streams, completion
:class:`~aclpipe.runtime.completion.timeline.Timeline`, workspaces and
:class:`~aclpipe.pipeline.program.Program` s; one :class:`~aclpipe.pipeline.faults.FaultLog`
over all of them (run numbers are shared).  A run takes a slot on
every stage at once, enqueues the stages in order and completes once every stage has.  With
``depth`` runs in flight (default: twice the stages, so that a run's boundary copies and its
completion overlap the next runs' compute) ``stream()`` keeps every stage busy: while
stage 1 runs batch i, stage 0 runs batch i+1.

Faults, cancellation, closing and threads follow :class:`Pipeline`: a node that fails on any
stage makes its run (and the runs in its fault window) raise :class:`ExecutionError` naming
the node; the stages after it inherit the failure through the boundary events instead of
computing on garbage; later runs run normally.  ``aclose()`` is cancellable and a pipeline
dropped without it frees its devices' memory once they passed it
(:mod:`.stage_resources`); the async API serves one event loop at a time
(:mod:`~aclpipe.pipeline.affinity`), the blocking one any number of threads
(:mod:`~aclpipe.pipeline.sync`).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import numpy as np

from ...errors import AclpipeError, BackendError, ClosedResourceError, PlanError
from ...graph import Graph, Signature
from ...plan import Plan, make_plan
from ...plan.partition import Partition
from ...runtime import Device, DeviceBuffer, Stream
from ...runtime.completion.timeline import Timeline
from ...runtime.workspaces import STRATEGIES, WorkspaceStrategy, make_workspace_strategy, pipeline_options
from ..affinity import LoopAffinity
from ..batches import ShapeBuckets
from ..budget import close_streams, make_streams
from ..cache import CacheEntry, LruDict, ProgramCache, check_capacity
from ..engine import POOL_BATCH, Accepted, Admitted, close_once, settle_or_park, stream_in_order
from ..faults import FaultLog
from ..pipeline import Pipeline
from ..prepare import with_room
from ..slots import FifoLock
from ..stats import PipelineStats
from .devices import open_devices, sum_counters
from .stage_program import StageProgram, StageSlot
from .stage_resources import StageResources

__all__ = ["StagePipeline", "StageStats"]


@dataclass(frozen=True)
class StageStats(PipelineStats):
    """:class:`PipelineStats` over every stage's device, plus ``stages``: per stage of the
    latest prepared signature its device, nodes, modelled cost (µs), constant bytes and the
    bytes it sends to later stages per run."""

    stages: tuple[Mapping[str, Any], ...] = field(default=())


_Entry = CacheEntry[StageProgram, StageSlot]


@dataclass(eq=False)
class _Ticket:
    run: int
    entry: _Entry
    slot: StageSlot
    rows: int | None = None  # the real row count of a batch padded to a bucket
    values: list[int] = field(default_factory=list)  # per stage: the D2H lane value of its completion

    @property
    def program(self) -> StageProgram:
        return self.entry.program


class StagePipeline(Pipeline, split="stages"):
    """The graph cut into one stage per device; see the module docstring.

    Parameters are :class:`Pipeline`'s; ``depth`` defaults to twice the number of devices,
    and ``memory_fraction`` is the share of each device's free memory the cut may plan for.

    It implements the :class:`~aclpipe.pipeline.engine.Engine` steps over stage programs and
    stage tickets; they replace the single-device ones it inherits with the rest of the API.
    """

    def __init__(self, graph: Graph, device: str | Sequence[Device | str] | None = None, *, streams: int = 4,
                 depth: int | None = None, workspace: str = "pool", pool_bytes: int = 0,
                 cancel_grace: float = 30.0, max_programs: int = 16, buckets: Sequence[int] | None = None,
                 split: str | None = "stages", device_options: Mapping[str, Any] | None = None,
                 memory_fraction: float = 0.9):
        if device is None:
            raise ValueError("name the devices, e.g. device=['sim:0', 'sim:1'] or 'ascend:0-3'")
        _check_options(graph, split, streams, depth, workspace, memory_fraction)
        self.buckets = ShapeBuckets(graph, buckets) if buckets is not None else None
        self._cache: ProgramCache[StageProgram, StageSlot] = ProgramCache(check_capacity(max_programs))
        devices, self._opened = open_devices(device, device_options)
        try:
            _enable_peers(devices)
        except BaseException:
            for made in self._opened:
                made.close()
            raise
        self.graph, self.devices, self.device = graph, devices, devices[0]
        self.max_streams, self.depth, self.workspace = streams, depth or 2 * len(devices), workspace
        self.cancel_grace, self.memory_fraction = cancel_grace, memory_fraction
        # A padded batch larger than every device can never run (inputs go to the stage reading them).
        self._largest_memory = max(d.mem_info().total for d in devices)
        # Per device, as a single-device pipeline has: streams, a timeline over them, workspaces.
        self._stage_streams = _make_stage_streams(devices, streams + 2)
        self._timelines = [Timeline(streams + 2) for _ in devices]
        for timeline, per_device in zip(self._timelines, self._stage_streams):
            for lane, stream in enumerate(per_device):
                timeline.assign(stream, lane)
        options = pipeline_options(workspace, pool_bytes, POOL_BATCH)
        self._stage_workspaces: list[WorkspaceStrategy] = [
            make_workspace_strategy(d, workspace, timeline=t, **options) for d, t in zip(devices, self._timelines)]
        self._constants: list[dict[str, DeviceBuffer]] = [{} for _ in devices]
        self._stage_res = StageResources(devices, self._opened, self._stage_streams, self._timelines,
                                         self._stage_workspaces, self._constants, self._cache)
        # Dropped without aclose(): what the devices may still touch is freed once they passed it.
        self._stage_finalizer = weakref.finalize(self, StageResources.park, self._stage_res)
        self._affinity = LoopAffinity(f"pipeline {graph.name!r}")
        self._plans: LruDict[Signature, Plan] = LruDict(64)
        self._enqueue_lock = FifoLock()
        self._faults = FaultLog()
        self._runs = self._prepare_hits = self._lost_slots = self._finishing = 0
        self._closed = False
        self._finished: anyio.Event | None = None
        self._closing: anyio.Event | None = None
        self._latest: StageProgram | None = None

    # -- planning and preparing --------------------------------------------------------------
    def plan_for(self, **inputs: Any) -> Plan:
        """The plan of the whole graph for these input shapes (as :meth:`Pipeline.plan_for` takes
        them), as one device would run it (see :meth:`stages_for` for the cut)."""
        with self._affinity.use("plan_for"):
            return self._plan_for(inputs)

    def _plan_for(self, inputs: Mapping[str, Any]) -> Plan:
        self._check_open()
        key = self.graph.signature(**inputs)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = make_plan(self.graph.bind(**key.bind_arguments()), streams=self.max_streams)
        return plan

    def stages_for(self, **inputs: Any) -> tuple[Partition, tuple[Plan, ...]]:
        """The cut for these input shapes and each stage's plan (prepares them)."""
        with self._affinity.use("stages_for"):
            program = self._stage_entry_for(self.graph.signature(**inputs)).program
            return program.partition, program.plans

    def prepare(self, **inputs: Any) -> Plan:
        """Cut, plan and prepare every stage for these input shapes now; returns :meth:`plan_for`'s
        plan."""
        with self._affinity.use("prepare"):
            self._stage_entry_for(self.graph.signature(**inputs))
            self._trim()
            return self._plan_for(inputs)

    def _stage_entry_for(self, key: Signature) -> _Entry:
        """The cached program for ``key``, else a new one (as :meth:`Pipeline._entry_for`: when
        it does not fit in the devices' memory beside idle programs, those are freed first)."""
        self._check_open()
        entry = self._cache.get(key)
        if entry is not None:
            self._prepare_hits += 1
            return entry
        program = self._latest = with_room(lambda: self._build_program(key), self._evict_idle_program)
        return self._cache.add(key, program)

    def _build_program(self, key: Signature) -> StageProgram:
        # The cut may count on the arenas of idle programs: freeing them is how a DeviceOutOfMemory
        # below is answered (_stage_entry_for).
        reclaimable = [0] * len(self.devices)
        for entry in self._cache:
            if entry.idle:
                for k, stage in enumerate(entry.program.programs):
                    reclaimable[k] += sum(slot.arena.nbytes for slot in stage.slots if slot.arena is not None)
        program = StageProgram.build(self.graph, key, self.devices, self._stage_streams, self._constants,
                                     depth=self.depth, max_streams=self.max_streams,
                                     memory_fraction=self.memory_fraction, reclaimable=reclaimable)
        try:
            for workspaces, stage in zip(self._stage_workspaces, program.programs):
                workspaces.reserve(stage.workspace_sizes)
        except BaseException:
            program.close()
            raise
        return program

    def _evict_idle_program(self) -> bool:
        program = self._cache.evict_one()
        if program is None:
            return False
        program.close()  # idle: every slot is back, so every stage passed all its runs
        return True

    def _trim(self) -> None:
        for program in self._cache.trim():
            program.close()

    # -- running -----------------------------------------------------------------------------
    async def run(self, **inputs: Any) -> dict[str, np.ndarray]:
        """Run the graph once through every stage; returns ``{output name: array}``."""
        self._affinity.enter("run")
        try:
            return await self.finish(await self.start(*self.accept(self._check_inputs(inputs))))
        finally:
            self._affinity.leave()

    async def stream(self, batches: Iterable[Mapping[str, Any]] | AsyncIterable[Mapping[str, Any]],
                     ) -> AsyncIterator[dict[str, np.ndarray]]:
        """Run every batch, ``depth`` in flight (every stage busy), yielding results in order.

        As with :meth:`Pipeline.stream`, wrap it in ``contextlib.aclosing`` when leaving early.
        """
        self._affinity.enter("stream")
        try:
            async with contextlib.aclosing(stream_in_order(self, batches, self.depth, self._admit)) as runs:
                async for outputs in runs:
                    yield outputs
        finally:
            self._affinity.leave()

    def _admit(self, batch: Mapping[str, Any]) -> Admitted:
        return self.accept(self._check_inputs(batch)), None

    def accept(self, arrays: dict[str, np.ndarray]) -> Accepted[_Entry]:  # type: ignore[override]
        """Engine step: pad checked arrays to a bucket and find (or prepare) their stages; host
        values pick the program and are not copied (as :meth:`Pipeline.accept`).  The entry is
        pinned (never evicted) until the run finishes or is abandoned."""
        rows = None
        if self.buckets is not None:
            arrays, rows = self.buckets.pad(arrays, skip=self.graph.host_inputs, memory=self._largest_memory)
        key = self.graph.signature(**arrays)
        entry = self._stage_entry_for(key)
        self._cache.pin(entry)
        try:
            if self.buckets is not None:
                self.buckets.check_once(entry.checked, entry.program.plans, rows)
            self._trim()
        except BaseException:
            self._cache.unpin(entry)
            raise
        host = key.host
        return entry, {name: array for name, array in arrays.items() if name not in host}, rows

    def unpin(self, entry: _Entry) -> None:  # type: ignore[override]
        """Engine step: let an accepted entry go without starting a run on it."""
        self._cache.unpin(entry)

    async def start(self, entry: _Entry, arrays: Mapping[str, np.ndarray],  # type: ignore[override]
                    rows: int | None = None) -> _Ticket:
        """Engine step: take a slot on every stage (awaiting one: backpressure) and enqueue a run on it; the
        entry's pin passes to the ticket (or is dropped when no run starts)."""
        queue = entry.queue
        try:
            slot = await queue.acquire()
        except BaseException:
            self._cache.unpin(entry)
            raise
        try:
            entry.program.write_inputs(slot, arrays)
            await self._enqueue_lock.acquire()
        except BaseException:
            queue.release(slot)
            self._cache.unpin(entry)
            raise
        try:
            if self._closed or self._stage_res.gone:  # closed while this run waited for the lock
                queue.release(slot)
                self._cache.unpin(entry)
                raise ClosedResourceError("the pipeline is closed")
            self._runs += 1
            ticket = _Ticket(self._runs, entry, slot, rows)
            self._faults.start(ticket.run)
            failure = await self._enqueue_run(ticket)
        finally:
            self._enqueue_lock.release()
        if failure is not None:
            with anyio.CancelScope(shield=True):
                await self.abandon(ticket)
            raise failure
        return ticket

    async def _enqueue_run(self, ticket: _Ticket) -> BaseException | None:
        """Enqueue the stages and, whatever happens, every stage's completion (as
        :meth:`Pipeline._enqueue`); returns what stopped the run part way, if anything."""
        failure: BaseException | None = None
        try:
            await ticket.program.enqueue(ticket.slot, ticket.run, self._stage_workspaces)
        except BaseException as error:  # noqa: BLE001 - re-raised by the caller once the run is settled
            failure = error
        try:
            for k, (program, stage_slot) in enumerate(zip(ticket.program.programs, ticket.slot.slots)):
                ticket.values.append(program.enqueue_completion(stage_slot, self._stage_workspaces[k],
                                                                self._timelines[k], self._d2h_lane))
        except BaseException:
            self._faults.retire(ticket.run, self._runs)
            self._lost_slots += 1  # a stage without a completion: its slot can never safely come back
            raise
        return failure

    @property
    def _d2h_lane(self) -> int:
        return self.max_streams + 1

    async def _wait_all(self, ticket: _Ticket) -> None:
        for timeline, value in zip(self._timelines, ticket.values):
            await timeline.wait(self._d2h_lane, value)

    async def finish(self, ticket: _Ticket) -> dict[str, np.ndarray]:  # type: ignore[override]
        """Engine step: await every stage's completion; the run's outputs."""
        self._finishing += 1
        try:
            try:
                await self._wait_all(ticket)
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await self.abandon(ticket)
                raise
            try:
                with self._stage_res.lock:
                    if self._stage_res.gone:  # aclose gave everything up before this result was read
                        raise ClosedResourceError("the pipeline was closed before this run's result was read")
                    self._faults.collect(self._all_streams(), self._runs)
                    self._faults.check(ticket.run, ticket.program.run_error(ticket.slot))
                    outputs = ticket.program.read_outputs(ticket.slot)
            finally:
                self._faults.retire(ticket.run, self._runs)
                self._release(ticket)
            return ShapeBuckets.slice(outputs, ticket.rows) if ticket.rows is not None else outputs
        finally:
            self._finishing -= 1
            if not self._finishing and self._finished is not None:
                self._finished.set()

    async def abandon(self, ticket: _Ticket) -> None:  # type: ignore[override]
        """Engine step: give the slot back once every stage passed the ticket's work (shielded
        caller)."""
        with anyio.move_on_after(self.cancel_grace) as scope:
            await self._wait_all(ticket)
        self._faults.retire(ticket.run, self._runs)
        if scope.cancelled_caught:
            self._lost_slots += 1  # never reused: a device may still touch it
            self._cache.unpin(ticket.entry)  # its program then never counts as idle (a slot is missing)
            return
        if not self._stage_res.gone:
            self._faults.collect(self._all_streams(), self._runs)
            self._release(ticket)

    def _release(self, ticket: _Ticket) -> None:
        """The slot back to its program, the program unpinned (and trimmed if now idle)."""
        ticket.entry.queue.release(ticket.slot)
        self._cache.unpin(ticket.entry)
        if not self._stage_res.gone:
            self._trim()

    def _all_streams(self) -> list[Stream]:
        return self._stage_res.all_streams()

    # -- reporting and closing ---------------------------------------------------------------
    def stats(self) -> StageStats:
        programs = [entry.program for entry in self._cache]
        peaks = [d.backend.mem_peak() for d in self.devices]
        workspace = sum_counters([strategy.stats().as_dict() for strategy in self._stage_workspaces])
        stages: tuple[Mapping[str, Any], ...] = ()
        if self._latest is not None:
            stages = tuple({"device": d.name, **info} for d, info in zip(self.devices, self._latest.describe()))
        return StageStats(
            runs=self._runs, failed_runs=self._faults.failed, signatures=len(programs),
            prepare_hits=self._prepare_hits, executors=sum(p.executors for p in programs),
            events_per_run=max((sum(plan.num_events for plan in p.plans) for p in programs), default=0),
            waits_per_run=max((sum(plan.num_waits for plan in p.plans) for p in programs), default=0),
            arena_bytes=sum(p.arena_bytes for p in programs),
            constant_bytes=sum(b.nbytes for per_device in self._constants for b in per_device.values()),
            workspace=workspace, device_peak_bytes=sum(p for p in peaks if p is not None) if any(
                p is not None for p in peaks) else None,
            in_flight=len(self._faults.live), lost_slots=self._lost_slots, prepared=self._cache.prepared,
            evicted=self._cache.evicted, closed=self._closed, stages=stages)

    async def aclose(self) -> None:
        """Refuse new runs, wait for runs in flight, then free everything on every device;
        idempotent.  As :meth:`Pipeline.aclose`, cancelling it returns at once: the pipeline
        stays closed and what the devices may still touch is freed once they passed it."""
        with self._affinity.use("aclose"):
            await close_once(self, self._shut)

    async def _shut(self) -> None:
        self._cache.close_queues("the pipeline is closed")
        # Parked, what the devices may still touch is freed once every one passed it.
        await settle_or_park(self._settle, self._stage_finalizer, self._release_resources)

    def _release_resources(self) -> None:
        self._stage_finalizer.detach()
        self._stage_res.release()

    async def _settle(self) -> None:
        """Wait (cancellably) until every device has passed every run and every caller has read."""
        await self._enqueue_lock.acquire()  # a run being enqueued finishes enqueueing first
        self._enqueue_lock.release()
        for device, workspaces, timeline in zip(self.devices, self._stage_workspaces, self._timelines):
            if device.closed:
                continue  # nothing runs there any more: frees are no-ops on a closed device
            workspaces.publish()
            try:
                await timeline.drain()
            except ClosedResourceError:
                if not device.closed:
                    raise
        while self._finishing:
            self._finished = anyio.Event()
            await self._finished.wait()
        await anyio.to_thread.run_sync(self._sync_all, abandon_on_cancel=True)

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedResourceError("the pipeline is closed")
        for device in self.devices:
            if device.closed:
                raise ClosedResourceError(f"the pipeline's device {device.name} is closed; a stage pipeline needs "
                                          "every one of its devices: open new devices and a new Pipeline")

    def _sync_all(self) -> None:
        for stream in self._all_streams():
            try:
                stream.sync()
            except (BackendError, AclpipeError):
                pass  # its run already reported it, or nobody is left to tell

    def __repr__(self) -> str:
        names = " -> ".join(d.name for d in self.devices)
        return f"<Pipeline {self.graph.name!r} in stages {names} depth={self.depth} workspace={self.workspace}>"


def _check_options(graph: Graph, split: str | None, streams: int, depth: int | None, workspace: str,
                   memory_fraction: float) -> None:
    if not isinstance(graph, Graph):
        raise TypeError(f"Pipeline needs a Graph, got {type(graph).__name__}")
    if split not in (None, "stages"):
        raise ValueError(f"StagePipeline cuts the graph into stages (split='stages'), got split={split!r}")
    for label, value in (("streams", streams), ("depth", 1 if depth is None else depth)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label} must be a positive int, got {value!r}")
    if workspace not in STRATEGIES:
        raise ValueError(f"workspace must be one of {STRATEGIES}, got {workspace!r}")
    if not 0 < memory_fraction <= 1:
        raise ValueError(f"memory_fraction must be in (0, 1], got {memory_fraction!r}")


def _enable_peers(devices: Sequence[Device]) -> None:
    """Let every device push to every later one (boundaries only ever go forward)."""
    for k, sender in enumerate(devices):
        for receiver in devices[k + 1:]:
            if not sender.can_access_peer(receiver):
                raise PlanError(f"split='stages' copies values from {sender.name} to {receiver.name}, which cannot "
                                "access each other's memory (no peer access); use split='replicas'")
            sender.enable_peer_access(receiver)


def _make_stage_streams(devices: Sequence[Device], count: int) -> list[list[Stream]]:
    """``count`` streams on each device, booked in its stream budget (:func:`make_streams`);
    all or nothing."""
    made: list[list[Stream]] = []
    try:
        for device in devices:
            made.append(make_streams(device, count))
    except BaseException:
        for device, streams in zip(devices, made):
            close_streams(device, streams)
        raise
    return made
