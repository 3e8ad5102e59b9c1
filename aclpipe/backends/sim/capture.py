"""Graph capture the way CANN does it: model runtime instances (``aclmdlRI``).

Rules, from ``hicann/runtime`` ``docs/zh/api_ref/15_model_running_instance__management.md``,
the error table ``25-01_aclError.md`` and the ACL Graph design notes
(``docs/zh/design/features/aclgraph.md``):

- ``aclmdlRICaptureBegin(stream, mode)`` puts one *origin* stream into capture; tasks then
  submitted to it are stored in the model, not executed.  A stream already capturing is
  refused (ACL_ERROR_RT_STREAM_CAPTURED).  Products without capture refuse it
  (ACL_ERROR_RT_FEATURE_NOT_SUPPORT).
- Other streams join through events: a stream that waits on an event recorded inside the
  capture enters it ("more streams enter the capture state through event derivation").  A
  wait inside a capture on an event recorded outside it has no captured record
  (ACL_ERROR_RT_CAPTURE_DEPENDENCY); an event of another capture conflicts
  (ACL_ERROR_STREAM_CAPTURE_CONFLICT).
- ``aclmdlRICaptureEnd`` must name the origin (ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED
  otherwise), on the thread that began it unless the mode is RELAXED
  (ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD); every joined stream must have rejoined the
  origin through a record the origin's end depends on (ACL_ERROR_RT_STREAM_UNJOINED).
- Synchronizing or querying a capturing stream, or an event recorded inside the capture, is
  refused before anything is done (ACL_ERROR_RT_STREAM_CAPTURED, ACL_ERROR_RT_EVENT_CAPTURED:
  ``api_error.cc``) and the capture goes on; a device synchronize invalidates it, and its end
  then fails with ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED.
- Once the capture ended, a sync of an event whose latest record went into the model is
  refused with ACL_ERROR_RT_PARAM_INVALID (``Event::IsEventInModel``) until it is recorded
  outside again.  The default stream cannot be captured (``aclmdlRICaptureBeginImpl``:
  ACL_ERROR_INVALID_PARAM for a NULL stream).
- While a capture is open, synchronous copies and memsets are refused with
  ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT when its mode says so
  (:meth:`Captures.check_blocking_call`: ``Context::IsCaptureModeSupport``).
- Host functions are not capturable here (no page documents them inside a model; the
  stricter choice): ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT.
- ``aclmdlRICaptureGetInfo`` reports NONE, ACTIVE or INVALIDATED and the model.
- ``aclmdlRIExecuteAsync(model, stream)`` replays the whole model with one call on one
  stream: it starts after the stream's earlier work and the stream's later work waits for
  all of it.  The model's streams are its own (captured streams "consume stream
  resources"), so replays of one model run one after another.  Records inside a model
  synchronize the model only; they do not record the user's events outside it.  The host
  submits one task, to the replaying stream; when that stream reaches it, the device hands
  each model stream its part (in the order the replays were submitted), as the runtime
  launches a model from the device side: the host never wakes the model's streams itself.
  When nothing else of the model is in flight (and the timing model is off), the replaying
  stream's worker runs the parts itself, in capture order, with each model stream's own
  bookkeeping: the same results and failures without waking a thread per model stream
  (see ``Captures._hand_over``).  The records and waits a model holds between its own
  streams only order them (none passes a failure on), so such a replay skips them, and a
  replay's own records and waits are made when its parts are handed to the model's streams,
  not when it is submitted.  The sanitizer checks the first replay task by task, later ones
  only where they meet the world outside the model (:mod:`.replay_summary`).
- ``aclmdlRICaptureTaskGrpBegin/End`` on a capturing stream mark single-op tasks that may
  change (anything else: ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT; nesting or unpaired calls:
  ACL_ERROR_STREAM_TASK_GROUP_STATUS); ``aclmdlRICaptureTaskUpdateBegin/End`` on a stream
  *not* capturing take as many tasks of the same types and replace the group's, in that
  stream's order ("returning does not mean the update is done").
- ``aclmdlRIDestroy`` of a model whose replay may still run is refused (ACL_ERROR_RT_MODEL_RUNNING).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...errors import BackendError, error_from_code
from ..protocol import CaptureMode, CaptureStatus
from .event import SimEvent
from .memory import Region
from .replay_summary import ReplaySummary
from .sanitizer import Clock, Sanitizer
from .stream import CONTROL, GRAPH, KERNEL, RECORD, WAIT, SimStream, Task, bare_task, describe_task, sync_task

if TYPE_CHECKING:
    from .core import SimCore

__all__ = ["CaptureMode", "CaptureSession", "CaptureStatus", "Captures", "SimModel", "TaskGroup"]


@dataclass(eq=False, slots=True)
class Captured:
    """One task stored in a model, with the regions the sanitizer checks at each replay."""

    stream: SimStream
    task: Task
    reads: tuple[Region, ...] = ()
    writes: tuple[Region, ...] = ()
    padding: tuple[Region, ...] = ()
    #: A conditional task's sub-models' tasks, and what checks them after it at each replay
    #: (:mod:`.conditional`).
    nested: tuple[Captured, ...] = ()
    check_nested: Callable[[str, str], None] | None = None


@dataclass(eq=False)
class TaskGroup:
    """``aclrtTaskGrp``: captured single-op tasks an update may replace."""

    items: list[Captured]
    updating: bool = False


@dataclass(eq=False)
class SimModel:
    """``aclmdlRI``: a captured model, replayed by :meth:`Captures.execute`."""

    name: str
    items: list[Captured] = field(default_factory=list)
    ready: bool = False  # capture ended successfully
    destroyed: bool = False
    streams: dict[SimStream, SimStream] = field(default_factory=dict)  # captured stream -> the model's own
    shadows: dict[SimEvent, SimEvent] = field(default_factory=dict)  # user event -> the model's own
    start: SimEvent | None = None
    ends: dict[SimStream, SimEvent] = field(default_factory=dict)  # model stream -> its end event
    replays: dict[SimEvent, int] = field(default_factory=dict)  # end event -> its newest replay's record
    #: Per model stream, its part in capture order: a replay without the sanitizer copies the lists.
    templates: dict[SimStream, list[Task]] = field(default_factory=dict)
    #: Where the parts' records and waits sit (replaced by fresh ones at each replay):
    #: ``(model stream, position, kind, name, shadow, record number)``, where a record takes the
    #: next of this replay's record numbers and a wait the number of the latest record of its
    #: shadow before it in capture order; ``recorded`` lists the shadow of each record number
    #: (a replay begins their records in that order).
    renewals: list[tuple[SimStream, int, str, str, SimEvent, int]] = field(default_factory=list)
    recorded: list[SimEvent] = field(default_factory=list)
    #: Every captured task as (its part's number in ``streams`` order, its position in the part),
    #: in capture order: an order in which the parts can run one task at a time on one thread
    #: (a captured wait always follows the record it waits for).
    order: list[tuple[int, int]] = field(default_factory=list)
    #: ``order`` without the records and waits: what a replay run by one thread, in capture
    #: order, must run (every record and wait inside a model only orders the model's streams,
    #: which capture order already does; none passes a failure on: see ``Captures._replayed``).
    work_order: list[tuple[int, int]] = field(default_factory=list)
    #: Held while a replay's parts are handed over (or run): hand-overs of one model never overlap.
    handing: threading.Lock = field(default_factory=threading.Lock)
    #: Replays submitted whose parts the model's streams do not have yet, oldest first.
    pending: list[_Parts] = field(default_factory=list)
    #: What a sanitized replay checks, once the first one proved the model's own ordering.
    summary: ReplaySummary | None = None

    @property
    def size(self) -> int:
        return len(self.items)

    def running(self) -> bool:
        """Whether a replay may still run (a model's streams run its replays in order)."""
        return any(not event.is_done(generation) for event, generation in self.replays.items())


@dataclass(eq=False)
class _Parts:
    """One replay's part for each model stream, handed over when the replaying stream starts it."""

    parts: list[tuple[SimStream, Task]]
    #: False while the parts still hold the captured records and waits where this replay's
    #: own go (made by ``_renew`` when the parts are handed to the model's streams; a replay
    #: run by one thread needs none of them).
    renewed: bool = False


@dataclass(eq=False)
class CaptureSession:
    """One ``aclmdlRICaptureBegin`` .. ``aclmdlRICaptureEnd``."""

    origin: SimStream
    mode: CaptureMode
    thread: int
    model: SimModel
    streams: list[SimStream] = field(default_factory=list)
    status: CaptureStatus = CaptureStatus.ACTIVE
    why: str = ""  # what invalidated it
    recorded: set[SimEvent] = field(default_factory=set)
    groups: dict[SimStream, list[Captured]] = field(default_factory=dict)  # open task groups

    def invalidate(self, why: str) -> None:
        if self.status == CaptureStatus.ACTIVE:
            self.status = CaptureStatus.INVALIDATED
            self.why = why


@dataclass(eq=False)
class _Update:
    group: TaskGroup
    items: list[Captured] = field(default_factory=list)


class Captures:
    """The captures, models and task groups of one simulated device."""

    def __init__(self, backend: SimCore):
        self.backend = backend
        self.active: list[CaptureSession] = []
        self._names = itertools.count()
        self._lock = threading.RLock()
        #: Task group updates so far: an update changes a model's regions, so a summary made
        #: before one is made again (``_sanitize``).
        self.updates = 0

    def _check_supported(self) -> None:
        if not self.backend.spec.graph_capture:
            raise error_from_code(207000, f"{self.backend.spec.name} has no model capture: aclmdlRICaptureBegin is "
                                          "not supported on this product (15_model_running_instance__management.md)")

    # -- capture ---------------------------------------------------------------------------
    def begin(self, stream: SimStream, mode: CaptureMode, model: SimModel | None = None) -> None:
        """``aclmdlRICaptureBegin``; into ``model`` (a conditional task's sub-model, see
        :mod:`.conditional`) for ``aclmdlRICaptureToModelRIBegin``."""
        self._check_supported()
        mode = CaptureMode(mode)
        with self._lock:
            if stream.capture is not None:
                raise error_from_code(107027, f"stream {stream.name} is already being captured; end that capture "
                                              "first (aclmdlRICaptureEnd)")
            model = SimModel(f"ri{next(self._names)}") if model is None else model
            session = CaptureSession(stream, mode, threading.get_ident(), model, [stream])
            stream.capture = session
            self.active.append(session)

    def check_blocking_call(self, what: str) -> None:
        """Refuse a synchronous copy or memset while an open capture forbids it, as
        ``Context::IsCaptureModeSupport`` (``src/runtime/feature/aclgraph/context_aclgraph.cc``)
        decides for ``ApiImpl::MemCopySync`` and ``::MemSetSync`` (``api_impl.cc``), with the
        calling thread in the default (GLOBAL) exchange mode: any GLOBAL capture open on the
        device, from any thread, or a THREAD_LOCAL one this thread began; RELAXED ones never.
        The refusal is ``RT_ERROR_STREAM_CAPTURE_MODE_NOT_SUPPORT``, 107030."""
        me = threading.get_ident()
        with self._lock:
            for session in self.active:
                if session.mode == CaptureMode.GLOBAL or (session.mode == CaptureMode.THREAD_LOCAL
                                                          and session.thread == me):
                    raise error_from_code(107030, f"{what} while a {session.mode.name} capture is open on stream "
                                                  f"{session.origin.name}: the runtime refuses synchronous copies "
                                                  "and memsets then (Context::IsCaptureModeSupport); copy "
                                                  "asynchronously from pinned memory on a stream outside the "
                                                  "capture, or capture in RELAXED mode")

    def get_info(self, stream: SimStream) -> tuple[CaptureStatus, SimModel | None]:
        session = stream.capture
        if session is None:
            return CaptureStatus.NONE, None
        return session.status, session.model

    def end(self, stream: SimStream) -> SimModel:
        with self._lock:
            session = stream.capture
            if session is None:
                raise error_from_code(107029, f"stream {stream.name} is not being captured (aclmdlRICaptureBegin)")
            if session.origin is not stream:
                raise error_from_code(107036, f"stream {stream.name} joined a capture begun on {session.origin.name}; "
                                              "end it on that stream")
            if session.mode != CaptureMode.RELAXED and session.thread != threading.get_ident():
                raise error_from_code(107038, "aclmdlRICaptureEnd must run on the thread that called "
                                              "aclmdlRICaptureBegin unless the mode is RELAXED")
            self._leave(session)
            if session.status == CaptureStatus.INVALIDATED:
                raise error_from_code(507903, f"the capture on {stream.name} was invalidated: {session.why}")
            if session.groups:
                raise error_from_code(107033, "a task group is still open (aclmdlRICaptureTaskGrpEnd missing)")
            self._check_joined(session)
            return self._build(session)

    def _leave(self, session: CaptureSession) -> None:
        for member in session.streams:
            member.capture = None
        for event in session.recorded:
            if event.capture is session:
                event.capture = None  # the capture's records stay inside the model
                event.in_model = session.model  # a sync of it is refused (Event::IsEventInModel)
        self.active.remove(session)

    @staticmethod
    def _check_joined(session: CaptureSession) -> None:
        """Every joined stream must end with a record that the origin's last task depends on."""
        items = session.model.items
        last: dict[SimStream, int] = {}
        following: dict[int, int] = {}  # position -> the next position on the same stream
        waiters: dict[int, list[int]] = {}  # record position -> positions of the waits on it
        latest: dict[SimEvent, int] = {}
        for position, item in enumerate(items):  # one pass per capture, over every task of it
            previous = last.get(item.stream)
            if previous is not None:
                following[previous] = position
            last[item.stream] = position
            task = item.task
            event = task.event
            if event is None:
                continue
            if task.kind == RECORD:
                latest[event] = position
            elif task.kind == WAIT:
                recorded = latest.get(event)
                if recorded is not None:
                    waiters.setdefault(recorded, []).append(position)
        end = last.get(session.origin)
        reaches = [False] * len(items)
        for position in range(len(items) - 1, -1, -1):  # every edge points forward in capture order
            nxt = following.get(position)
            if position == end or (nxt is not None and reaches[nxt]):
                reaches[position] = True
            else:
                waits = waiters.get(position)
                reaches[position] = waits is not None and any(reaches[w] for w in waits)
        unjoined = [stream.name for stream, position in last.items() if stream is not session.origin
                    and not (items[position].task.kind == RECORD and reaches[position])]
        if unjoined:
            raise error_from_code(107025, f"streams {unjoined} joined the capture on {session.origin.name} but their "
                                          "last task is not an event record the origin waits on; record an event "
                                          "there and make the origin wait on it before aclmdlRICaptureEnd")

    def _build(self, session: CaptureSession) -> SimModel:
        backend, model = self.backend, session.model
        streams, shadows = model.streams, model.shadows
        for item in model.items:
            if item.stream not in streams:
                streams[item.stream] = backend.model_stream(f"{model.name}:{item.stream.name}")
            event = item.task.event
            if event is not None and event not in shadows:
                shadows[event] = SimEvent(f"{model.name}:{event.name}", False)
        # Per captured stream: its model stream, its number and its part (one pass over the tasks).
        lanes = {captured: (inner, number, model.templates.setdefault(inner, []))
                 for number, (captured, inner) in enumerate(streams.items())}
        latest: dict[SimEvent, int] = {}  # shadow -> the number of its latest record so far
        for item in model.items:  # capture order: a wait follows the record it waits for
            inner, number, part = lanes[item.stream]
            task = item.task
            if task.kind in (RECORD, WAIT):
                assert task.event is not None
                shadow = shadows[task.event]
                if task.kind == RECORD:
                    latest[shadow] = len(model.recorded)
                    model.recorded.append(shadow)
                model.renewals.append((inner, len(part), task.kind, task.name, shadow, latest[shadow]))
            else:
                model.work_order.append((number, len(part) + 1))
            model.order.append((number, len(part) + 1))  # a part starts with the wait for the start
            part.append(task)
        model.start = SimEvent(f"{model.name}:start", False)
        model.ends = {inner: SimEvent(f"{model.name}:end:{inner.name}", False) for inner in model.streams.values()}
        model.ready = True
        return model

    # -- while capturing -------------------------------------------------------------------
    def add(self, stream: SimStream, task: Task, reads: Sequence[Region] = (), writes: Sequence[Region] = (),
            padding: Sequence[Region] = ()) -> None:
        """Store a task submitted to a capturing stream (``stream.capture`` is set)."""
        session = stream.capture
        assert session is not None
        item = Captured(stream, task, tuple(reads), tuple(writes), tuple(padding))
        group = session.groups.get(stream)
        if group is not None:
            if task.kind != KERNEL:
                raise error_from_code(507009, "only single-op tasks may be captured in a task group, got a "
                                              f"{task.kind} (aclmdlRICaptureTaskGrpBegin)")
            group.append(item)
        session.model.items.append(item)

    def record(self, stream: SimStream, event: SimEvent) -> None:
        session = stream.capture
        assert session is not None
        if event.capture is not None and event.capture is not session:
            raise error_from_code(107032, f"event {event.name} is being recorded in another capture")
        event.capture = session
        session.recorded.add(event)
        self.add(stream, Task(RECORD, f"record {event.name}", event=event))

    def wait(self, stream: SimStream, event: SimEvent) -> bool:
        """Handle a wait that involves a capture; False when it is an ordinary wait."""
        session, source = stream.capture, event.capture
        if source is None:
            if session is None:
                return False
            raise error_from_code(107024, f"stream {stream.name} is being captured but event {event.name} has no "
                                          "record inside the capture; record it in the capture (waits on outside "
                                          "events need ACL_EVENT_WAIT_EXTERNAL, which aclpipe does not use)")
        if session is None:
            with self._lock:
                stream.capture = source  # joins the capture through the event (15_...: event derivation)
                source.streams.append(stream)
            session = source
        elif session is not source:
            raise error_from_code(107032, f"event {event.name} belongs to the capture on {source.origin.name}, "
                                          f"stream {stream.name} to the one on {session.origin.name}")
        self.add(stream, Task(WAIT, f"wait {event.name}", event=event))
        return True

    def forbid(self, session: CaptureSession, code: int, what: str) -> None:
        """A forbidden call inside a capture: invalidate it and raise."""
        session.invalidate(what)
        raise error_from_code(code, f"{what} inside the capture begun on {session.origin.name}; the capture is "
                                    "invalidated (aclmdlRICaptureEnd will fail): synchronize before "
                                    "aclmdlRICaptureBegin or after aclmdlRICaptureEnd")

    @staticmethod
    def refuse(session: CaptureSession, code: int, what: str) -> None:
        """A call the runtime's parameter check refuses during a capture before doing anything:
        raise, and leave the capture as it is (it may still end and replay).

        ``ApiErrorDecorator::StreamSynchronize``/``::StreamQuery`` (107027, the stream is
        captured) and ``::EventSynchronize``/``::EventQueryStatus`` (107028, the event is
        captured) in ``src/runtime/api/impl/api_error.cc`` return before reaching the stream."""
        raise error_from_code(code, f"{what} inside the capture begun on {session.origin.name} (the runtime refuses "
                                    "it and the capture goes on); synchronize before aclmdlRICaptureBegin or after "
                                    "aclmdlRICaptureEnd")

    def forbid_device_sync(self) -> None:
        if self.active:
            for session in list(self.active):
                session.invalidate("a device synchronize")
            self.forbid(self.active[0], 107041, "a device synchronize")

    # -- task groups -------------------------------------------------------------------------
    def group_begin(self, stream: SimStream) -> None:
        session = stream.capture
        if session is None:
            raise error_from_code(107029, f"stream {stream.name} is not being captured: task groups are marked "
                                          "inside a capture (aclmdlRICaptureTaskGrpBegin)")
        if stream in session.groups:
            raise error_from_code(107033, f"a task group is already open on stream {stream.name}")
        session.groups[stream] = []

    def group_end(self, stream: SimStream) -> TaskGroup:
        session = stream.capture
        if session is None or stream not in session.groups:
            raise error_from_code(107033, f"no task group is open on stream {stream.name} "
                                          "(aclmdlRICaptureTaskGrpBegin first)")
        return TaskGroup(session.groups.pop(stream))

    def update_begin(self, stream: SimStream, group: TaskGroup) -> None:
        if not isinstance(group, TaskGroup):
            raise error_from_code(107017, f"{group!r} is not a task group")
        if stream.capture is not None:
            raise error_from_code(107027, f"stream {stream.name} is being captured; updates go on a stream that is not "
                                          "(aclmdlRICaptureTaskUpdateBegin)")
        if getattr(stream, "update", None) is not None or group.updating:
            raise error_from_code(107033, "an update is already open on this stream or this task group")
        group.updating = True
        stream.update = _Update(group)

    def update_add(self, stream: SimStream, task: Task, reads: Sequence[Region], writes: Sequence[Region],
                   padding: Sequence[Region]) -> None:
        if task.kind != KERNEL:
            raise error_from_code(507009, f"only single-op tasks may update a task group, got a {task.kind}")
        stream.update.items.append(Captured(stream, task, tuple(reads), tuple(writes), tuple(padding)))

    def update_end(self, stream: SimStream) -> None:
        update: _Update | None = getattr(stream, "update", None)
        if update is None:
            raise error_from_code(107033, f"no update is open on stream {stream.name} "
                                          "(aclmdlRICaptureTaskUpdateBegin first)")
        stream.update = None
        update.group.updating = False
        self.updates += 1
        old, new = update.group.items, update.items
        if len(old) != len(new):
            raise error_from_code(107000, f"the update has {len(new)} tasks, the task group {len(old)}: they must "
                                          "match in number and type (aclmdlRICaptureTaskUpdateBegin)")
        for item, replacement in zip(old, new, strict=True):
            # Regions at once (the sanitizer checks replays at enqueue); the task itself when the
            # stream reaches the update, as the asynchronous update does.
            item.reads, item.writes, item.padding = replacement.reads, replacement.writes, replacement.padding
        pairs = [(item.task, replacement.task) for item, replacement in zip(old, new, strict=True)]
        self.backend.submit_control(stream, "task group update", lambda: _swap(pairs))

    # -- replay ------------------------------------------------------------------------------
    def execute(self, model: SimModel, stream: SimStream, context: Mapping[str, Any] | None) -> None:
        if not isinstance(model, SimModel) or not model.ready:
            raise error_from_code(107000, f"{model!r} is not a captured model runtime instance")
        if model.destroyed:
            raise error_from_code(107000, f"model {model.name} was destroyed (aclmdlRIDestroy)")
        if stream.capture is not None:
            raise error_from_code(107027, f"stream {stream.name} is being captured; replay the model outside the "
                                          "capture")
        with self._lock:
            self._replay(model, stream, dict(context or {}))

    def _replay(self, model: SimModel, stream: SimStream, context: dict[str, Any]) -> None:
        """Enqueue one replay: ``stream``'s position starts every model stream's part, and
        ``stream`` waits for all of them.  One queue entry on ``stream``, which hands the model's
        streams their parts when it gets there.  Everything is checked (the sanitizer included)
        before anything is enqueued."""
        assert model.start is not None
        stream.check_submittable()
        for inner in model.streams.values():
            inner.check_submittable()
        backend = self.backend
        sanitizer = backend.sanitizer
        start_clock = sanitizer.snapshot(stream.name) if sanitizer else {}
        start = model.start.begin_record(start_clock)
        # The model's streams fail on their own tasks only; the replaying stream adopts their
        # failures (so they do not bounce back into the next replay's start).
        begin = f"start {model.name}"
        parts = {inner: [sync_task(WAIT, begin, model.start, start, inherit=False)] for inner in model.streams.values()}
        # With the sanitizer: each model stream's clock at its end and their merge, when a
        # summary checked the replay (otherwise each model stream's clock is read here).
        ends: tuple[dict[str, Clock], Clock] | None = None
        try:
            if sanitizer is not None:
                ends = self._sanitize(model, sanitizer, stream.name, start_clock,
                                      f" run={context['run']}" if "run" in context else "")
        except BaseException:
            model.start.complete(start, backend.engines.now(), None)  # nothing was enqueued
            raise
        # Each part is a copy of its template; its records and waits are renewed at hand-over.
        for inner, template in model.templates.items():
            parts[inner].extend(template)
        joins: list[tuple[SimEvent, int]] = []
        finish = f"end {model.name}"
        for inner, end in model.ends.items():
            end_clock = ends[0][inner.name] if ends else sanitizer.snapshot(inner.name) if sanitizer else {}
            generation = end.begin_record(end_clock)
            parts[inner].append(sync_task(RECORD, finish, end, generation))
            joins.append((end, generation))
            model.replays[end] = generation
        # On the replaying stream, one queue entry: the start, then one wait for every model
        # stream's end (a failure inside the model is this stream's: aclmdlRIExecuteAsync).
        replay = f"{model.name} replay"
        pending = _Parts([(inner, bare_task(GRAPH, replay, tasks=tasks, context=context))
                          for inner, tasks in parts.items()])
        model.pending.append(pending)  # under self._lock, before the replaying stream can reach it
        replaying = [bare_task(RECORD, begin, event=model.start, generation=start),
                     bare_task(CONTROL, begin, run=lambda: self._hand_over(model, pending),
                               discarded=lambda: self._drop(model, pending))]
        if joins:
            (first, generation), rest = joins[0], joins[1:]
            replaying.append(bare_task(WAIT, f"join {model.name}", event=first, generation=generation,
                                       adopt_error=True, joins=rest))
        backend.submit_task(stream, bare_task(GRAPH, replay, tasks=replaying, context=context))
        if ends is not None and sanitizer is not None:
            sanitizer.wait(stream.name, ends[1])
        elif sanitizer is not None:
            for inner in parts:
                sanitizer.wait(stream.name, model.ends[inner].snapshot)

    def _hand_over(self, model: SimModel, replay: _Parts) -> None:
        """On the replaying stream, once it recorded the replay's start: give the model's streams
        their parts of every replay submitted up to this one (a replay submitted earlier on
        another stream goes first, as it would have if the host had queued the parts itself).

        When this replay is the only one to hand over and nothing of the model is running, the
        replaying stream's worker runs the parts itself, task by task in capture order, with
        the model's streams' own bookkeeping (failures, records, counts): the same work in an
        order the model's streams could have run it, without waking three or more threads
        and handing every record between them; the model's records and waits between its own
        streams are skipped (capture order already orders them, and none passes a failure on)
        unless a trace records every task.  Not with the timing model (whose engines the
        model's streams hold concurrently), a stream that stops on failure or a fault that
        hangs (which an abort of the replaying stream must be able to leave behind)."""
        with model.handing:
            with self._lock:
                if replay not in model.pending:
                    return  # an earlier hand-over took it along
                index = model.pending.index(replay)
                ready, model.pending[:index + 1] = model.pending[:index + 1], []
            if len(ready) == 1 and self._runs_here(replay):
                if self.backend.recorder is None:
                    _run_parts(replay, model.work_order)
                else:  # a trace lists every task the model's streams run: the records and waits too
                    _renew(model, replay)
                    _run_parts(replay, model.order)
                return
            for earlier in ready:
                _renew(model, earlier)  # oldest first: each replay's records after the one before
                for inner, part in earlier.parts:
                    try:
                        inner.submit(part)
                    except BackendError:  # the model's stream stopped after a failure: it takes no part
                        _complete_records(part, self.backend.engines.now())

    def _runs_here(self, replay: _Parts) -> bool:
        """Whether the replaying stream may run ``replay``'s parts itself (see :meth:`_hand_over`)."""
        backend = self.backend
        if backend.engines.timing or backend.stop_on_failure or backend.faults.may_hang():
            return False
        return all(inner.stopped is None and inner.idle() for inner, _ in replay.parts)

    def _drop(self, model: SimModel, replay: _Parts) -> None:
        """The replaying stream dropped the replay (a stop or an abort): the model never runs it,
        and its records are finished so that nothing waits for them and the model may be destroyed."""
        with self._lock:
            if replay not in model.pending:
                return
            model.pending.remove(replay)
        now = self.backend.engines.now()
        for _, part in replay.parts:
            _complete_records(part, now, everything=replay.renewed)

    def _sanitize(self, model: SimModel, sanitizer: Sanitizer, replaying: str, start: Clock,
                  run: str) -> tuple[dict[str, Clock], Clock] | None:
        """Check one replay's accesses, the model's streams starting after ``start`` (raises
        HazardError).  The first replay, and the first after a task group update, checks every
        task as if it were enqueued; once one passed, the model's own ordering is proven and a
        summary checks the rest in one step (:mod:`.replay_summary`)."""
        summary = model.summary
        if summary is not None and summary.updates == self.updates:
            return summary.replay(sanitizer, start, run, replaying)
        self._check_each(model, sanitizer, start, run)
        if any(item.check_nested is not None for item in model.items):
            # A conditional task runs its sub-models a data-dependent number of times, which a
            # summary of one replay cannot stand for: such a model is checked task by task.
            return None
        summary = ReplaySummary.of(model.items, model.streams, model.shadows)
        summary.updates = self.updates
        model.summary = summary
        return None

    @staticmethod
    def _check_each(model: SimModel, sanitizer: Sanitizer, start: Clock, run: str) -> None:
        """Check every task of a replay in capture order, as if each were enqueued on its model
        stream: records and waits between the model's streams order them in the clocks."""
        for inner in model.streams.values():
            sanitizer.wait(inner.name, start)
        recorded: dict[SimEvent, Clock] = {}  # event -> the clock of its latest record in this replay
        for item in model.items:
            task, name = item.task, model.streams[item.stream].name
            if task.kind == RECORD:
                assert task.event is not None
                recorded[task.event] = sanitizer.snapshot(name)
            elif task.kind == WAIT:
                assert task.event is not None
                sanitizer.wait(name, recorded.get(task.event, {}))  # capture order: after its record
            else:
                clock = sanitizer.enqueue(name)
                regions = [(allocation, address, nbytes, False) for allocation, address, nbytes in item.reads]
                regions += [(allocation, address, nbytes, True) for allocation, address, nbytes in item.writes]
                sanitizer.access_all(regions, actor=name, clock=clock, what=describe_task(task) + run,
                                     padding=item.padding)
                if item.check_nested is not None:  # a conditional task: its sub-models' tasks too (.conditional)
                    item.check_nested(name, run)

    def destroy(self, model: SimModel) -> None:
        if model.destroyed:
            return
        if model.running():
            raise error_from_code(107037, f"model {model.name} is still executing; synchronize the stream it was "
                                          "replayed on before aclmdlRIDestroy")
        model.destroyed = True
        for inner in model.streams.values():
            self.backend.stream_destroy(inner)


def _renew(model: SimModel, replay: _Parts) -> None:
    """Put this replay's own records and waits (new generations of the model's shadow events)
    where its parts still hold the captured ones; the replay's hand-overs run in submission
    order, so each replay's records begin after the one before."""
    if replay.renewed:
        return
    tasks = {inner: part.tasks for inner, part in replay.parts}
    numbers = [shadow.begin_record({}) for shadow in model.recorded]  # in capture order
    for inner, index, kind, name, shadow, number in model.renewals:
        tasks[inner][index + 1] = sync_task(kind, name, shadow, numbers[number], inherit=False)  # type: ignore[index]
    replay.renewed = True


def _run_parts(replay: _Parts, order: list[tuple[int, int]]) -> None:
    """Run every part of ``replay`` on this thread: the waits for the start, every captured task
    in capture order, the end records (see :meth:`Captures._hand_over`)."""
    parts = replay.parts
    for inner, part in parts:
        inner.adopt(part)
    try:
        for inner, part in parts:
            inner.step(part.tasks[0])  # type: ignore[index]
        for number, position in order:
            inner, part = parts[number]
            inner.step(part.tasks[position])  # type: ignore[index]
        for inner, part in parts:
            inner.step(part.tasks[-1])  # type: ignore[index]
    finally:
        for inner, _ in parts:
            inner.release()


def _complete_records(part: Task, now: float, everything: bool = True) -> None:
    """Finish the records of a part that will never run; only its end record when its own
    records were never made (the part still holds the captured ones: see ``_Parts.renewed``)."""
    for task in (part.tasks or ()) if everything else (part.tasks or ())[-1:]:
        if task.kind == RECORD and task.event is not None:
            task.event.complete(task.generation, now, None)


def _swap(pairs: list[tuple[Task, Task]]) -> None:
    for task, replacement in pairs:
        task.name, task.run, task.seconds, task.cores = (replacement.name, replacement.run, replacement.seconds,
                                                         replacement.cores)
        task.context, task.writes = replacement.context, replacement.writes

