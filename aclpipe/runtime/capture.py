"""Graph capture as a runtime object: record what an origin stream (and the streams that join
it) enqueue into a model, then replay the model on any stream.

It is CANN's ``aclmdlRI`` model (``hicann/runtime`` ``15_model_running_instance__management.md``):
``aclmdlRICaptureBegin`` puts the origin stream into capture; work enqueued there, and on any
stream that waits on an event recorded inside the capture, is stored in the model instead of
run; ``aclmdlRICaptureEnd`` on the origin returns the model once every joined stream has
rejoined it; ``aclmdlRIExecuteAsync(model, stream)`` replays it, ordered on that stream like
any task; ``aclmdlRIDestroy`` frees it.  The model holds streams of its own ("captured
streams consume stream resources").

.. code-block:: python

    with Capture(origin) as capture:
        ...  # enqueue on origin, and on streams that wait on events recorded there
    run = capture.run          # a CapturedRun
    run.replay(stream, {"run": 7})
    run.close()

A capture that fails part way (an exception inside the block, or the runtime refusing its
end) is ended and its model, if any, destroyed: the origin leaves capture either way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self

from ..backends.protocol import GraphCapture, graph_capture
from ..errors import BackendError

if TYPE_CHECKING:
    from .device import Device
    from .stream import Stream

__all__ = ["Capture", "CapturedRun", "can_capture"]


def can_capture(device: Device) -> bool:
    """Whether ``device``'s backend captures models (``capabilities.graph_capture``)."""
    return graph_capture(device.backend) is not None


def _backend(device: Device) -> GraphCapture:
    backend = graph_capture(device.backend)
    if backend is None:
        raise NotImplementedError(f"{device.name} cannot capture work into a model (aclmdlRICapture* is missing on "
                                  "this product or backend); enqueue it node by node")
    return backend


class CapturedRun:
    """One captured model: replay it as often as you like, on any stream; close it once."""

    __slots__ = ("_backend", "_model", "device")

    def __init__(self, device: Device, model: Any):
        self.device = device
        self._backend = _backend(device)
        self._model: Any | None = model

    def replay(self, stream: Stream, context: Mapping[str, Any] | None = None) -> None:
        """Enqueue one replay on ``stream`` (``aclmdlRIExecuteAsync``): it starts after the
        stream's earlier work, and the stream's later work waits for all of it.  ``context``
        (``{"run": 7}``) travels with the replay's tasks, into errors and traces."""
        if self._model is None:
            raise ValueError("this captured run was closed")
        self._backend.model_execute(self._model, stream.handle, context)

    @property
    def model(self) -> Any:
        """The backend's model handle (None once closed)."""
        return self._model

    def close(self) -> None:
        """Destroy the model (``aclmdlRIDestroy``); idempotent.  The caller made sure no replay
        of it may still run (the runtime refuses one that may)."""
        model, self._model = self._model, None
        if model is not None:
            self._backend.model_destroy(model)

    def __repr__(self) -> str:
        return f"<CapturedRun on {self.device.name}{' closed' if self._model is None else ''}>"


class Capture:
    """A capture from ``stream`` (the origin), as a context manager; ``run`` is the captured
    run once the block ended cleanly."""

    def __init__(self, stream: Stream):
        self.stream = stream
        self._backend = _backend(stream.device)
        self.run: CapturedRun | None = None

    def __enter__(self) -> Self:
        self._backend.capture_begin(self.stream.handle)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, traceback: object) -> None:
        if kind is not None:
            self._abandon()
            return
        try:
            model = self._backend.capture_end(self.stream.handle)
        except BaseException:
            self._abandon()
            raise
        self.run = CapturedRun(self.stream.device, model)

    def _abandon(self) -> None:
        """End a capture that failed part way; its model, if any, is destroyed."""
        try:
            self._backend.model_destroy(self._backend.capture_end(self.stream.handle))
        except BackendError:
            pass  # an invalidated or unjoined capture has no model to free; the first error wins
