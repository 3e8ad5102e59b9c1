"""Conditional tasks inside captured models: CANN's ``aclmdlRICond*`` (a trial feature).

The rules (see :class:`~aclpipe.backends.protocol.ConditionalModels` for the sources):

- ``aclmdlRICondHandleCreate(model, default, flag)`` needs ``model`` in an active capture
  (``ApiImpl::ModelCondHandleCreate``, ``v100/api_impl_aclgraph.cc``: 107000).  The handle owns
  8 bytes of device memory, the condition, freed when the model is destroyed; with
  ``ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT`` each execution of the model begins by setting it
  to ``default`` (here a task at the front of the model), else it holds what was last written
  (fresh memory is poisoned here, as every fresh allocation is).
- ``aclmdlRIAddCondTask`` on a stream capturing the handle's model (107029 when it is not
  capturing, 107000 for another model's stream, a second task on one handle, or a size its
  kind refuses: ``StreamAddCondTaskParasCheck``, ``CheckCondTaskParamsSize``) stores one task
  and returns the kind's sub-models, each filled by ``aclmdlRICaptureToModelRIBegin`` on another
  stream; a sub-model cannot be destroyed on its own ("该模型运行实例不支持aclmdlRIDestroy").
- When a replay's stream reaches the task, it loads the 64-bit condition: ``WHILE`` runs the
  sub-model while it is not 0, tested before every run (``ConstructWhileCondSetupBranch``,
  ``ConstructCaptureConditionJumpBackFc``: ``stars_cond_isa_helper.cc``,
  ``aclgraph_cond_task.cc``); ``IF`` runs sub-model 0 when it is not 0, else sub-model 1.

How it is modelled: the task runs on the model stream of the stream it was captured on, and
runs the sub-model's tasks there itself, in capture order, through that stream's own
bookkeeping (faults, failures naming each task's node, traces), as the single-thread replay of
:mod:`.capture` does; records and waits between the sub-model's own streams only order them,
which capture order already does.  A failed task of the sub-model ends a ``WHILE`` (the stricter
choice: its flag is garbage then, and the device would loop on it).  The sanitizer checks the
task once per replay, at its place in the parent: reading the condition, then each task of its
sub-models in capture order, as one run of each would: every run of a sub-model is on that one
stream, in order, so the runs after the first add no ordering of their own.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ...errors import error_from_code
from ..protocol import CaptureMode, CondTaskType
from .capture import Captured, CaptureSession, SimModel
from .memory import Allocation
from .optional import model_destroy as optional_model_destroy
from .stream import CONTROL, RECORD, WAIT, SimStream, Task, bare_task, describe_task

if TYPE_CHECKING:
    from .core import SimDevice

__all__ = ["Conditionals", "SimCondHandle", "add_cond_task", "capture_end", "capture_to_model_begin",
           "cond_handle_create", "cond_handle_get_cond_ptr", "model_destroy"]

#: The sub-models each kind takes (``CheckCondTaskParamsSize``).
_SIZES = {CondTaskType.IF: (1, 2), CondTaskType.WHILE: (1,)}


@dataclass(eq=False)
class SimCondHandle:
    """``aclmdlRICondHandle``: a model's condition and the conditional task that reads it."""

    model: SimModel
    default: int
    assign_default: bool
    condition: Allocation
    kind: CondTaskType | None = None
    stream: SimStream | None = None  # the captured stream its task went on
    subs: list[SimModel] = field(default_factory=list)
    item: Captured | None = None
    #: Per sub-model, its tasks in capture order without records and waits (once captured).
    bodies: dict[SimModel, list[Task]] = field(default_factory=dict)

    @property
    def address(self) -> int:
        return self.condition.start


class Conditionals:
    """The condition handles of one simulated device."""

    def __init__(self, device: SimDevice):
        self.device = device
        self.handles: dict[SimModel, list[SimCondHandle]] = {}  # parent model -> its handles
        self.owners: dict[SimModel, SimCondHandle] = {}  # sub-model -> its handle
        self._names = itertools.count()
        self._lock = threading.Lock()

    def _check_supported(self) -> None:
        if not self.device.spec.conditional_models:
            raise error_from_code(207000, f"{self.device.spec.name} has no conditional tasks in captured models "
                                          "(aclmdlRICondHandleCreate: Atlas A2 and A3 only, "
                                          "15_model_running_instance__management.md)")

    def _session(self, model: SimModel) -> CaptureSession | None:
        return next((session for session in self.device.captures.active if session.model is model), None)

    # -- building ----------------------------------------------------------------------------
    def create(self, model: SimModel, default: int, assign_default: bool) -> SimCondHandle:
        """``aclmdlRICondHandleCreate``."""
        self._check_supported()
        if not isinstance(model, SimModel):
            raise error_from_code(107000, f"{model!r} is not a model runtime instance")
        session = self._session(model)
        if session is None:
            raise error_from_code(107000, f"model {model.name} is not being captured: create condition handles "
                                          "between aclmdlRICaptureBegin and aclmdlRICaptureEnd "
                                          "(ApiImpl::ModelCondHandleCreate)")
        if not 0 <= default < 2**32:
            raise error_from_code(107000, f"the default condition is a uint32_t, got {default}")
        condition = self.device.memory.alloc(8, f"{model.name} condition {next(self._names)}")
        handle = SimCondHandle(model, default, assign_default, condition)
        with self._lock:
            self.handles.setdefault(model, []).append(handle)
        if assign_default:
            # Set at the start of every execution of the model: the model's first task.
            value = np.array([default], np.uint64).view(np.uint8)
            task = bare_task(CONTROL, f"assign default {model.name}",
                             run=lambda: _write(handle.condition, value))
            model.items.insert(0, Captured(session.origin, task, writes=((condition, condition.start, 8),)))
        return handle

    def add_task(self, handle: SimCondHandle, kind: CondTaskType, size: int, stream: SimStream) -> list[SimModel]:
        """``aclmdlRIAddCondTask``: the sub-models, empty until captured into."""
        self._check_supported()
        if not isinstance(handle, SimCondHandle):
            raise error_from_code(107000, f"{handle!r} is not a condition handle (aclmdlRICondHandleCreate)")
        session = stream.capture
        if session is None:
            raise error_from_code(107029, f"stream {stream.name} must be capturing to take a conditional task "
                                          "(aclmdlRIAddCondTask)")
        if session.model is not handle.model:
            raise error_from_code(107000, f"stream {stream.name} captures model {session.model.name}, the handle "
                                          f"belongs to {handle.model.name}")
        if handle.kind is not None:
            raise error_from_code(107000, "the handle has been launched with a condition task; create a new "
                                          "handle before adding another condition task")
        try:
            kind = CondTaskType(kind)
        except ValueError:
            raise error_from_code(107000, f"conditional task kind {kind!r} is not modelled (IF 0, WHILE 1)") from None
        if size not in _SIZES[kind]:
            raise error_from_code(107000, f"a {kind.name} conditional task takes {' or '.join(map(str, _SIZES[kind]))} "
                                          f"sub-models, got {size} (CheckCondTaskParamsSize)")
        handle.kind, handle.stream = kind, stream
        handle.subs = [SimModel(f"{handle.model.name}:{kind.name.lower()}{index}") for index in range(size)]
        task = bare_task(CONTROL, f"{kind.name.lower()} {handle.model.name}", run=lambda: self._run(handle))
        condition = handle.condition
        handle.item = Captured(stream, task, reads=((condition, condition.start, 8),))
        session.model.items.append(handle.item)
        with self._lock:
            for sub in handle.subs:
                self.owners[sub] = handle
        return list(handle.subs)

    def begin(self, stream: SimStream, model: SimModel, mode: CaptureMode) -> None:
        """``aclmdlRICaptureToModelRIBegin``."""
        handle = self.owners.get(model) if isinstance(model, SimModel) else None
        if handle is None:
            raise error_from_code(107000, f"{model!r} is not a conditional task's sub-model (aclmdlRIAddCondTask)")
        if model.ready or self._session(model) is not None:
            raise error_from_code(107000, f"sub-model {model.name} was captured already")
        self.device.captures.begin(stream, mode, model)

    def ended(self, model: SimModel) -> None:
        """A capture ended in ``model``: a sub-model's accesses become its task's."""
        handle = self.owners.get(model)
        if handle is None:
            return
        handle.bodies[model] = [item.task for item in model.items if item.task.kind not in (RECORD, WAIT)]
        item = handle.item
        assert item is not None
        item.nested = tuple(captured for sub in handle.subs for captured in sub.items
                            if captured.task.kind not in (RECORD, WAIT))
        item.check_nested = lambda actor, run: self._check(item.nested, actor, run)

    def _check(self, nested: tuple[Captured, ...], actor: str, run: str) -> None:
        """The sanitizer's check of a replay's conditional task, after its own: each task of its
        sub-models in capture order, on the stream that runs them (see the module docs)."""
        sanitizer = self.device.sanitizer
        assert sanitizer is not None
        for captured in nested:
            clock = sanitizer.enqueue(actor)
            regions = [(allocation, address, nbytes, False) for allocation, address, nbytes in captured.reads]
            regions += [(allocation, address, nbytes, True) for allocation, address, nbytes in captured.writes]
            sanitizer.access_all(regions, actor=actor, clock=clock, what=describe_task(captured.task) + run,
                                 padding=captured.padding)

    def check_destroy(self, model: SimModel) -> None:
        """A sub-model is freed with its parent only."""
        if model in self.owners:
            raise error_from_code(107000, f"{model.name} is a conditional task's sub-model: destroy its parent "
                                          "model instead (aclmdlRICaptureToModelRIBegin)")

    def destroyed(self, model: SimModel) -> None:
        """``model`` was destroyed: free its conditions and sub-models."""
        with self._lock:
            handles = self.handles.pop(model, [])
            for handle in handles:
                for sub in handle.subs:
                    self.owners.pop(sub, None)
        for handle in handles:
            for sub in handle.subs:
                if sub.ready:
                    self.device.captures.destroy(sub)
            if handle.condition.alive:
                self.device.memory.free(handle.condition.start)

    # -- running -----------------------------------------------------------------------------
    def _run(self, handle: SimCondHandle) -> None:
        """The task, on the model stream of the stream it was captured on."""
        assert handle.stream is not None
        inner = handle.model.streams[handle.stream]
        if handle.kind == CondTaskType.IF:
            index = 0 if _value(handle.condition) != 0 else 1
            if index < len(handle.subs):
                self._run_sub(inner, handle, handle.subs[index])
            return
        body = handle.subs[0]
        while _value(handle.condition) != 0:
            failures = len(inner.failures)
            self._run_sub(inner, handle, body)
            if len(inner.failures) > failures or inner.interrupted():
                return  # its flag is garbage now (see the module docs)

    @staticmethod
    def _run_sub(inner: SimStream, handle: SimCondHandle, sub: SimModel) -> None:
        for task in handle.bodies.get(sub, ()):
            inner._execute(task)


def _value(condition: Allocation) -> int:
    return int(condition.data[:8].view(np.uint64)[0])


def _write(condition: Allocation, value: np.ndarray) -> None:
    condition.data[:8] = value



# -- the backend's methods (bound on SimBackend as they are, see .core) ------------------------------
def cond_handle_create(device: SimDevice, model: SimModel, default: int = 0,
                       assign_default: bool = False) -> SimCondHandle:
    """``aclmdlRICondHandleCreate``."""
    device._check_open()
    return device.conditionals.create(model, default, assign_default)


def cond_handle_get_cond_ptr(device: SimDevice, handle: SimCondHandle) -> int:
    """``aclmdlRICondHandleGetCondPtr``."""
    device.conditionals._check_supported()
    if not isinstance(handle, SimCondHandle):
        raise error_from_code(107000, f"{handle!r} is not a condition handle (aclmdlRICondHandleCreate)")
    return handle.address


def add_cond_task(device: SimDevice, handle: SimCondHandle, kind: CondTaskType, size: int,
                  stream: SimStream) -> list[SimModel]:
    """``aclmdlRIAddCondTask``."""
    device._check_stream(stream)
    return device.conditionals.add_task(handle, kind, size, stream)


def capture_to_model_begin(device: SimDevice, stream: SimStream, model: SimModel,
                           mode: int = CaptureMode.GLOBAL) -> None:
    """``aclmdlRICaptureToModelRIBegin``."""
    device._check_stream(stream)
    device.conditionals.begin(stream, model, CaptureMode(mode))


def capture_end(device: SimDevice, stream: SimStream) -> SimModel:
    """``aclmdlRICaptureEnd``, a sub-model's too."""
    device._check_stream(stream)
    model = device.captures.end(stream)
    device.conditionals.ended(model)
    return model


def model_destroy(device: SimDevice, model: SimModel) -> None:
    """``aclmdlRIDestroy``: with its conditions and sub-models; never a sub-model alone."""
    if isinstance(model, SimModel):
        device.conditionals.check_destroy(model)
    optional_model_destroy(device, model)
    if isinstance(model, SimModel):
        device.conditionals.destroyed(model)
