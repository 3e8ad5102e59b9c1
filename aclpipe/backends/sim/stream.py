"""Simulated streams: one worker thread each, running its queue in order.

Streams really run concurrently: numpy kernels release the GIL, and with the timing model
on, tasks sleep for their modelled time while holding their engine.

Errors are sticky, as on the device.  A task that fails marks its *generation* failed;
later tasks of that generation are skipped (kernels, copies, memsets), while event records
still complete, carrying the error to any stream that waits on them, and host functions
still run, so whoever waits for completion hears about it.  Consuming the error (``sync``,
``query`` or ``take_error``) starts a new generation: tasks enqueued from then on run
normally, tasks enqueued before stay skipped, so a run is never half-executed.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...errors import BackendError, error_from_code
from .event import SimEvent
from .sanitizer import Clock

if TYPE_CHECKING:
    from .backend import SimBackend

__all__ = ["SimStream", "Task"]

KERNEL, COPY, MEMSET, RECORD, WAIT, HOST_FUNC, LATCH, GRAPH = (
    "kernel", "copy", "memset", "record", "wait", "host_func", "latch", "graph")


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
    gen: int = 0  # the stream's error generation at enqueue
    tasks: list[Task] | None = None  # GRAPH: the stream's part of a replayed graph
    began: float | None = None  # device time it got its engine; set only while a trace records


class SimStream:
    """A simulated stream: an in-order queue run by its own worker thread, with sticky errors
    per generation (see the module docstring)."""
    def __init__(self, backend: SimBackend, name: str, priority: int):
        self.backend = backend
        self.name = name
        self.priority = priority
        self.destroyed = False
        self.enqueued = 0
        self.completed = 0
        self.skipped = 0
        self.error: BackendError | None = None
        self._gen = 0
        # The first error of each failed generation: a record of that generation carries it even
        # after the host consumed the stream's sticky error, so waiters still inherit the failure.
        self._failed_gens: dict[int, BackendError] = {}
        self._cond = threading.Condition()
        self._graph_context: dict[str, Any] | None = None  # run context of the replay being executed
        self._graph_last: Task | None = None  # the replay's last task
        self._counted = False  # the current queue entry was already counted as completed
        self._queue: queue.SimpleQueue[Task | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=f"aclpipe-{name}", daemon=True)
        self._thread.start()

    # -- host side ---------------------------------------------------------------------------
    def submit(self, task: Task) -> None:
        with self._cond:
            task.gen = self._gen
            self.enqueued += 1
        self._queue.put(task)

    def position(self) -> int:
        return self.enqueued

    def wait_position(self, target: int, timeout: float | None) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.completed >= target, timeout)

    def take_error(self) -> BackendError | None:
        with self._cond:
            error, self.error = self.error, None
            if error is not None:
                self._gen += 1
            return error

    def stop(self) -> None:
        self._queue.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)

    # -- device side -------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            task = self._queue.get()
            if task is None:
                return
            self._counted = False
            try:
                self._execute(task)
            except BaseException as exc:  # noqa: BLE001 - never let the worker die: the stream would hang
                self._fail(task, error_from_code(507000, f"simulator bug in {task.kind} task: {exc!r}"))
            if not self._counted:
                self._count_done()

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
        with self._cond:
            if task.gen in self._failed_gens:
                return
            self._failed_gens[task.gen] = error
            if self.error is None:
                self.error = error
            for old in [g for g in self._failed_gens if g < task.gen - 16]:
                del self._failed_gens[old]

    def _failed(self, task: Task) -> bool:
        return task.gen in self._failed_gens

    def _execute(self, task: Task) -> None:
        recorder = self.backend.recorder
        if recorder is None or task.kind == GRAPH:  # a graph's own tasks are recorded one by one
            self._run_task(task)
            return
        clock = self.backend.engines
        queued, skipped, failed = clock.now(), self.skipped, task.gen in self._failed_gens
        task.began = None  # a replayed graph reuses its tasks: forget the last replay's stamp
        self._run_task(task)
        status = "skipped" if self.skipped > skipped else \
            "failed" if not failed and task.gen in self._failed_gens else "ok"
        context = {**(task.context or {}), **(self._graph_context or {})}
        recorder.add(self, task, context, queued, clock.now(), status)

    def _run_task(self, task: Task) -> None:
        backend = self.backend
        if task.kind == GRAPH:
            assert task.tasks is not None
            # A replayed graph's tasks share its generation and its run context.
            self._graph_context = task.context
            self._graph_last = task.tasks[-1] if task.tasks else None
            try:
                for sub in task.tasks:
                    sub.gen = task.gen
                    self._execute(sub)
            finally:
                self._graph_context = None
                self._graph_last = None
            return
        if task.kind == WAIT:
            assert task.event is not None
            task.event.wait_done(task.generation)
            error = task.event.error_of(task.generation)
            if error is not None and not self._failed(task):
                self._fail(task, error)
            return
        if task.kind == RECORD:
            assert task.event is not None
            error = self._failed_gens.get(task.gen)
            if self._last_of_entry(task):
                # Whoever sees the event done must also see the stream past it, as on the device.
                self._count_done()
            task.event.complete(task.generation, backend.engines.now(), error)
            return
        if task.kind == HOST_FUNC:
            assert task.run is not None
            if backend.sanitizer is not None:
                # Everything before a host function is done when it runs, and whoever sees its
                # effects (a counter, a flag) is ordered after it: the host learns it first.
                backend.sanitizer.host_learns(task.snapshot)
            raised = backend.callbacks.call(task.run)
            if raised is not None and not self._failed(task):
                error = error_from_code(507000, f"host function {task.name} raised {raised!r}")
                error.__cause__ = raised
                self._fail(task, error)
            return
        if task.kind == LATCH:
            assert task.latch is not None
            task.latch.wait()
            return
        if self._failed(task):
            self.skipped += 1
            return
        if backend.run_faults(task, self):
            return
        try:
            backend.execute(task)
        except BackendError as error:
            self._fail(task, error)
        except Exception as exc:  # noqa: BLE001 - a kernel's bug is the stream's fault, as on the device
            failure = error_from_code(507015, f"{task.kind} {task.name} raised {exc!r}")
            failure.__cause__ = exc
            self._fail(task, failure)
