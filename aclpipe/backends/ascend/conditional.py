"""Conditional tasks in captured models through CANN: ``aclmdlRICond*`` of ``acl/acl_rt.h``.

The binding of :class:`~aclpipe.backends.protocol.ConditionalModels` (whose docstring gives the
runtime's rules, read from ``hicann/runtime``'s source).  The calls are optional symbols
(:data:`~aclpipe.backends.ascend.cdefs.RUNTIME_COND`): a CANN without them, or a product without
the feature (Atlas A2 and A3 only), leaves ``capabilities.conditional_models`` off and every call
here refused with 207000 before the runtime is asked.  Sub-models are the runtime's to free (with
their parent): they are never handed to ``aclmdlRIDestroy``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...errors import error_from_code
from ..protocol import CaptureMode, CondTaskType
from .capture import AscendModel
from .cdefs import ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT, ffi
from .optional_calls import OptionalCalls

if TYPE_CHECKING:
    from .library import CannLibrary
    from .streams import AscendStream

__all__ = ["AscendCondHandle", "AscendConditionals"]


class AscendCondHandle:
    """An ``aclmdlRICondHandle``."""

    def __init__(self, handle: Any, model: AscendModel):
        self.handle = handle
        self.model = model


class AscendConditionals(OptionalCalls):
    """The ``aclmdlRICond*`` calls of one device (see :class:`OptionalCalls` for the parameters)."""

    lacking = ("conditional tasks in captured models (its CANN lacks aclmdlRICondHandleCreate and the rest, or the "
               "product is not Atlas A2 or A3: 15_model_running_instance__management.md)")

    def __init__(self, library: CannLibrary, index: int, enter: Callable[[], None],
                 check_stream: Callable[[AscendStream], None], available: bool):
        super().__init__(library, index, enter, check_stream, available)
        #: Sub-model handles: the runtime frees them with their parent.
        self.sub_models: set[Any] = set()
        #: Parent model handle -> its sub-models' handles, forgotten when the parent is destroyed
        #: (the runtime may hand a freed handle's address out again, to any model).
        self._children: dict[Any, list[Any]] = {}

    def create(self, model: AscendModel, default: int, assign_default: bool) -> AscendCondHandle:
        """``aclmdlRICondHandleCreate``."""
        runtime = self._need("aclmdlRICondHandleCreate")
        if not isinstance(model, AscendModel):
            raise error_from_code(107000, f"{model!r} is not a model runtime instance")
        handle = ffi.new("aclmdlRICondHandle *")
        flag = ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT if assign_default else 0
        self.library.check(runtime.aclmdlRICondHandleCreate(model.handle, default, flag, handle),
                           "aclmdlRICondHandleCreate")
        return AscendCondHandle(handle[0], model)

    def cond_ptr(self, handle: AscendCondHandle) -> int:
        """``aclmdlRICondHandleGetCondPtr``: the condition's device address."""
        runtime = self._need("aclmdlRICondHandleGetCondPtr")
        pointer = ffi.new("uint64_t **")
        self.library.check(runtime.aclmdlRICondHandleGetCondPtr(handle.handle, pointer),
                           "aclmdlRICondHandleGetCondPtr")
        return int(ffi.cast("uintptr_t", pointer[0]))

    def add_task(self, handle: AscendCondHandle, kind: CondTaskType, size: int,
                 stream: AscendStream) -> list[AscendModel]:
        """``aclmdlRIAddCondTask``: the sub-models the runtime made."""
        runtime = self._need("aclmdlRIAddCondTask")
        self._check_stream(stream)
        models = ffi.new("aclmdlRI[]", max(size, 1))
        params: Any = ffi.new("aclmdlRICondTaskParams *")
        params.handle = handle.handle
        params.type = int(kind)
        params.size = size
        params.modelRIArray = models
        code = runtime.aclmdlRIAddCondTask(params[0], stream.handle, 0)
        self.library.check(code, f"aclmdlRIAddCondTask({CondTaskType(kind).name}, {size})", {"stream": stream.name})
        subs = [AscendModel(models[index]) for index in range(size)]
        self.sub_models.update(sub.handle for sub in subs)
        self._children.setdefault(handle.model.handle, []).extend(sub.handle for sub in subs)
        return subs

    def destroyed(self, model: AscendModel) -> None:
        """``model`` was destroyed: its sub-models went with it (and theirs)."""
        for child in self._children.pop(model.handle, ()):
            self.sub_models.discard(child)
            self.destroyed(AscendModel(child))

    def capture_begin(self, stream: AscendStream, model: AscendModel, mode: int = CaptureMode.GLOBAL) -> None:
        """``aclmdlRICaptureToModelRIBegin``."""
        runtime = self._need("aclmdlRICaptureToModelRIBegin")
        self._check_stream(stream)
        if not isinstance(model, AscendModel):
            raise error_from_code(107000, f"{model!r} is not a conditional task's sub-model")
        self.library.check(runtime.aclmdlRICaptureToModelRIBegin(stream.handle, model.handle, int(mode)),
                           "aclmdlRICaptureToModelRIBegin", {"stream": stream.name})
