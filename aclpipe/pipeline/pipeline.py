"""The Pipeline: prepare a graph up front, enqueue it across streams, await completion.

``out = await pipe.run(x=batch)`` takes a free slot (awaiting one when all ``depth`` are
busy: backpressure), copies the inputs into the slot's pinned staging, enqueues the
prepared program (H2D copies, every node with its waits and records, D2H copies) and one
completion host function, and awaits it.  ``async for out in pipe.stream(batches)`` keeps
``depth`` runs in flight so that batch i+1's H2D, batch i's compute and batch i-1's D2H
overlap, and yields results in order.

Errors.  Device faults are sticky on their stream, which goes on with its later tasks
(CANN's default, continue-on-failure).  Every launch carries its run number, so when a run
completes and finds a stream error, the pipeline records which run failed and up to which
run the work behind it reached; those runs raise :class:`ExecutionError` naming the failing
node, earlier runs are unaffected, and the failed streams are renewed so that later runs do
not run behind the failed task (see :mod:`.faults`).

Cancellation.  A run cancelled before it enqueued anything gives its slot straight back.
A run cancelled while enqueueing (waiting for a workspace) stops there; whatever it had
enqueued is completed.  Once work is enqueued, the slot (and the workspaces of its nodes)
return only after the device has passed it: the cancelled task waits for that, shielded, up
to ``cancel_grace`` seconds, then reports the slot lost rather than risk a use-after-free.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self, cast

import anyio
import numpy as np

from ..backends import is_device_list
from ..dtypes import as_dtype
from ..errors import AclpipeError, BackendError, ClosedResourceError, GraphError
from ..graph import Graph, Signature
from ..plan import Plan
from ..runtime import Device, Stream, open_device
from ..runtime.timeline import Timeline
from ..runtime.workspaces import STRATEGIES, WorkspaceStrategy, make_workspace_strategy
from .faults import FaultLog
from .prepare import Preparer
from .program import Program, Slot
from .slots import FifoLock, SlotQueue, Ticket

__all__ = ["SPLITS", "Pipeline", "PipelineStats"]

#: How a pipeline given several devices uses them: ``"replicas"`` (default: the whole graph on
#: each, runs go to the least loaded) or ``"stages"`` (the graph cut into one stage per device).
SPLITS = ("replicas", "stages")

#: Host functions that return pool blocks: one per this many releases per stream (and one at
#: the end of each run), so streams do not stall after every node.
_POOL_BATCH = 8


@dataclass(frozen=True)
class PipelineStats:
    """What :meth:`Pipeline.stats` reports.

    Attributes
    ----------
    runs, failed_runs:
        Runs enqueued so far, and runs that raised :class:`ExecutionError`.
    signatures, prepare_hits:
        Programs prepared (one per input signature), and runs that found theirs prepared.
    executors:
        Executors held (one per compute node per slot, over every program).
    events_per_run, waits_per_run:
        Events recorded and waits enqueued by one run (the largest program's).
    arena_bytes, constant_bytes:
        Device bytes of all slots' activation arenas, and of the uploaded weights.
    workspace:
        The workspace strategy's counters (:class:`~aclpipe.runtime.workspaces.WorkspaceStats`
        as a dict: ``strategy``, ``in_use``, ``peak``, ``reserved``, ``acquires``,
        ``allocations``, ``waits``, ``limit`` and ``outstanding``: blocks not yet back).
    device_peak_bytes:
        The device's peak memory use, when the backend reports it.
    in_flight:
        Runs enqueued whose results have not been read or abandoned yet.
    lost_slots:
        Slots of cancelled runs the device had not passed within ``cancel_grace``; never reused.
    """

    runs: int
    failed_runs: int
    signatures: int
    prepare_hits: int
    executors: int
    events_per_run: int
    waits_per_run: int
    arena_bytes: int
    constant_bytes: int
    workspace: Mapping[str, Any]
    device_peak_bytes: int | None
    in_flight: int
    lost_slots: int = 0  # slots of cancelled runs the device had not passed within cancel_grace

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class Pipeline:
    """Run a graph on a device, asynchronously.

    Parameters
    ----------
    graph:
        A :class:`Graph` (or anything :func:`aclpipe.load_graph` returns).
    device:
        A :class:`Device`, a device name (``"sim"``, ``"ascend:0"``) or ``None`` for the default.
        A device the pipeline opened is closed by :meth:`aclose`.  Several devices (a list, or
        ``"sim:0,1"``, ``"ascend:0-7"``) make a pipeline of the same API over all of them:
        see ``split``.
    streams:
        At most this many compute streams (plus one H2D and one D2H copy stream).
    depth:
        Runs in flight at once (slots, each with its own activation arena and staging).
    workspace:
        ``"pool"`` (default), ``"static"``, ``"cached"`` or ``"per-call"``: see
        :mod:`aclpipe.runtime.workspaces`.
    pool_bytes:
        Size of the workspace pool (default: twice the largest workspaces of all streams).
    cancel_grace:
        Seconds a cancelled run waits, shielded, for the device to pass its enqueued work.
    split:
        With several devices: ``"replicas"`` (default; :class:`~aclpipe.pipeline.replicas.ReplicaPipeline`)
        or ``"stages"`` (:class:`~aclpipe.pipeline.stages.StagePipeline`).
    """

    def __new__(cls, graph: Graph, device: object = None, *args: Any, **options: Any) -> Self:
        # Several devices: the same API, carried out by a subclass that drives one engine per device.
        target = _several_devices_class(options.get("split")) if cls is Pipeline and is_device_list(device) else cls
        return cast(Self, object.__new__(target))

    def __init__(self, graph: Graph, device: Device | str | Sequence[Device | str] | None = None, *,
                 streams: int = 4, depth: int = 2, workspace: str = "pool", pool_bytes: int = 0,
                 cancel_grace: float = 30.0, split: str | None = None):
        if not isinstance(graph, Graph):
            raise TypeError(f"Pipeline needs a Graph, got {type(graph).__name__}; build one with "
                            "aclpipe.Graph or load one with aclpipe.load_graph / aclpipe.load_onnx")
        for label, value in (("streams", streams), ("depth", depth)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{label} must be a positive int, got {value!r}")
        if workspace not in STRATEGIES:
            raise ValueError(f"workspace must be one of {STRATEGIES}, got {workspace!r}")
        if not graph.outputs:
            raise GraphError(f"graph {graph.name!r} has no outputs: mark results with g.output(name, value)")
        if split is not None and split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS} (or None), got {split!r}")
        if not (device is None or isinstance(device, (Device, str))):
            raise TypeError(f"device must be a Device, a name or a list of them, got {type(device).__name__}")
        self.graph = graph
        self._owns_device = not isinstance(device, Device)
        self.device = device if isinstance(device, Device) else open_device(device)
        self.max_streams = streams
        self.depth = depth
        self.workspace = workspace
        self.cancel_grace = cancel_grace
        self._streams: list[Stream] = [self.device.create_stream() for _ in range(streams + 2)]
        self._timeline = Timeline(len(self._streams))
        for lane, stream in enumerate(self._streams):
            self._timeline.assign(stream, lane)
        self._workspaces = self._make_workspaces(workspace, pool_bytes)
        self._preparer = Preparer(graph, self.device, self._streams, depth=depth, max_streams=streams)
        self._programs: dict[Signature, Program] = {}
        self._queues: dict[int, SlotQueue[Slot]] = {}
        self._enqueue_lock = FifoLock()
        self._faults = FaultLog()
        self._runs = 0
        self._prepare_hits = 0
        self._lost_slots = 0
        self._closed = False
        self._freed = False  # aclose freed the device memory: late tickets only retire
        self._finishing = 0  # callers between awaiting completion and having their result
        self._finished: anyio.Event | None = None
        self._closing: anyio.Event | None = None  # set once aclose has freed everything

    def _make_workspaces(self, name: str, pool_bytes: int) -> WorkspaceStrategy:
        # The pool is sized by the programs it serves unless pool_bytes fixes it, and reports
        # its releases in batches: a host function per node would stall the streams.
        options: dict[str, Any] = {"limit": pool_bytes or None, "batch": _POOL_BATCH} if name == "pool" else {}
        return make_workspace_strategy(self.device, name, timeline=self._timeline, **options)

    # -- planning and preparing ----------------------------------------------------------------
    def plan_for(self, **inputs: Any) -> Plan:
        """The plan for these input shapes (``x=(32, 784)``; an imported model's host-value
        inputs take their contents: ``shape=np.array([4, -1])``); prepares nothing.  Plans are
        cached per input signature, so the first run with these inputs does not plan again."""
        return self._preparer.plan_for(inputs)

    def prepare(self, **inputs: Any) -> Plan:
        """Plan, allocate and run phase one for these inputs now (as :meth:`plan_for` takes
        them; otherwise done at the first run with them).  Returns the plan."""
        return self._program_for(self._preparer.signature(inputs)).plan

    def _program_for(self, key: Signature) -> Program:
        self._check_open()
        program = self._programs.pop(key, None)
        if program is not None:
            self._programs[key] = program  # most recently used last: idle programs go first (events)
            self._prepare_hits += 1
            return program
        program = self._preparer.prepare(key, self._workspaces, self._evict_idle_program)
        self._programs[key] = program
        self._queues[id(program)] = SlotQueue(list(program.slots))
        return program

    def _evict_idle_program(self) -> bool:
        """Close the least recently used program whose slots are all free (the device has
        passed its runs), freeing its events; False when every program is busy."""
        for key, program in self._programs.items():
            queue = self._queues[id(program)]
            if len(queue.free) == len(program.slots) and not queue.waiters:
                del self._programs[key], self._queues[id(program)]
                program.close()
                return True
        return False

    # -- running ---------------------------------------------------------------------------------
    async def run(self, **inputs: Any) -> dict[str, np.ndarray]:
        """Run the graph once; returns ``{output name: array}``."""
        program, arrays = self._accept(inputs)
        return await self._finish(await self._start(program, arrays))

    async def stream(self, batches: Iterable[Mapping[str, Any]] | AsyncIterable[Mapping[str, Any]],
                     ) -> AsyncIterator[dict[str, np.ndarray]]:
        """Run every batch (a dict of inputs), ``depth`` in flight, yielding results in order.

        Leaving the loop early leaves runs in flight until the generator is closed: wrap it in
        ``contextlib.aclosing(pipe.stream(...))`` to give their slots back at once.
        """
        pending: collections.deque[Ticket] = collections.deque()
        try:
            async for batch in _aiter(batches):
                if not isinstance(batch, Mapping):
                    raise TypeError(f"stream() takes dicts of inputs, got {type(batch).__name__}")
                program, arrays = self._accept(dict(batch))
                # Never wait for a slot while holding runs this generator could finish itself: two
                # streams (or a stream and a caller that holds slots) would each keep some and
                # wait for the other's.
                while pending and not self._queues[id(program)].ready:
                    yield await self._finish(pending.popleft())
                pending.append(await self._start(program, arrays))
                if len(pending) >= self.depth:
                    yield await self._finish(pending.popleft())
            while pending:
                yield await self._finish(pending.popleft())
        finally:
            with anyio.CancelScope(shield=True):
                while pending:
                    await self._abandon(pending.popleft())

    def _accept(self, inputs: Mapping[str, Any]) -> tuple[Program, dict[str, np.ndarray]]:
        """Check the inputs and find (or prepare) their program; nothing is enqueued.  Host
        values (see :mod:`aclpipe.graph.signature`) pick the program and are not copied."""
        arrays = self._check_inputs(inputs)
        key = self._preparer.signature(arrays)
        host = key.host
        return self._program_for(key), {name: array for name, array in arrays.items() if name not in host}

    async def _start(self, program: Program, arrays: Mapping[str, np.ndarray]) -> Ticket:
        """Take a slot (awaiting one: backpressure) and enqueue a run on it."""
        queue = self._queues[id(program)]
        slot = await queue.acquire()
        try:
            program.write_inputs(slot, arrays)
            await self._enqueue_lock.acquire()
        except BaseException:
            queue.release(slot)
            raise
        try:
            if self._closed:  # closed while this run waited for the lock
                queue.release(slot)
                raise ClosedResourceError("the pipeline is closed")
            self._runs += 1
            ticket = Ticket(self._runs, program, slot, 0)
            # Live from the moment it has a number: faults collected meanwhile must cover it.
            self._faults.start(ticket.run)
            # Not shielded: a cancel while enqueueing waits for a workspace stops further
            # enqueueing (ARCHITECTURE.md 6); _enqueue still completes what is on the streams.
            failure = await self._enqueue(ticket)
        finally:
            self._enqueue_lock.release()
        if failure is not None:
            # Part of the run may be on the device: the slot comes back once the device passed it.
            with anyio.CancelScope(shield=True):
                await self._abandon(ticket)
            raise failure
        return ticket

    async def _enqueue(self, ticket: Ticket) -> BaseException | None:
        """Enqueue the run and, whatever happens (cancellation included), its completion: once
        the first task is on a stream the run must be completed, or the slot would come back
        while the device still used it.  Returns what stopped the run part way, if anything."""
        failure: BaseException | None = None
        try:
            await ticket.program.enqueue(ticket.slot, ticket.run, self._workspaces)
        except BaseException as error:  # noqa: BLE001 - re-raised by the caller once the run is settled
            failure = error
        try:
            ticket.value = ticket.program.enqueue_completion(ticket.slot, self._workspaces, self._timeline,
                                                             self._d2h_lane)
        except BaseException:
            # No completion to wait for: the slot can never safely come back.
            self._retire(ticket.run)
            self._lost_slots += 1
            raise
        return failure

    @property
    def _d2h_lane(self) -> int:
        return len(self._streams) - 1

    async def _finish(self, ticket: Ticket) -> dict[str, np.ndarray]:
        self._finishing += 1
        try:
            return await self._result(ticket)
        finally:
            self._finishing -= 1
            if not self._finishing and self._finished is not None:
                self._finished.set()

    async def _result(self, ticket: Ticket) -> dict[str, np.ndarray]:
        try:
            await self._timeline.wait(self._d2h_lane, ticket.value)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._abandon(ticket)
            raise
        if self._freed:  # a stream() generator resumed after aclose: its results are gone
            self._retire(ticket.run)
            raise ClosedResourceError("the pipeline was closed before this run's result was read")
        try:
            self._collect_faults()
            self._faults.check(ticket.run, ticket.program.run_error(ticket.slot))
            return ticket.program.read_outputs(ticket.slot)
        finally:
            self._retire(ticket.run)
            self._queues[id(ticket.program)].release(ticket.slot)

    async def _abandon(self, ticket: Ticket) -> None:
        """Give the slot back once the device has passed the ticket's work (shielded caller)."""
        with anyio.move_on_after(self.cancel_grace) as scope:
            await self._timeline.wait(self._d2h_lane, ticket.value)
        if scope.cancelled_caught:
            self._retire(ticket.run)
            self._lost_slots += 1  # never reused: the device may still touch it
            return
        if self._freed:
            self._retire(ticket.run)
            return
        self._collect_faults()
        self._retire(ticket.run)
        self._queues[id(ticket.program)].release(ticket.slot)

    def _retire(self, run: int) -> None:
        self._faults.retire(run, self._runs)

    def _collect_faults(self) -> None:
        """Charge stream errors to the runs they spoiled; later runs go to fresh device streams."""
        failed = self._faults.collect(self._streams, self._runs)
        if failed:
            for stream in failed:
                stream.renew()
            for program in self._programs.values():
                program.rebind()

    def _check_inputs(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        self._check_open()
        expected = self.graph.inputs
        missing = [name for name in expected if name not in inputs]
        unknown = [name for name in inputs if name not in expected]
        if missing or unknown:
            raise ValueError(f"graph {self.graph.name!r} takes inputs {list(expected)}; "
                             f"missing {missing}, unknown {unknown}")
        arrays: dict[str, np.ndarray] = {}
        for name, spec in expected.items():
            array = np.asarray(inputs[name])
            want = as_dtype(spec.dtype)
            if array.dtype != want.numpy:
                raise TypeError(f"input {name!r}: expected dtype {want.name} (as the graph declares), got "
                                f"{array.dtype}; convert with array.astype('{want.name}')")
            arrays[name] = array
        return arrays

    # -- reporting and closing ------------------------------------------------------------------
    def stats(self) -> PipelineStats:
        programs = list(self._programs.values())
        return PipelineStats(
            runs=self._runs, failed_runs=self._faults.failed, signatures=len(programs),
            prepare_hits=self._prepare_hits,
            executors=sum(len(slot.executors) for p in programs for slot in p.slots),
            events_per_run=max((p.plan.num_events for p in programs), default=0),
            waits_per_run=max((p.plan.num_waits for p in programs), default=0),
            arena_bytes=sum(p.plan.arena_size * len(p.slots) for p in programs),
            constant_bytes=self._preparer.constant_bytes,
            workspace=self._workspaces.stats().as_dict(), device_peak_bytes=self.device.backend.mem_peak(),
            in_flight=len(self._faults.live), lost_slots=self._lost_slots)

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedResourceError("the pipeline is closed")

    async def aclose(self) -> None:
        """Refuse new runs, wait for runs in flight, then free everything; idempotent.

        Callers waiting for a slot get :class:`ClosedResourceError`; a run being enqueued
        finishes enqueueing; then this waits until the device has passed every enqueued run
        (every host function included: the completion pipe and counters must outlive them)
        and every caller awaiting a run has its result.
        """
        if self._closed:
            if not self._freed and self._closing is not None:  # another task is closing: wait for it
                with anyio.CancelScope(shield=True):
                    await self._closing.wait()
            return
        self._closed = True
        self._closing = anyio.Event()
        try:
            await self._close()
        finally:
            self._closing.set()

    async def _close(self) -> None:
        with anyio.CancelScope(shield=True):
            for queue in self._queues.values():
                queue.close()
            await self._enqueue_lock.acquire()  # a run being enqueued finishes enqueueing first
            self._enqueue_lock.release()
            self._workspaces.publish()
            await self._timeline.drain()
            while self._finishing:
                self._finished = anyio.Event()
                await self._finished.wait()
            await anyio.to_thread.run_sync(self._drain)
        self._freed = True
        for program in self._programs.values():
            program.close()
        self._programs.clear()
        self._workspaces.close()
        self._preparer.close()
        for stream in self._streams:
            stream.close()
        self._timeline.close()
        if self._owns_device:
            self.device.close()

    def _drain(self) -> None:
        for stream in self._streams:
            try:
                stream.sync()
            except (BackendError, AclpipeError):
                pass  # its run already reported it, or nobody is left to tell

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return (f"<Pipeline {self.graph.name!r} on {self.device.name} streams={self.max_streams} "
                f"depth={self.depth} workspace={self.workspace}>")


def _several_devices_class(split: object) -> type[Pipeline]:
    # Imported here: both modules build on this one.
    if split == "stages":
        from .stages import StagePipeline

        return StagePipeline
    from .replicas import ReplicaPipeline

    return ReplicaPipeline


async def _aiter(batches: Iterable[Any] | AsyncIterable[Any]) -> AsyncIterator[Any]:
    if isinstance(batches, AsyncIterable):
        async for batch in batches:
            yield batch
    else:
        for batch in batches:
            yield batch

