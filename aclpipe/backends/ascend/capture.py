"""Model runtime instances captured from streams (``aclmdlRI*``), when the runtime has them.

Every call is the one ``hicann/runtime`` ``docs/zh/api_ref/15_model_running_instance__management.md``
documents, resolved at load as optional symbols: capture begins on an origin stream, other
streams join through event waits, ``aclmdlRICaptureEnd`` on the origin returns the model, and
``aclmdlRIExecuteAsync`` replays it with one call on one stream.  The caller has made the
device's context current.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...errors import ClosedResourceError, error_from_code
from ..protocol import CaptureStatus
from .cdefs import ffi

if TYPE_CHECKING:
    from .library import CannLibrary
    from .streams import AscendStream

__all__ = ["AscendModel", "AscendTaskGroup", "Captures"]


class AscendModel:
    """An ``aclmdlRI`` captured from streams."""

    def __init__(self, handle: Any):
        self.handle = handle
        self.destroyed = False


class AscendTaskGroup:
    """An ``aclrtTaskGrp``."""

    def __init__(self, handle: Any):
        self.handle = handle


class Captures:
    """The ``aclmdlRI*`` calls of one device."""

    def __init__(self, library: CannLibrary, check_stream: Callable[[AscendStream], None]):
        self._library = library
        self._runtime = library.runtime
        self._check_stream = check_stream
        self._models: dict[Any, AscendModel] = {}

    def _call(self, what: str, code: int, stream: AscendStream | None = None) -> None:
        self._library.check(code, what, {"stream": stream.name} if stream is not None else None)

    def begin(self, stream: AscendStream | None, mode: int) -> None:
        """``aclmdlRICaptureBegin``; ``None`` is the default stream, passed as NULL for the
        runtime to refuse (the caller made the context current)."""
        if stream is None:
            self._call("aclmdlRICaptureBegin", self._runtime.aclmdlRICaptureBegin(ffi.NULL, int(mode)))
            return
        self._check_stream(stream)
        self._call("aclmdlRICaptureBegin", self._runtime.aclmdlRICaptureBegin(stream.handle, int(mode)), stream)

    def get_info(self, stream: AscendStream) -> tuple[CaptureStatus, AscendModel | None]:
        self._check_stream(stream)
        status, model = ffi.new("aclmdlRICaptureStatus *"), ffi.new("aclmdlRI *")
        self._call("aclmdlRICaptureGetInfo", self._runtime.aclmdlRICaptureGetInfo(stream.handle, status, model), stream)
        value = CaptureStatus(int(status[0]))
        if value == CaptureStatus.NONE or model[0] == ffi.NULL:
            return value, None
        return value, self._models.get(model[0]) or AscendModel(model[0])

    def end(self, stream: AscendStream) -> AscendModel:
        self._check_stream(stream)
        model = ffi.new("aclmdlRI *")
        self._call("aclmdlRICaptureEnd", self._runtime.aclmdlRICaptureEnd(stream.handle, model), stream)
        wrapped = AscendModel(model[0])
        self._models[model[0]] = wrapped
        return wrapped

    def task_group_begin(self, stream: AscendStream) -> None:
        self._check_stream(stream)
        self._call("aclmdlRICaptureTaskGrpBegin", self._runtime.aclmdlRICaptureTaskGrpBegin(stream.handle), stream)

    def task_group_end(self, stream: AscendStream) -> AscendTaskGroup:
        self._check_stream(stream)
        group = ffi.new("aclrtTaskGrp *")
        self._call("aclmdlRICaptureTaskGrpEnd", self._runtime.aclmdlRICaptureTaskGrpEnd(stream.handle, group), stream)
        return AscendTaskGroup(group[0])

    def task_update_begin(self, stream: AscendStream, group: AscendTaskGroup) -> None:
        self._check_stream(stream)
        if not isinstance(group, AscendTaskGroup):
            raise error_from_code(107017, f"{group!r} is not a task group")
        self._call("aclmdlRICaptureTaskUpdateBegin",
                   self._runtime.aclmdlRICaptureTaskUpdateBegin(stream.handle, group.handle), stream)

    def task_update_end(self, stream: AscendStream) -> None:
        self._check_stream(stream)
        self._call("aclmdlRICaptureTaskUpdateEnd", self._runtime.aclmdlRICaptureTaskUpdateEnd(stream.handle), stream)

    def execute(self, model: AscendModel, stream: AscendStream) -> None:
        self._check_stream(stream)
        if not isinstance(model, AscendModel):
            raise error_from_code(107000, f"{model!r} is not a captured model")
        if model.destroyed:
            raise ClosedResourceError("the model was destroyed (aclmdlRIDestroy)")
        self._call("aclmdlRIExecuteAsync", self._runtime.aclmdlRIExecuteAsync(model.handle, stream.handle), stream)

    def destroy(self, model: AscendModel) -> None:
        if model.destroyed:
            return
        self._call("aclmdlRIDestroy", self._runtime.aclmdlRIDestroy(model.handle))
        model.destroyed = True
        self._models.pop(model.handle, None)

    def forget(self, model: AscendModel) -> None:
        """Stop holding ``model``: the runtime frees it with another (a conditional task's sub-model)."""
        self._models.pop(model.handle, None)

    def destroy_all(self, attempt: Callable[[Callable[[], object]], None]) -> None:
        """Destroy every model still held (the streams were synchronized first)."""
        for model in list(self._models.values()):
            attempt(functools.partial(self.destroy, model))
