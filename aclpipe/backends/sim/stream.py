"""Simulated streams: one worker thread each, running its queue in order.

Streams really run concurrently: numpy kernels release the GIL, and with the timing model
on, tasks sleep for their modelled time while holding their engine.

Failures follow ``aclrtSetStreamFailureMode`` (``hicann/runtime``
``docs/zh/api_ref/06_stream_management.md``):

- ``CONTINUE`` (the default): the stream goes on with the next tasks, which compute on
  whatever the failed task left behind (its outputs are poisoned, so the garbage shows);
- ``STOP``: the stream stops executing; tasks already queued are discarded and no new task
  may be submitted.  Setting it on one stream makes every stream of the context (here: of
  the device) stop on failure, as the page says.  Records a stopped stream never reaches
  leave their waiters blocked, until :meth:`SimStream.abort` (``aclrtStreamAbort``) clears
  those streams too.

Either way the first error is sticky: the next ``sync``, ``query`` or ``take_error`` reports
and clears it.  Host functions go to the device's one host-function thread
(:mod:`.callbacks`: ``12_execution_control.md``, ``aclrtLaunchHostFunc``, and the runtime's
``ApiImpl::LaunchHostFunc``, which creates one callback thread per context), so host functions
of different streams run one at a time, never overlapping.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...errors import BackendError, error_from_code
from ...ops.fp_errors import ignore_fp_errors_on_this_thread
from ..protocol import FailureMode
from .callbacks import CallbackThread
from .event import SimEvent, wait_timed_out
from .memory import POISON_BYTE, Allocation
from .sanitizer import Clock

if TYPE_CHECKING:
    from .core import SimCore

__all__ = ["FailureMode", "SimStream", "Task", "describe_task", "sync_task"]

KERNEL, COPY, MEMSET, RECORD, WAIT, HOST_FUNC, LATCH, GRAPH, CONTROL = (
    "kernel", "copy", "memset", "record", "wait", "host_func", "latch", "graph", "control")

#: ``(allocation, address, nbytes)``: bytes a task writes.
Region = tuple[Allocation, int, int]


@dataclass(eq=False)
class Task:
    kind: str
    name: str
    run: Callable[[], None] | None = None
    engine: str = "compute"
    seconds: float = 0.0  # modelled device time
    cores: int = 1
    context: dict[str, Any] | None = None
    event: SimEvent | None = None
    generation: int = 0  # event generation, for RECORD and WAIT
    latch: threading.Event | None = None
    snapshot: Clock = field(default_factory=dict)
    tasks: list[Task] | None = None  # GRAPH: a model part, run in one queue entry
    began: float | None = None  # device time it got its engine; set only while a trace records
    index: int = 0  # position in its stream's queue (an abort discards up to one)
    writes: Sequence[Region] = ()  # (allocation, address, nbytes): poisoned when the task fails
    adopt_error: bool = False  # WAIT: a failure the waited record carries becomes this stream's
    inherit: bool = True  # WAIT: later records here carry a failure the waited record carries
    joins: list[tuple[SimEvent, int]] | None = None  # WAIT: more (event, generation) to wait for
    timeout: float = 0.0  # WAIT: wall seconds it may block before it fails with 107020 (0: never)
    consumed: int = 0  # RECORD: failures the host had taken from its stream when it was enqueued
    discarded: Callable[[], None] | None = None  # called when a stop or abort drops the task unrun
    native: bool = False  # HOST_FUNC: a C function that runs no Python (called on the stream's worker)


_FIELD_NAMES = frozenset(Task.__dataclass_fields__)
#: Kinds that run a body on an engine (everything else orders, waits or calls the host).
_WORK = frozenset({KERNEL, COPY, MEMSET})


def sync_task(kind: str, name: str, event: SimEvent, generation: int, *, inherit: bool = True) -> Task:
    """A record or wait task, made without the dataclass constructor (a replay makes dozens)."""
    # Only the fields that differ from their defaults are set: the others are read from the
    # class, where the dataclass keeps them.  Half the time of the constructor, and the
    # instance dict stays a shared-key one (about 240 bytes, against 830 for a copy of a
    # defaults dict, which a capture of a 20,000-node program makes 40,000 times).
    task = object.__new__(Task)
    task.kind = kind
    task.name = name
    task.event = event
    task.generation = generation
    task.snapshot = {}
    if not inherit:
        task.inherit = False
    return task


def kernel_task(name: str, run: Callable[[], None], seconds: float, cores: int,
                context: dict[str, Any]) -> Task:
    """A kernel task, made like :func:`sync_task` (a capture of a 20,000-node program makes
    one per node and slot)."""
    task = object.__new__(Task)
    task.kind = KERNEL
    task.name = name
    task.run = run
    task.seconds = seconds
    task.cores = cores
    task.context = context
    task.snapshot = {}
    return task


def bare_task(kind: str, name: str, **fields: Any) -> Task:
    """``Task(kind, name, **fields)`` made like :func:`sync_task` (a replay makes seven)."""
    task = object.__new__(Task)
    task.kind = kind
    task.name = name
    task.snapshot = {}
    for field_name, value in fields.items():
        if field_name not in _FIELD_NAMES:  # what the constructor would refuse
            raise TypeError(f"Task has no field {field_name!r}")
        setattr(task, field_name, value)
    return task


def describe_task(task: Task) -> str:
    """``kernel 'aclnnAdd' node=n3 op=Add run=7``: a task as error messages name it."""
    context = task.context or {}
    parts = [f"{task.kind} '{task.name}'"]
    for key in ("node", "op", "run"):
        if context.get(key) is not None:
            parts.append(f"{key}={context[key]}")
    return " ".join(parts)


class SimStream:
    """A simulated stream: an in-order queue run by its own worker thread (see the module
    docstring for failures, aborts and host functions)."""

    def __init__(self, backend: SimCore, name: str, priority: int):
        self.backend = backend
        self.name = name
        self.priority = priority
        self.destroyed = False
        self.enqueued = 0
        self.completed = 0
        self.skipped = 0
        self.error: BackendError | None = None
        self.mode = FailureMode.CONTINUE
        self.mode_set = False  # aclrtSetStreamFailureMode may be called once per stream
        self.stopped: BackendError | None = None  # the failure that stopped it (STOP mode)
        self.executed = 0  # tasks run (or discarded) so far, model parts' tasks one by one
        #: ``(executed before it, error)`` of every failure seen here, own or inherited through a
        #: wait: event records carry the first one after their previous record (``event_errors``).
        self.failures: list[tuple[int, BackendError]] = []
        # Each failure is logged here once: inherited again around a cycle of waits (a captured
        # model's fork and tails, replay after replay) it must not taint later records anew.
        self._logged: set[int] = set()
        self.consumed = 0  # failures[:consumed] were logged before the host last took this stream's error
        self.capture: Any = None  # the capture this stream is part of, if any
        self.update: Any = None  # an open task-group update (aclmdlRICaptureTaskUpdateBegin)
        self._discard_upto = 0  # tasks with index <= this are discarded, not run (stop, abort)
        self._waiting: SimEvent | None = None  # the event a WAIT blocks on (an abort wakes it)
        self._current_index = 0  # queue index of the entry being executed
        self._cond = threading.Condition()
        self._graph_context: dict[str, Any] | None = None  # run context of the part being executed
        self._graph_last: Task | None = None  # the part's last task
        self._counted = False  # the current queue entry was already counted as completed
        # The index of the last queue entry this stream is wholly done with: set after its count
        # and after the last of its state was reset (the count itself comes earlier, inside the
        # entry's last record, so that whoever sees the record done sees the stream past it).
        self._finished = 0
        self._queue: queue.SimpleQueue[Task | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=f"aclpipe-{name}", daemon=True)
        self._thread.start()

    @property
    def failure_mode(self) -> FailureMode:
        """The mode in force: STOP once any stream of the device was set to STOP (06_stream_management.md:
        "other streams of the context also stop on failure")."""
        return FailureMode.STOP if self.backend.stop_on_failure else self.mode

    # -- host side ---------------------------------------------------------------------------
    @property
    def graph_context(self) -> dict[str, Any] | None:
        """The run context of the model part this stream's worker is executing, if any."""
        return self._graph_context

    def check_submittable(self) -> None:
        """Refuse new work on a stream stopped by a failure (ACL_STOP_ON_FAILURE)."""
        stopped = self.stopped
        if stopped is not None:
            raise error_from_code(
                stopped.code, f"stream {self.name} stopped after a failure (ACL_STOP_ON_FAILURE): no new task may be "
                "submitted to it (06_stream_management.md); destroy it and create a new stream. The failure: "
                f"{stopped.detail}", {"stream": self.name})

    def submit(self, task: Task) -> None:
        with self._cond:
            self.check_submittable()
            self.enqueued += 1
            task.index = self.enqueued
        self._queue.put(task)

    def adopt(self, entry: Task) -> None:
        """Take ``entry`` (a model part) as this stream's next queue entry, to be run by the
        calling thread with :meth:`step` and finished with :meth:`release`: a captured model's
        replay run by the replaying stream's worker (see ``Captures._hand_over``).  The caller
        makes sure this stream's own worker is idle and gets nothing meanwhile."""
        assert entry.tasks
        with self._cond:
            self.check_submittable()
            self.enqueued += 1
            entry.index = self.enqueued
        self._counted = False
        self._current_index = entry.index
        self._graph_context = entry.context
        self._graph_last = entry.tasks[-1]

    def step(self, task: Task) -> None:
        """Run one task: a queue entry on this stream's worker, or one task of the adopted entry."""
        backend = self.backend
        if (task.kind in _WORK and backend.recorder is None and not backend.faults.planted
                and not backend.engines.timing and self._current_index > self._discard_upto):
            # The common case, what _execute and _run_work do for it without their two calls:
            # a kernel or copy with no trace, fault or timing model, not interrupted.  Every
            # launch of every run passes here, a replayed model's included.
            self.executed += 1
            try:
                task.run()  # type: ignore[misc]
            except BaseException as exc:  # noqa: BLE001 - as _run_work: the stream's failure, never the worker's
                self._work_failed(task, exc)
            return
        try:
            self._execute(task)
        except BaseException as exc:  # noqa: BLE001 - never let the worker die: the stream would hang
            self._fail(task, error_from_code(507000, f"simulator bug in {task.kind} task: {exc!r}"))

    def release(self) -> None:
        """Finish the adopted entry."""
        self._graph_context = None
        self._graph_last = None
        self._finish_entry()

    def _finish_entry(self) -> None:
        """The current queue entry is done: counted (if its last record did not count it), and
        only then marked finished (see :meth:`idle`)."""
        if not self._counted:
            self._count_done()
        self._finished = self._current_index

    def idle(self) -> bool:
        """Every entry submitted so far has finished, and the worker is done with the last one
        (not only counted it: it may still be returning from the record that counted it)."""
        return self._finished == self.enqueued

    def position(self) -> int:
        return self.enqueued

    def wait_position(self, target: int, timeout: float | None) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.completed >= target, timeout)

    def take_error(self) -> BackendError | None:
        """Return and clear the sticky error.  The host has now looked at this stream: failures
        logged so far are not carried by records enqueued from here on."""
        with self._cond:
            error, self.error = self.error, None
            self.consumed = len(self.failures)
            return error

    def host_thread(self) -> CallbackThread:
        """The device's host-function thread, started on first use (aclrtLaunchHostFunc creates
        the context's thread inside the first call): shared by every stream of the device."""
        return self.backend.host_thread()

    def abort(self) -> None:
        """``aclrtStreamAbort``: discard every task submitted so far and stop the one running
        (a wait, latch or hang is interrupted; a kernel finishes), then return."""
        with self._cond:
            self._discard_upto = self.enqueued
            target = self.enqueued
            waiting = self._waiting
        if waiting is not None:
            waiting.wake()
        self.wait_position(target, None)

    def stop(self) -> None:
        self._queue.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)

    # -- device side -------------------------------------------------------------------------
    def _loop(self) -> None:
        ignore_fp_errors_on_this_thread()  # kernels make inf and nan as data; see aclpipe.ops.fp_errors
        while True:
            task = self._queue.get()
            if task is None:
                return
            self._counted = False
            self._current_index = task.index
            self.step(task)
            self._finish_entry()

    def interrupted(self) -> bool:
        """Whether the current queue entry was discarded by an abort or a stop."""
        return self._current_index <= self._discard_upto

    def _last_of_entry(self, task: Task) -> bool:
        """Whether finishing ``task`` finishes the queue entry it belongs to."""
        return self._graph_last is None or task is self._graph_last

    def _count_done(self) -> None:
        with self._cond:
            self.completed += 1
            self._counted = True
            self._cond.notify_all()

    def _fail(self, task: Task, error: BackendError) -> None:
        context = {**(task.context or {}), **(self._graph_context or {})}
        context.setdefault("task", task.name)
        context["stream"] = self.name
        if not error.context:
            error.context.update(context)
            error.args = (error._message(),)
        for allocation, address, nbytes in task.writes:
            if allocation.alive:  # the failed task's outputs are garbage for whoever reads them next
                offset = address - allocation.start
                allocation.data[offset:offset + nbytes] = POISON_BYTE
        with self._cond:
            self._log(error)
            if self.error is None:
                self.error = error
            if self.failure_mode == FailureMode.STOP and self.stopped is None:
                # 06_stream_management.md: stop executing later tasks; refuse new ones.
                self.stopped = error
                self._discard_upto = self.enqueued

    def _inherit(self, task: Task, error: BackendError) -> None:
        """A waited record carried a failure: later records here carry it too."""
        with self._cond:
            self._log(error)

    def _log(self, error: BackendError) -> None:
        if id(error) not in self._logged:
            self._logged.add(id(error))
            self.failures.append((self.executed - 1, error))

    def _execute(self, task: Task) -> None:
        kind = task.kind
        if kind != GRAPH:
            self.executed += 1
        recorder = self.backend.recorder
        if recorder is None or kind == GRAPH:  # a part's own tasks are recorded one by one
            if kind in _WORK and self._current_index > self._discard_upto:
                self._run_work(task)  # the common case first: a kernel or a copy, not interrupted
            else:
                self._run_task(task)
            return
        clock = self.backend.engines
        queued, skipped, failures = clock.now(), self.skipped, len(self.failures)
        task.began = None  # a replayed part reuses its tasks: forget the last replay's stamp
        self._run_task(task)
        status = "skipped" if self.skipped > skipped else "failed" if len(self.failures) > failures else "ok"
        context = {**(task.context or {}), **(self._graph_context or {})}
        recorder.add(self, task, context, queued, clock.now(), status)

    def _discard(self, task: Task) -> None:
        """Drop a task the stream will never run; a record's waiters stay blocked."""
        self.skipped += 1
        for sub in task.tasks or ():
            self._discard(sub)
        if task.kind == RECORD and task.event is not None:
            task.event.discard(task.generation)
        if task.discarded is not None:
            task.discarded()

    def _run_task(self, task: Task) -> None:
        if self.interrupted():
            self._discard(task)
            return
        if task.kind == GRAPH:
            self._run_part(task)
        elif task.kind == WAIT:
            self._run_wait(task)
        elif task.kind == RECORD:
            self._run_record(task)
        elif task.kind == HOST_FUNC:
            self._run_host_func(task)
        elif task.kind == LATCH:
            assert task.latch is not None
            # Polled, not only woken: an abort may come between the check and the wait.
            while not task.latch.wait(0.02) and not self.interrupted():
                pass
        elif task.kind == CONTROL:
            assert task.run is not None
            task.run()
        else:
            self._run_work(task)

    def _run_part(self, task: Task) -> None:
        assert task.tasks is not None
        # A model part's tasks share its run context and its queue entry.
        self._graph_context = task.context
        self._graph_last = task.tasks[-1] if task.tasks else None
        try:
            for sub in task.tasks:
                self._execute(sub)
        finally:
            self._graph_context = None
            self._graph_last = None

    def _run_wait(self, task: Task) -> None:
        assert task.event is not None
        for event, generation in [(task.event, task.generation), *(task.joins or ())]:
            self._waiting = event
            try:
                done = event.wait_done(generation, task.timeout or None, interrupted=self.interrupted)
            finally:
                self._waiting = None
            if not done and task.timeout and not self.interrupted():
                self._fail(task, wait_timed_out(event))
                return
            if not done:  # aborted while blocked
                self.skipped += 1
                return
            error = event.error_of(generation)
            if error is None:
                continue
            if task.adopt_error:
                self._fail(task, error)
            elif task.inherit:
                self._inherit(task, error)

    def _run_record(self, task: Task) -> None:
        event = task.event
        assert event is not None
        error = event.taint_since(self.name, self.executed - 1, self.failures[task.consumed:])
        if self._last_of_entry(task):
            # Whoever sees the event done must also see the stream past it, as on the device.
            self._count_done()
        event.complete(task.generation, self.backend.engines.now(), error)

    def _run_host_func(self, task: Task) -> None:
        assert task.run is not None
        backend = self.backend
        if backend.sanitizer is not None:
            # Everything before a host function is done when it runs, and whoever sees its
            # effects (a counter, a flag) is ordered after it: the host learns it first.
            backend.sanitizer.host_learns(task.snapshot)
        if task.native:
            # A C function (aclpipe's completion helper) cannot observe which host thread runs
            # it, cannot raise and cannot synchronize: the stream's worker stands for the
            # device's callback thread, one thread hop sooner, and like it runs one host
            # function of the device at a time.
            self.host_thread().run_native(task.run)
            return
        raised = self.host_thread().call(task.run)
        if raised is not None:
            error = raised if isinstance(raised, BackendError) else error_from_code(
                507000, f"host function {task.name} raised {raised!r}")
            if error is not raised:
                error.__cause__ = raised
            self._fail(task, error)

    def _run_work(self, task: Task) -> None:
        backend = self.backend
        try:
            if backend.faults.planted and backend.run_faults(task, self):
                return
            if backend.engines.timing:
                backend.execute(task)
            else:  # what execute does without the timing model, one call sooner (every kernel runs here)
                task.run()  # type: ignore[misc]
        except Exception as exc:  # noqa: BLE001 - a kernel's bug is the stream's fault, as on the device
            self._work_failed(task, exc)

    def _work_failed(self, task: Task, exc: BaseException) -> None:
        """A kernel or copy raised: a device error fails the stream as it is, anything else as
        507015 (a kernel's bug is the stream's fault, as on the device)."""
        if isinstance(exc, BackendError):
            self._fail(task, exc)
        elif isinstance(exc, Exception):
            failure = error_from_code(507015, f"{task.kind} {task.name} raised {exc!r}")
            failure.__cause__ = exc
            self._fail(task, failure)
        else:  # KeyboardInterrupt, SystemExit: as step() reports anything that escapes a task
            self._fail(task, error_from_code(507000, f"simulator bug in {task.kind} task: {exc!r}"))
