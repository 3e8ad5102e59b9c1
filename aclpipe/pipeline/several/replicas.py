"""Replicas: one graph on several devices, each run sent to the device with the least work.

``Pipeline(graph, device=["sim:0", "sim:1"])`` (or ``"sim:0,1"``, ``"ascend:0-7"``) makes a
:class:`ReplicaPipeline`: one single-device :class:`Pipeline` per device, each with its own
constants, programs, slots and streams.  It keeps the Pipeline API; what it adds is policy:

- **Dispatch.**  A run goes to the device in rotation with the least outstanding work: the
  modelled cost of the runs it has in flight (the plan's node costs, per input signature),
  then fewer runs dispatched so far.  ``stream()`` keeps up to ``depth`` runs in flight per
  device and yields results in input order.
- **Faults.**  A run that fails on the device (:class:`ExecutionError`, :class:`DeviceFault`)
  raises naming the device and the node, and takes the device out of rotation: later runs go
  to the others.  When every device is out, runs raise :class:`DevicesUnavailableError`.
  ``pipe.restore("sim:1")`` puts a device back (its pipeline already consumed the fault, so
  its next runs run normally).
- **Closed devices.**  A device closed under the pipeline leaves rotation for good
  (``stats()`` says so); a run it had in flight, or that was sent to it, runs again on
  another device, so callers see an error only when no device is left.
- **Closing and threads.**  ``aclose()`` closes every device's pipeline at once and, as on
  one device, is cancellable: what a hung device may still touch is then freed once it has
  passed it.  The async API serves one event loop at a time (:mod:`~aclpipe.pipeline.affinity`),
  the blocking one any number of threads (:mod:`~aclpipe.pipeline.sync`).
- **Stats.**  :meth:`stats` sums the devices' figures and lists each device's
  (:class:`ReplicaStats`).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import numpy as np

from ...errors import ClosedResourceError, DeviceFault, DevicesUnavailableError, ExecutionError
from ...graph import Graph, Signature
from ...plan import Plan
from ...runtime import Device
from ..affinity import LoopAffinity
from ..batches import check_inputs, empty_result, has_empty_input
from ..cache import CacheEntry, LruDict
from ..engine import Engine, close_once, each_batch
from ..pipeline import Pipeline
from ..program import Program, Slot
from ..slots import Ticket
from ..stats import PipelineStats
from .devices import open_devices, sum_counters

__all__ = ["DeviceStats", "ReplicaPipeline", "ReplicaStats"]

#: Errors that say the device failed (not the caller's inputs): they take a device out.
DEVICE_FAULTS = (ExecutionError, DeviceFault)
#: Figures of PipelineStats that describe one run, not a total: the largest is reported.
_PER_RUN = frozenset({"events_per_run", "waits_per_run"})


@dataclass(frozen=True)
class DeviceStats:
    """One device of a :class:`ReplicaPipeline`.

    Attributes
    ----------
    name:
        The device (``"sim:1"``).
    in_rotation:
        Whether new runs may go to it.
    dispatched:
        Runs sent to it so far.
    outstanding_runs, outstanding_work:
        Runs in flight on it, and their modelled cost (µs).
    fault:
        What took it out of rotation, if anything (``"device sim:1 was closed"`` for a device
        closed under the pipeline: out for good).
    pipeline:
        Its pipeline's own :class:`PipelineStats`.
    """

    name: str
    in_rotation: bool
    dispatched: int
    outstanding_runs: int
    outstanding_work: float
    fault: str | None
    pipeline: PipelineStats


@dataclass(frozen=True)
class ReplicaStats(PipelineStats):
    """:class:`PipelineStats` summed over the devices (``events_per_run`` and ``waits_per_run``:
    the largest), plus ``devices``: one :class:`DeviceStats` per device."""

    devices: tuple[DeviceStats, ...] = field(default=())


@dataclass
class _Replica:
    name: str
    pipeline: Pipeline  # driven through its Engine steps (engine) and its public API only
    dispatched: int = 0
    outstanding_runs: int = 0
    outstanding_work: float = 0.0
    fault: BaseException | None = None


#: A run a stream started: the device, its ticket (None: the device was closed before it
#: started), its modelled work, and the batch (run again elsewhere if the device is closed).
_Pending = tuple[_Replica, Ticket | None, float, Mapping[str, Any]]


def _closed_error(replica: _Replica) -> ClosedResourceError:
    return ClosedResourceError(f"device {replica.name} was closed; it is out of rotation for good")


class ReplicaPipeline(Pipeline, split="replicas"):
    """The whole graph on each of several devices; see the module docstring.

    Parameters are :class:`Pipeline`'s, per device: each device gets ``streams`` compute
    streams, ``depth`` slots and its own workspaces.  ``device_options`` go to
    :func:`aclpipe.open_device` for devices given by name.
    """

    def __init__(self, graph: Graph, device: str | Sequence[Device | str] | None = None, *, streams: int = 4,
                 depth: int = 2, workspace: str = "pool", pool_bytes: int = 0, cancel_grace: float = 30.0,
                 max_programs: int = 16, buckets: Sequence[int] | None = None, split: str | None = None,
                 device_options: Mapping[str, Any] | None = None):
        if split not in (None, "replicas"):
            raise ValueError(f"ReplicaPipeline runs whole graphs (split='replicas'), got split={split!r}")
        if device is None:
            raise ValueError("name the devices, e.g. device=['sim:0', 'sim:1'] or 'ascend:0-7'")
        devices, self._opened = open_devices(device, device_options)
        self._replicas: list[_Replica] = []
        try:
            for each in devices:
                engine = Pipeline(graph, each, streams=streams, depth=depth, workspace=workspace,
                                  pool_bytes=pool_bytes, cancel_grace=cancel_grace, max_programs=max_programs,
                                  buckets=buckets)
                # A device opened here goes with its pipeline's resources: closed after they are
                # freed, also when they are parked (a cancelled aclose, a dropped pipeline).
                if any(each is made for made in self._opened):
                    engine.own_device()
                self._replicas.append(_Replica(each.name, engine))
        except BaseException:
            for made in self._opened:
                made.close()
            raise
        self.graph = graph
        self.devices = devices
        self.device = devices[0]
        self.max_streams, self.depth, self.workspace = streams, depth, workspace
        self.cancel_grace = cancel_grace
        self.buckets = self._replicas[0].pipeline.buckets
        self._work: LruDict[Signature, float] = LruDict(1024)
        self._affinity = LoopAffinity(f"pipeline {graph.name!r}")
        self._closed = False
        self._closing: anyio.Event | None = None

    # -- dispatch ----------------------------------------------------------------------------
    def _retire_closed(self) -> None:
        """Take devices closed under the pipeline out of rotation, for good."""
        for replica in self._replicas:
            if replica.fault is None and replica.pipeline.device.closed:
                replica.fault = _closed_error(replica)

    def _pick(self) -> _Replica:
        self._retire_closed()
        healthy = [replica for replica in self._replicas if replica.fault is None]
        if not healthy:
            faults = {replica.name: replica.fault for replica in self._replicas if replica.fault is not None}
            listing = "; ".join(f"{name}: {error}" for name, error in faults.items())
            raise DevicesUnavailableError(
                f"every device of this pipeline is out of rotation ({listing}); fix the cause and put devices "
                "back with pipe.restore(name), or open a new pipeline where devices were closed", faults=faults)
        return min(healthy, key=lambda r: (r.outstanding_work, r.outstanding_runs, r.dispatched))

    def _planner(self) -> _Replica:
        """A replica to plan on (plans are the same on every device; planning runs nothing, so
        one out of rotation after a fault still plans, one whose device was closed does not)."""
        return next((r for r in self._replicas if not r.pipeline.device.closed), self._replicas[0])

    def _work_of(self, inputs: Mapping[str, Any]) -> float:
        """The modelled cost (µs) of one run with these inputs (1 when they are not valid: the
        device's own run then reports what is wrong)."""
        try:
            arrays: dict[str, Any] = {name: np.asarray(value) for name, value in inputs.items()}
            if self.buckets is not None:  # the size the device will run, without padding a copy
                arrays = self.buckets.padded_shapes(arrays, skip=self.graph.host_inputs)
            key = self.graph.signature(**arrays)
            work = self._work.get(key)
            if work is None:
                plan = self._planner().pipeline.plan_for(**arrays)
                work = max(sum(node.cost for node in plan.nodes), 1.0)
                self._work[key] = work
        except (ValueError, TypeError):
            return 1.0
        return work

    def _dispatch(self, work: float) -> _Replica:
        if self._closed:
            raise ClosedResourceError("the pipeline is closed")
        replica = self._pick()
        replica.dispatched += 1
        replica.outstanding_runs += 1
        replica.outstanding_work += work
        return replica

    def _done(self, replica: _Replica, work: float) -> None:
        replica.outstanding_runs -= 1
        replica.outstanding_work -= work

    def _lost(self, replica: _Replica) -> bool:
        """Whether a :class:`ClosedResourceError` from ``replica`` means its device was closed
        under an open pipeline; it then leaves rotation for good and the run goes elsewhere."""
        if self._closed or not replica.pipeline.device.closed:
            return False
        replica.fault = replica.fault if isinstance(replica.fault, ClosedResourceError) else _closed_error(replica)
        return True

    def _failed(self, replica: _Replica, error: BaseException) -> ExecutionError:
        """Take ``replica`` out of rotation; the error its failing run raises."""
        replica.fault = replica.fault or error
        node, op, stream = (getattr(error, name, None) for name in ("node", "op", "stream"))
        what = f"node {node!r} ({op})" if node is not None else "a task"
        return ExecutionError(f"{replica.name}: {what} failed; the device is out of rotation until "
                              f"pipe.restore({replica.name!r}): {error}", node=node, op=op, stream=stream,
                              cause=getattr(error, "cause", None) or error, device=replica.name)

    # -- running -----------------------------------------------------------------------------
    async def run(self, **inputs: Any) -> dict[str, np.ndarray]:
        """Run the graph once on the least loaded device; returns ``{output name: array}``."""
        self._affinity.enter("run")
        try:
            return await self._run(inputs)
        finally:
            self._affinity.leave()

    async def _run(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        while True:  # once more on another device for each device closed under the run
            work = self._work_of(inputs)
            replica = self._dispatch(work)
            try:
                return await replica.pipeline.run(**inputs)
            except DEVICE_FAULTS as error:
                raise self._failed(replica, error) from error
            except ClosedResourceError:
                if not self._lost(replica):
                    raise
            finally:
                self._done(replica, work)

    async def stream(self, batches: Iterable[Mapping[str, Any]] | AsyncIterable[Mapping[str, Any]],
                     ) -> AsyncIterator[dict[str, np.ndarray]]:
        """Run every batch, up to ``depth`` in flight per device, yielding results in order.

        As with :meth:`Pipeline.stream`, wrap it in ``contextlib.aclosing`` when leaving early.
        """
        pending: collections.deque[_Pending] = collections.deque()
        limit = self.depth * len(self._replicas)
        self._affinity.enter("stream")
        try:
            async for batch in each_batch(batches):
                try:
                    if isinstance(batch, Exception):
                        raise batch
                    arrays = check_inputs(self.graph, batch)
                    empty = empty_result(self.graph, arrays) if has_empty_input(self.graph, arrays) else None
                except Exception:  # in order, as Pipeline.stream: the runs ahead first, then the error
                    while pending:
                        yield await self._finish_on(*pending.popleft())
                    raise
                if empty is not None:  # nothing to run: in order after the runs ahead of it
                    while pending:
                        yield await self._finish_on(*pending.popleft())
                    yield empty
                    continue
                work = self._work_of(batch)
                replica = self._dispatch(work)
                engine: Engine[CacheEntry[Program, Slot], Ticket] = replica.pipeline
                accepted = None  # stays None when its device was closed: in its turn it runs elsewhere
                try:
                    accepted = engine.accept(arrays)
                except BaseException as error:
                    if not (isinstance(error, ClosedResourceError) and self._lost(replica)):
                        self._done(replica, work)
                        if isinstance(error, Exception):  # in order, as above
                            while pending:
                                yield await self._finish_on(*pending.popleft())
                        raise
                ticket: Ticket | None = None
                if accepted is not None:
                    try:
                        try:
                            # As Pipeline.stream: never wait for a slot while holding runs we could finish.
                            while pending and not accepted[0].queue.ready:
                                yield await self._finish_on(*pending.popleft())
                        except BaseException:
                            engine.unpin(accepted[0])
                            raise
                        try:
                            ticket = await engine.start(*accepted)
                        except ClosedResourceError:
                            if not self._lost(replica):
                                raise
                    except BaseException:
                        self._done(replica, work)
                        raise
                pending.append((replica, ticket, work, batch))
                if len(pending) >= limit:
                    yield await self._finish_on(*pending.popleft())
            while pending:
                yield await self._finish_on(*pending.popleft())
        finally:
            try:
                with anyio.CancelScope(shield=True):
                    while pending:
                        replica, ticket, work, _ = pending.popleft()
                        try:
                            if ticket is not None:
                                await replica.pipeline.abandon(ticket)
                        finally:
                            self._done(replica, work)
            finally:
                self._affinity.leave()

    async def _finish_on(self, replica: _Replica, ticket: Ticket | None, work: float, batch: Mapping[str, Any],
                         ) -> dict[str, np.ndarray]:
        """The result of a run the stream started (``ticket``; None: its device was closed
        before it started), or, when its device was closed under it, of the batch run again on
        another device."""
        try:
            if ticket is not None:
                return await replica.pipeline.finish(ticket)
        except DEVICE_FAULTS as error:
            raise self._failed(replica, error) from error
        except ClosedResourceError:
            if not self._lost(replica):
                raise
        finally:
            self._done(replica, work)
        return await self._run(batch)

    def restore(self, device: Device | str | int) -> None:
        """Put ``device`` (a :class:`Device`, its name such as ``"sim:1"``, or its position in
        the device list) back into rotation.  A closed device cannot come back."""
        replica = self._replica(device)
        if replica.pipeline.device.closed:
            raise ClosedResourceError(f"{replica.name} was closed, so it cannot take runs again; open a new "
                                      "pipeline on an open device")
        replica.fault = None

    def _replica(self, device: Device | str | int) -> _Replica:
        if isinstance(device, bool):
            raise TypeError("name the device to restore: a Device, 'sim:1' or its position")
        if isinstance(device, int):
            if not 0 <= device < len(self._replicas):
                raise ValueError(f"this pipeline has {len(self._replicas)} devices; there is no device {device}")
            return self._replicas[device]
        name = device.name if isinstance(device, Device) else device
        for replica in self._replicas:
            if replica.name == name or (isinstance(name, str) and ":" not in name and replica.name == f"{name}:0"):
                return replica
        raise ValueError(f"{name!r} is not a device of this pipeline: {[r.name for r in self._replicas]}")

    # -- planning ----------------------------------------------------------------------------
    def plan_for(self, **inputs: Any) -> Plan:
        """The plan for these inputs (as :meth:`Pipeline.plan_for` takes them; the same on every
        device)."""
        with self._affinity.use("plan_for"):
            return self._planner().pipeline.plan_for(**inputs)

    def prepare(self, **inputs: Any) -> Plan:
        """Prepare these inputs' program on every device now (those out of rotation after a
        fault too, ready for :meth:`restore`; not those closed); returns the plan."""
        with self._affinity.use("prepare"):
            usable = [replica for replica in self._replicas if not replica.pipeline.device.closed]
            if not usable:
                self._pick()  # raises, naming every device and why it is out
            plans = [replica.pipeline.prepare(**inputs) for replica in usable]
            return plans[0]

    # -- reporting and closing ---------------------------------------------------------------
    def stats(self) -> ReplicaStats:
        self._retire_closed()
        per_device = [DeviceStats(r.name, r.fault is None, r.dispatched, r.outstanding_runs, r.outstanding_work,
                                  None if r.fault is None else str(r.fault), r.pipeline.stats())
                      for r in self._replicas]
        totals = _sum_stats([d.pipeline for d in per_device])
        return ReplicaStats(**totals, devices=tuple(per_device))

    async def aclose(self) -> None:
        """Close every device's pipeline at once (each waits for its runs; the devices opened
        here go with them); idempotent.  As :meth:`Pipeline.aclose`, cancelling it returns at
        once: the pipeline stays closed and what each device may still touch is freed once that
        device has passed it."""
        with self._affinity.use("aclose"):
            await close_once(self, self._shut)

    async def _shut(self) -> None:
        # Together, not one after another: a cancel then reaches every device's aclose, each of
        # which hands its resources over instead of waiting for its device.
        async with anyio.create_task_group() as group:
            for replica in self._replicas:
                group.start_soon(replica.pipeline.aclose)

    def __repr__(self) -> str:
        names = ", ".join(r.name + ("" if r.fault is None else " (out)") for r in self._replicas)
        return f"<Pipeline {self.graph.name!r} replicated on {names} depth={self.depth} workspace={self.workspace}>"


def _sum_stats(stats: Sequence[PipelineStats]) -> dict[str, Any]:
    """Each PipelineStats field over the devices: counts summed, per-run figures the largest,
    the workspace counters summed key by key."""
    totals: dict[str, Any] = {}
    for item in dataclasses.fields(PipelineStats):
        values = [getattr(each, item.name) for each in stats]
        if item.name in _PER_RUN:
            totals[item.name] = max(values)
        elif item.name == "device_peak_bytes":  # each device's own peak, added up
            known = [v for v in values if v is not None]
            totals[item.name] = sum(known) if known else None
        elif values and isinstance(values[0], Mapping):
            totals[item.name] = sum_counters(values)
        elif values and isinstance(values[0], bool):  # closed: every device's pipeline is
            totals[item.name] = all(values)
        else:
            totals[item.name] = sum(values)
    return totals
