"""The Pipeline: prepare a graph up front, enqueue it across streams, await completion.

``out = await pipe.run(x=batch)`` takes a free slot (awaiting one when all ``depth`` are
busy: backpressure), copies the inputs into the slot's pinned staging, enqueues the
prepared program (H2D copies, every node with its waits and records, D2H copies) and one
completion host function, and awaits it.  ``async for out in pipe.stream(batches)`` keeps
``depth`` runs in flight so that batch i+1's H2D, batch i's compute and batch i-1's D2H
overlap, and yields results in order.  ``pipe.run_sync(x=batch)`` is the blocking one-shot.

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

Lifecycle.  What the device touches lives in :class:`~aclpipe.pipeline.resources.Resources`:
freed by ``aclose()`` once the device passed every run, or, when the pipeline is dropped
without ``aclose()`` or its ``aclose()`` is cancelled, freed by whichever thread sees the
device pass it (never blocking the event loop, never sooner).  Closing the device fails
every waiter at once with :class:`ClosedResourceError`.  The async API serves one event loop
at a time (:mod:`~aclpipe.pipeline.affinity`), the blocking API any number of threads
(:mod:`~aclpipe.pipeline.sync`); programs per input signature are bounded
(:mod:`~aclpipe.pipeline.cache`), and so are the streams they hold (:mod:`~aclpipe.pipeline.budget`);
batches may be padded to buckets (:mod:`~aclpipe.pipeline.batches`).
"""

from __future__ import annotations

import contextlib
import functools
import time
import warnings
import weakref
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Self, cast

import anyio
import numpy as np

from ..backends import is_device_list
from ..errors import AclpipeError, BackendError, ClosedResourceError, EventLoopError, GraphError
from ..graph import Graph, Signature
from ..plan import Plan
from ..runtime import Device, DeviceBuffer, Stream, open_device
from ..runtime.completion.timeline import Timeline
from ..runtime.workspaces import STRATEGIES, WorkspaceStrategy, make_workspace_strategy, pipeline_options
from .affinity import LoopAffinity, refuse_inside_event_loop
from .batches import ShapeBuckets, check_inputs, empty_result, has_empty_input
from .budget import StreamBudgetWarning, close_streams, make_streams
from .cache import CacheEntry, ProgramCache, check_capacity
from .engine import POOL_BATCH, Accepted, Admitted, close_once, settle_or_park, stream_in_order
from .faults import FaultLog, Touched
from .prepare import Preparer
from .program import Program, Slot
from .resources import Resources
from .slots import FifoLock, Ticket
from .stats import CompletionLog, PipelineStats
from .sync import blocking_loop

__all__ = ["SPLITS", "Pipeline", "PipelineStats"]

#: How a pipeline given several devices uses them: ``"replicas"`` (default: the whole graph on
#: each, runs go to the least loaded) or ``"stages"`` (the graph cut into one stage per device).
SPLITS = ("replicas", "stages")

_Entry = CacheEntry[Program, Slot]


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
        ``"pool"`` (default), ``"static"``, ``"cached"``, ``"per-call"`` or ``"stream-ordered"``
        (Atlas A2 only): see :mod:`aclpipe.runtime.workspaces`.
    pool_bytes:
        Size of the workspace pool (default: twice the largest workspaces of all streams); with
        ``"stream-ordered"``, of its ``aclrtMemPool`` (default: 64 MiB).
    cancel_grace:
        Seconds a cancelled run waits, shielded, for the device to pass its enqueued work.
    max_programs:
        Programs (one per input signature) kept prepared at once; the least recently used one
        with nothing in flight is freed when a new signature would exceed it.
    buckets:
        Batch sizes to pad batches up to (see :mod:`aclpipe.pipeline.batches`), so that a
        server meets a few input signatures instead of one per batch size.
    split:
        With several devices: ``"replicas"`` (default;
        :class:`~aclpipe.pipeline.several.replicas.ReplicaPipeline`) or ``"stages"``
        (:class:`~aclpipe.pipeline.several.stages.StagePipeline`).

    Notes
    -----
    Threads.  The blocking API (:meth:`run_sync`, :meth:`close`) is safe from any number of
    threads: one event loop thread serves them all (:mod:`aclpipe.pipeline.sync`).  The async
    API serves one event loop at a time and refuses calls from another one meanwhile with
    :class:`EventLoopError` (see :mod:`aclpipe.pipeline.affinity`).
    """

    #: The pipelines over several devices by ``split`` (pipeline.several), each registered by
    #: its class statement (``class ReplicaPipeline(Pipeline, split="replicas")``): this module
    #: stays below them and imports none of them.
    _splits: ClassVar[dict[str, type[Pipeline]]] = {}

    def __init_subclass__(cls, split: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if split is not None:
            Pipeline._splits[split] = cls

    def __new__(cls, graph: Graph, device: object = None, *args: Any, **options: Any) -> Self:
        # Several devices: the same API, carried out by a subclass that drives one engine per device.
        target = _several_devices_class(options.get("split")) if cls is Pipeline and is_device_list(device) else cls
        return cast(Self, object.__new__(target))

    def __init__(self, graph: Graph, device: Device | str | Sequence[Device | str] | None = None, *,
                 streams: int = 4, depth: int = 2, workspace: str = "pool", pool_bytes: int = 0,
                 cancel_grace: float = 30.0, max_programs: int = 16, buckets: Sequence[int] | None = None,
                 split: str | None = None):
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
        self.buckets = ShapeBuckets(graph, buckets) if buckets is not None else None
        cache: ProgramCache[Program, Slot] = ProgramCache(check_capacity(max_programs))
        self.graph = graph
        owns_device = not isinstance(device, Device)
        self.device = device if isinstance(device, Device) else open_device(device)
        self.max_streams = streams
        self.depth = depth
        self.workspace = workspace
        self.cancel_grace = cancel_grace
        try:
            self._res = self._make_resources(owns_device, pool_bytes, cache)
        except BaseException:
            if owns_device:
                self.device.close()
            raise
        # Dropped without aclose(): what the device may still touch is freed once it passed it.
        self._finalizer = weakref.finalize(self, Resources.park, self._res)
        # Other pipelines on the device may ask for an idle program of this one to be freed
        # when they need streams for a capture (pipeline.budget).
        self._res.preparer.budget.register(self)
        self._starved = 0  # programs prepared uncaptured for lack of streams
        self._affinity = LoopAffinity(f"pipeline {graph.name!r}")
        self._enqueue_lock = FifoLock()
        self._faults = FaultLog()
        self._touched = Touched(len(self._res.streams))
        self._runs = 0
        self._prepare_hits = 0
        self._lost_slots = 0
        self._completion = CompletionLog()
        self._closed = False
        self._finishing = 0  # callers between awaiting completion and having their result
        self._finished: anyio.Event | None = None
        self._closing: anyio.Event | None = None  # set once aclose has settled
        #: The last signature ``accept`` computed, with the array shapes and the graph's host
        #: inputs it was computed for (see :meth:`_signature`).
        self._last_signature: tuple[tuple[tuple[str, tuple[int, ...]], ...], frozenset[str], Signature] | None = None

    def _make_resources(self, owns_device: bool, pool_bytes: int, cache: ProgramCache[Program, Slot]) -> Resources:
        streams = self._make_streams()
        replays = len(streams) - self.max_streams - 2
        timeline = Timeline(len(streams))
        for lane, stream in enumerate(streams):
            timeline.assign(stream, lane)
        # The pool is sized by the programs it serves unless pool_bytes fixes it, and reports
        # its releases in batches: a host function per node would stall the streams.
        options = pipeline_options(self.workspace, pool_bytes, POOL_BATCH)
        try:
            workspaces: WorkspaceStrategy = make_workspace_strategy(self.device, self.workspace, timeline=timeline,
                                                                    **options)
        except BaseException:
            close_streams(self.device, streams)
            raise
        preparer = Preparer(self.graph, self.device, streams, depth=self.depth, max_streams=self.max_streams,
                            replay_lanes=range(self.max_streams, self.max_streams + replays))
        return Resources(self.device, owns_device, streams, timeline, workspaces, preparer, cache)

    def _make_streams(self) -> list[Stream]:
        """Compute streams, then one replay stream per slot where the device captures and its
        budget has room (a captured run replays on its slot's own, so consecutive runs overlap:
        see pipeline.program; without them programs run uncaptured), then H2D and D2H.  Every
        one is booked in the device's stream budget until Resources.release closes it."""
        made = make_streams(self.device, self.max_streams + 2)
        try:
            replays = (make_streams(self.device, self.depth, optional=True)
                       if self.device.capabilities.graph_capture else [])
        except BaseException:
            close_streams(self.device, made)
            raise
        return made[:-2] + replays + made[-2:]

    def own_device(self) -> None:
        """Close the device once this pipeline's resources are freed (also when they are
        parked), as for a device it opened itself: for a device another pipeline opened for
        this one (a replica's, :mod:`aclpipe.pipeline.several.replicas`)."""
        self._res.owns_device = True

    # -- planning and preparing ----------------------------------------------------------------
    def plan_for(self, **inputs: Any) -> Plan:
        """The plan for these input shapes (``x=(32, 784)``; an imported model's host-value
        inputs take their contents: ``shape=np.array([4, -1])``); prepares nothing.  Plans are
        cached per input signature, so the first run with these inputs does not plan again."""
        with self._affinity.use("plan_for"):
            return self._res.preparer.plan_for(inputs)

    def prepare(self, **inputs: Any) -> Plan:
        """Plan, allocate and run phase one for these inputs now (as :meth:`plan_for` takes
        them; otherwise done at the first run with them).  Returns the plan."""
        with self._affinity.use("prepare"):
            entry = self._entry_for(self._res.preparer.signature(inputs))
            self._trim()
            return entry.program.plan

    def bind_storage(self, value: str, buffer: DeviceBuffer) -> None:
        """Keep graph value ``value`` (a node output, by name) in ``buffer`` instead of the slot's
        arena, in every program prepared from now on: what the node writes there stays for the
        next run to read, with no copy (a decoder's KV cache, :mod:`aclpipe.decode`), and the
        plans give it no arena room.  Its descriptor (strides included) is the bound graph's, at
        ``buffer``'s address; ``buffer`` must hold it, and stays the caller's, to free after
        :meth:`aclose`.  Runs share it, so call only with ``depth=1`` or runs that never
        overlap."""
        with self._affinity.use("bind_storage"):
            self._check_open()
            if buffer.device is not self.device:
                raise ValueError(f"bind_storage({value!r}): the buffer is on {buffer.device.name}, the pipeline "
                                 f"runs on {self.device.name}")
            self._res.preparer.bind_storage(value, buffer)

    def _entry_for(self, key: Signature) -> _Entry:
        self._check_open()
        cache = self._res.cache
        entry = cache.get(key)
        if entry is not None:
            self._prepare_hits += 1
            return entry
        self._touched.touch_all(self._runs + 1)  # preparing uploads and captures on the streams
        program = self._res.preparer.prepare(key, self._res.workspaces, self._evict_idle_program)
        if program.starved:
            self._starved += 1
            if self._starved == 1:
                budget = self._res.preparer.budget
                shapes = ", ".join(f"{name}={shape}" for name, shape in key.shapes)
                warnings.warn(StreamBudgetWarning(
                    f"pipeline {self.graph.name!r}: {self.device.name} has no streams left to capture a program for "
                    f"{shapes} ({budget.in_use} of {budget.limit} in use, no idle program left to free): it runs "
                    "uncaptured, from launch tables (as right, a little more host time per run); lower max_programs, "
                    "depth or streams, or close other pipelines, to capture again.  stats().starved counts them"),
                    stacklevel=4)
        return cache.add(key, program)

    def _evict_idle_program(self) -> bool:
        """Close the least recently used program with nothing in flight, freeing its events and
        device memory (the preparer asks when the device's event limit is near or preparing ran
        out of memory); False when every program is busy."""
        return self._evict(None)

    def _evict(self, worth: Callable[[Program], bool] | None) -> bool:
        program = self._res.cache.evict_one(worth)
        if program is None:
            return False
        program.close()
        return True

    # -- the device's stream budget (pipeline.budget) ------------------------------------------
    def oldest_idle_capture(self) -> int | None:
        """When this pipeline's least recently used idle captured program was last used."""
        if self._closed or self._res.released or self._res.parked:
            return None
        entry = self._res.cache.oldest_idle(_holds_streams)
        return None if entry is None else entry.used

    def evict_oldest_capture(self) -> bool:
        """Free that program for a capture on the device that needs its streams (this
        pipeline's or another's); refused (False) while this pipeline is in use by another
        thread or event loop, whose programs only it may touch."""
        if self._closed or self._res.released or self._res.parked:
            return False
        try:
            self._affinity.enter("free an idle program for another pipeline")
        except EventLoopError:
            return False
        try:
            return self._evict(_holds_streams)
        finally:
            self._affinity.leave()

    def _trim(self) -> None:
        """Free the least recently used idle programs beyond ``max_programs``."""
        for program in self._res.cache.trim():
            program.close()  # idle: every slot is back, so the device passed all its runs

    # -- running ---------------------------------------------------------------------------------
    async def run(self, **inputs: Any) -> dict[str, np.ndarray]:
        """Run the graph once; returns ``{output name: array}``."""
        self._affinity.enter("run")  # not a with-block: this is the hot path
        try:
            arrays = self._check_inputs(inputs)
            empty = empty_result(self.graph, arrays) if has_empty_input(self.graph, arrays) else None
            if empty is not None:
                return empty
            accepted = self.accept(arrays)
            return await self.finish(await self.start(*accepted))
        finally:
            self._affinity.leave()

    def run_sync(self, inputs: Mapping[str, Any] | None = None, /, **named: Any) -> dict[str, np.ndarray]:
        """Run the graph once and wait, from code with no event loop (as ``InferenceSession.run``).

        Inputs by name (``pipe.run_sync(x=batch)``) or as one mapping (``pipe.run_sync({"x":
        batch})``, for names that are not Python identifiers).  Safe from any number of threads
        at once: every blocking call is served by the pipeline's one event loop thread
        (:mod:`~aclpipe.pipeline.sync`), so concurrent callers share the ``depth`` slots and
        each gets its own result.  Inside a running event loop use ``await pipe.run(...)``.

        Raises
        ------
        EventLoopError
            When called from a thread that runs an event loop, or while another event loop
            has runs in flight on the pipeline (``await pipe.run`` there).
        """
        refuse_inside_event_loop("Pipeline.run_sync")
        if self._closed:  # said here, without starting a loop thread again only to say it
            raise ClosedResourceError("the pipeline is closed")
        merged = {**(inputs or {}), **named}
        return blocking_loop(self, f"pipeline {self.graph.name!r}").call(lambda: self.run(**merged))

    async def stream(self, batches: Iterable[Mapping[str, Any]] | AsyncIterable[Mapping[str, Any]],
                     ) -> AsyncIterator[dict[str, np.ndarray]]:
        """Run every batch (a dict of inputs), ``depth`` in flight, yielding results in order.

        Leaving the loop early leaves runs in flight until the generator is closed: wrap it in
        ``contextlib.aclosing(pipe.stream(...))`` to give their slots back at once.
        """
        self._affinity.enter("stream")
        try:
            async with contextlib.aclosing(stream_in_order(self, batches, self.depth, self._admit)) as runs:
                async for outputs in runs:
                    yield outputs
        finally:
            self._affinity.leave()

    def _admit(self, batch: Mapping[str, Any]) -> Admitted:
        """``stream()``'s check of one batch: accepted, or its result when there is nothing to
        compute (a zero-size dim)."""
        arrays = self._check_inputs(batch)
        if has_empty_input(self.graph, arrays):
            empty = empty_result(self.graph, arrays)
            if empty is not None:
                return None, empty
        return self.accept(arrays), None

    def accept(self, arrays: dict[str, np.ndarray]) -> Accepted[_Entry]:
        """Engine step (:mod:`~aclpipe.pipeline.engine`): pad to a bucket and find (or prepare)
        the program; nothing is enqueued.  Host values
        (see :mod:`aclpipe.graph.signature`) pick the program and are not copied.  The entry is
        pinned (never evicted) until the run finishes or is abandoned."""
        rows = None
        if self.buckets is not None:
            arrays, rows = self.buckets.pad(arrays, skip=self.graph.host_inputs, memory=self._device_memory)
        key = self._signature(arrays)
        entry = self._entry_for(key)
        self._res.cache.pin(entry)
        try:
            if self.buckets is not None:
                self.buckets.check_once(entry.checked, (entry.program.plan,), rows)
            self._trim()
        except BaseException:
            self.unpin(entry)
            raise
        if not key.host_values:
            return entry, arrays, rows
        host = key.host
        return entry, {name: array for name, array in arrays.items() if name not in host}, rows

    @functools.cached_property
    def _device_memory(self) -> int:
        """The device's memory in bytes, asked once (it never changes): a batch padded to a
        bucket must fit in it."""
        return self.device.mem_info().total

    def _signature(self, arrays: dict[str, np.ndarray]) -> Signature:
        """The signature of a run's arrays (dtypes already checked).  Most runs repeat the last
        accepted one: the same shapes, the same graph host inputs and the same contents in each
        host value give the same signature, so it is reused; anything else takes the graph's
        full check, which raises the usual :class:`GraphError` for shapes that do not fit."""
        shapes = tuple([(name, array.shape) for name, array in arrays.items()])
        host_inputs = self.graph.host_inputs
        last = self._last_signature
        if last is not None and last[0] == shapes and last[1] == host_inputs and _same_host_values(last[2], arrays):
            return last[2]
        key = self._res.preparer.signature(arrays)
        self._last_signature = (shapes, host_inputs, key)
        return key

    async def start(self, entry: _Entry, arrays: Mapping[str, np.ndarray], rows: int | None = None) -> Ticket:
        """Engine step: take a slot (awaiting one: backpressure) and enqueue a run on it."""
        queue, program = entry.queue, entry.program
        try:
            slot = await queue.acquire()
        except BaseException:
            self.unpin(entry)
            raise
        try:
            program.write_inputs(slot, arrays)
            await self._enqueue_lock.acquire()
        except BaseException:
            queue.release(slot)
            self.unpin(entry)
            raise
        try:
            if self._closed or self.device.closed:  # closed while this run waited for the lock
                queue.release(slot)
                self.unpin(entry)
                self._check_open()
            self._runs += 1
            ticket = Ticket(self._runs, program, slot, 0, entry=entry, rows=rows)
            # Live from the moment it has a number: faults collected meanwhile must cover it.
            self._faults.start(ticket.run)
            self._touched.touch(program.lanes(slot), ticket.run)
            # Not shielded: a cancel while enqueueing waits for a workspace stops further
            # enqueueing (ARCHITECTURE.md 6); _enqueue still completes what is on the streams.
            failure = await self._enqueue(ticket)
        finally:
            self._enqueue_lock.release()
        if failure is not None:
            # Part of the run may be on the device: the slot comes back once the device passed it.
            with anyio.CancelScope(shield=True):
                await self.abandon(ticket)
            raise failure
        return ticket

    async def _enqueue(self, ticket: Ticket) -> BaseException | None:
        """Enqueue the run and, whatever happens (cancellation included), its completion: once
        the first task is on a stream the run must be completed, or the slot would come back
        while the device still used it.  Returns what stopped the run part way, if anything."""
        failure: BaseException | None = None
        res = self._res
        try:
            await ticket.program.enqueue(ticket.slot, ticket.run, res.workspaces, res.timeline)
        except BaseException as error:  # noqa: BLE001 - re-raised by the caller once the run is settled
            failure = error
        try:
            ticket.value = ticket.program.enqueue_completion(ticket.slot, res.workspaces, res.timeline,
                                                             self._d2h_lane)
        except BaseException:
            # No completion to wait for: the slot can never safely come back.
            self._release_ticket(ticket)
            self._lost_slots += 1
            if self.device.closed:
                self._device_lost()
            raise
        return failure

    @property
    def _d2h_lane(self) -> int:
        return len(self._res.streams) - 1

    async def finish(self, ticket: Ticket) -> dict[str, np.ndarray]:
        """Engine step: await the run's completion; its outputs."""
        if self._completion.due:  # the previous results' latencies, looked up before this wait
            self._completion.settle(self._res.timeline, self._d2h_lane)
        self._finishing += 1
        try:
            return await self._result(ticket)
        finally:
            self._finishing -= 1
            if not self._finishing and self._finished is not None:
                self._finished.set()

    async def _result(self, ticket: Ticket) -> dict[str, np.ndarray]:
        res = self._res
        try:
            await res.timeline.wait(self._d2h_lane, ticket.value)
        except ClosedResourceError as error:  # the device was closed with the run in flight
            self._device_lost()
            self._release_ticket(ticket)
            raise ClosedResourceError(f"run {ticket.run} was abandoned: {error}") from error
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.abandon(ticket)
            raise
        try:
            with res.lock:
                if res.released or res.parked:  # aclose gave everything up before this result was read
                    raise ClosedResourceError(f"the pipeline was closed before run {ticket.run}'s result was read")
                self._collect_faults(ticket.run)
                own = ticket.program.run_error(ticket.slot)
                if own is not None or self._faults.faults:  # the usual answer, without the call
                    self._faults.check(ticket.run, own)
                outputs = ticket.program.read_outputs(ticket.slot)
        finally:
            self._release_ticket(ticket, slot_back=True)
        if ticket.rows is not None:
            outputs = ShapeBuckets.slice(outputs, ticket.rows)
        self._completion.resumed(ticket.value, time.monotonic_ns())
        return outputs

    async def abandon(self, ticket: Ticket) -> None:
        """Engine step: give the slot back once the device has passed the ticket's work
        (shielded caller)."""
        try:
            with anyio.move_on_after(self.cancel_grace) as scope:
                await self._res.timeline.wait(self._d2h_lane, ticket.value)
        except ClosedResourceError:  # the device was closed: nothing will pass it any more
            self._device_lost()
            self._release_ticket(ticket)
            return
        if scope.cancelled_caught:
            self._release_ticket(ticket)
            self._lost_slots += 1  # never reused: the device may still touch it
            return
        if not (self._res.released or self._res.parked):
            self._collect_faults(ticket.run)
        self._release_ticket(ticket, slot_back=True)

    def _release_ticket(self, ticket: Ticket, slot_back: bool = False) -> None:
        """The run is over for the pipeline: retire its fault window, unpin its program and, when
        the device passed it, give its slot back."""
        self._faults.retire(ticket.run, self._runs)
        if ticket.entry is None:
            return
        if slot_back:
            ticket.entry.queue.release(ticket.slot)
        self.unpin(ticket.entry)

    def unpin(self, entry: _Entry) -> None:
        """Engine step: let an accepted entry go (trimming the cache if it is now idle)."""
        self._res.cache.unpin(entry)
        if not entry.pins and not self._closed and not self._res.released:
            self._trim()

    def _device_lost(self) -> None:
        """The device was closed under the pipeline: every run waiting for a slot fails too."""
        self._res.cache.close_queues(f"device {self.device.name} was closed")

    def _check_inputs(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        self._check_open()
        return check_inputs(self.graph, inputs)

    def _collect_faults(self, completed_run: int) -> None:
        """Charge stream errors to the runs they spoiled; later runs go to fresh device streams.
        Only streams that may hold one are asked (:class:`Touched`); ``completed_run`` and every
        run before it have completed."""
        streams, touched = self._res.streams, self._touched
        if not touched.dirty:
            return
        lanes = touched.to_ask()
        # The usual answer (no error anywhere) in one call per stream, then only the streams
        # that hold one go through the fault log.  A plain loop: a comprehension is one more
        # frame, on a path that runs cold after each wait.
        failing = []
        for lane in lanes:
            if streams[lane].has_error():
                failing.append(streams[lane])
        if not failing:
            touched.found_clean(lanes, completed_run)
            return
        failed = self._faults.collect(failing, self._runs)
        touched.touch_all(self._runs + 1)  # renewed: ask every stream until found clean again
        for stream in failed:
            stream.renew()
        for entry in self._res.cache:
            entry.program.rebind()

    # -- reporting and closing ------------------------------------------------------------------
    def stats(self) -> PipelineStats:
        """The pipeline's counters (see :class:`PipelineStats`); also after :meth:`aclose`."""
        res = self._res
        if self._completion.due:
            self._completion.settle(res.timeline, self._d2h_lane)
        with res.lock:
            programs = [entry.program for entry in res.cache]
            workspace = res.workspaces.stats().as_dict()
            constant_bytes = res.preparer.constant_bytes
        return PipelineStats(
            runs=self._runs, failed_runs=self._faults.failed, signatures=len(programs),
            prepare_hits=self._prepare_hits,
            executors=sum(p.executor_count for p in programs),
            events_per_run=max((p.plan.num_events for p in programs), default=0),
            waits_per_run=max((p.plan.num_waits for p in programs), default=0),
            arena_bytes=sum(p.plan.arena_size * len(p.slots) for p in programs),
            constant_bytes=constant_bytes, workspace=workspace,
            device_peak_bytes=self.device.backend.mem_peak(), in_flight=len(self._faults.live),
            lost_slots=self._lost_slots, prepared=res.cache.prepared, evicted=res.cache.evicted,
            closed=self._closed, completion=self._completion.summary(),
            streams=0 if res.released else len(res.streams) + sum(p.streams_held for p in programs),
            events=sum(p.event_count for p in programs), captured=sum(1 for p in programs if p.streams_held),
            starved=self._starved,
            device_streams={"held": res.preparer.budget.held, "in_use": res.preparer.budget.in_use,
                            "limit": res.preparer.budget.limit})

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedResourceError("the pipeline is closed")
        if self.device.closed:
            raise ClosedResourceError(f"the pipeline's device {self.device.name} is closed; open a new "
                                      "device and a new Pipeline")

    async def aclose(self) -> None:
        """Refuse new runs, wait for runs in flight, then free everything; idempotent.

        Callers waiting for a slot get :class:`ClosedResourceError`; a run being enqueued
        finishes enqueueing; then this waits until the device has passed every enqueued run
        (every host function included: the completion pipe and counters must outlive them)
        and every caller awaiting a run has its result.

        Cancelling it (``with anyio.move_on_after(5): await pipe.aclose()``) returns at once:
        the pipeline stays closed and hands what the device may still touch over to be freed
        once the device passes it; callers still awaiting runs then get
        :class:`ClosedResourceError`.
        """
        with self._affinity.use("aclose"):
            await close_once(self, self._shut)

    async def _shut(self) -> None:
        self._res.cache.close_queues("the pipeline was closed while this run waited for a slot")
        # Parked, what the device may still touch is freed once it passed it, never waited for here.
        await settle_or_park(self._settle, self._finalizer, self._release_resources)

    def _release_resources(self) -> None:
        self._finalizer.detach()
        self._res.release()

    async def _settle(self) -> None:
        """Wait (cancellably) until the device has passed every run and every caller has read."""
        await self._enqueue_lock.acquire()  # a run being enqueued finishes enqueueing first
        self._enqueue_lock.release()
        if self.device.closed:
            return  # nothing runs any more: frees are no-ops on a closed device
        self._res.workspaces.publish()
        try:
            await self._res.timeline.drain()
        except ClosedResourceError:
            if not self.device.closed:
                raise
            return
        while self._finishing:
            self._finished = anyio.Event()
            await self._finished.wait()
        await anyio.to_thread.run_sync(self._drain, abandon_on_cancel=True)

    def _drain(self) -> None:
        for stream in self._res.streams:
            try:
                stream.sync()
            except (BackendError, AclpipeError):
                pass  # its run already reported it, or nobody is left to tell

    def close(self) -> None:
        """:meth:`aclose` from code with no event loop (pairs with :meth:`run_sync`): served by
        the same event loop thread as blocking runs, which it then stops."""
        refuse_inside_event_loop("Pipeline.close")
        blocking_loop(self, f"pipeline {self.graph.name!r}").close_with(self.aclose)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return (f"<Pipeline {self.graph.name!r} on {self.device.name} streams={self.max_streams} "
                f"depth={self.depth} workspace={self.workspace}{' closed' if self._closed else ''}>")


def _several_devices_class(split: object) -> type[Pipeline]:
    # Registered when aclpipe.pipeline (whose __init__ imports pipeline.several) is imported,
    # which any import of this module does first.  An unknown split was refused by __init__.
    return Pipeline._splits["stages" if split == "stages" else "replicas"]


def _holds_streams(program: Program) -> bool:
    return program.streams_held > 0


def _same_host_values(key: Signature, arrays: Mapping[str, np.ndarray]) -> bool:
    """Whether every host value of ``key`` has the dtype, shape and bytes of the array of that name."""
    for name, value in key.host_values:
        array = arrays.get(name)
        if array is None or not value.matches(array):
            return False
    return True
