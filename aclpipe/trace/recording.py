"""Recording a trace: every task a device's streams execute, while a block runs.

.. code-block:: python

    with aclpipe.trace.record_trace(device) as recording:
        async for out in pipe.stream(batches):
            ...
    trace = recording.trace

Only backends with the tracing capability (the simulator) record one; the record type is the
backend protocol's :class:`~aclpipe.backends.protocol.TraceRecord`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

from ..backends.protocol import Tracing, tracing
from .trace import Trace

if TYPE_CHECKING:
    from ..runtime import Device

__all__ = ["TraceRecording", "record_trace"]


class TraceRecording:
    """A trace being recorded on one device; a context manager (see :func:`record_trace`)."""

    def __init__(self, device: Device):
        backend = tracing(device.backend)
        if backend is None:
            raise NotImplementedError(f"device {device.name} cannot record a timeline trace: only the simulator "
                                      "('sim') records one; open the device with open_device('sim')")
        self._backend: Tracing = backend
        self.trace: Trace | None = None
        backend.trace_begin()

    def stop(self) -> Trace:
        """Stop recording (once the work already enqueued is done) and return the trace."""
        if self.trace is None:
            self.trace = Trace(self._backend.trace_end(), timing=self._backend.trace_modelled_time())
        return self.trace

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def record_trace(device: Device) -> TraceRecording:
    """Start recording every task ``device`` (a :class:`~aclpipe.Device` on the simulator) executes.

    Use it as a context manager; after the block, ``recording.trace`` is the :class:`Trace`.
    Raises :class:`NotImplementedError` for a backend that cannot record.
    """
    return TraceRecording(device)
