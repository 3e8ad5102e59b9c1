"""Stream and event calls: failure modes, abort, synchronize and query, waits and records.

These are :class:`~aclpipe.backends.sim.backend.SimBackend`'s stream and event methods, bound as
they are (see :mod:`.core`); creating and destroying streams and events stays on the facade,
which owns their registries.  The stream itself is :mod:`.stream`, the event :mod:`.event`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ...errors import BackendError, error_from_code
from ..protocol import sync_streams
from .stream import RECORD, WAIT, FailureMode, sync_task

if TYPE_CHECKING:
    from .core import SimDevice
    from .engines import DeviceSpec
    from .event import SimEvent
    from .stream import SimStream

__all__ = ["check_timeout", "device_sync", "effective_op_wait_timeout", "event_elapsed", "event_query",
           "event_record", "event_reset", "event_sync", "stream_abort", "stream_query", "stream_set_failure_mode",
           "stream_sync", "stream_take_error", "stream_wait_event"]


def check_timeout(timeout_ms: int, what: str) -> None:
    """The runtime's parameter check of every ``*WithTimeout`` synchronize: -1 (no limit) or
    > 0 ms.  The docs (06_stream_management.md, 07_event_management.md) list only those two;
    ``ApiErrorDecorator::StreamSynchronize``, ``::EventSynchronize`` and ``::DeviceSynchronize``
    in ``src/runtime/api/impl/api_error.cc`` refuse 0 (and anything below -1) with
    ``RT_ERROR_INVALID_VALUE``, which ACL reports as 107000.  A poll is a query, not a 0 ms sync."""
    if timeout_ms == 0 or timeout_ms < -1:
        raise error_from_code(107000, f"{what}: the timeout must be -1 (no limit) or greater than 0 ms, got "
                                      f"{timeout_ms} (api_error.cc refuses 0); poll with a query instead")


def effective_op_wait_timeout(spec: DeviceSpec, requested: float | None) -> float:
    """The op wait timeout in force, in seconds, as ``aclrtSetOpWaitTimeout`` sets it
    (07_event_management.md): ``None`` leaves the runtime's default, no timeout (0); otherwise
    whole seconds (the call takes a ``uint32_t``), rounded up, 0 meaning none.  Atlas inference
    cards have no such call (``ApiImpl::SetOpWaitTimeOut`` returns
    ``ACL_ERROR_RT_FEATURE_NOT_SUPPORT`` where the chip's ``eventWaitTimeout`` property says so)."""
    if requested is None:
        return 0.0
    if not 0 <= requested < 2**32:
        raise ValueError(f"op_wait_timeout must be 0 (no timeout) or a positive number of seconds below 2**32, "
                         f"got {requested}")
    if not spec.op_wait_timeout:
        raise error_from_code(207000, f"{spec.name} has no aclrtSetOpWaitTimeout (07_event_management.md: not on "
                                      "Atlas inference cards); open the device without op_wait_timeout")
    return float(math.ceil(requested))


# -- streams ------------------------------------------------------------------------------------
def stream_set_failure_mode(device: SimDevice, stream: SimStream, mode: int) -> None:
    """``aclrtSetStreamFailureMode``: once per stream; STOP applies to the whole context."""
    device._check_stream(stream)
    mode = FailureMode(mode)
    if stream.mode_set:
        raise error_from_code(107000, f"stream {stream.name} already has a failure mode: aclrtSetStreamFailureMode "
                                      "may be called once per stream (06_stream_management.md)")
    stream.mode_set = True
    stream.mode = mode
    if mode == FailureMode.STOP:
        device.stop_on_failure = True


def stream_abort(device: SimDevice, stream: SimStream) -> None:
    """``aclrtStreamAbort``: discard the stream's submitted tasks (A2/A3/950 only)."""
    device._check_stream(stream)
    if not device.spec.stream_abort:
        raise error_from_code(207000, f"{device.spec.name} has no aclrtStreamAbort (06_stream_management.md); "
                                      "synchronize the stream instead")
    device.refuse_in_host_function(f"aclrtStreamAbort of stream {stream.name}")
    stream.abort()


def stream_sync(device: SimDevice, stream: SimStream, timeout_ms: int = -1) -> None:
    """``aclrtSynchronizeStreamWithTimeout``: wait for the stream, then raise its sticky error."""
    device._check_stream(stream)
    check_timeout(timeout_ms, f"aclrtSynchronizeStreamWithTimeout of stream {stream.name}")
    device.refuse_in_host_function(f"aclrtSynchronizeStream of stream {stream.name}")
    if stream.capture is not None:
        device.captures.refuse(stream.capture, 107027, f"a synchronize of stream {stream.name}")
    if not _wait_stream(device, stream, None if timeout_ms < 0 else timeout_ms / 1000):
        raise error_from_code(507046, f"stream {stream.name} did not finish within {timeout_ms} ms")
    _raise_sticky(stream)


def stream_query(device: SimDevice, stream: SimStream) -> bool:
    """``aclrtStreamQuery``: whether the stream is done, raising its sticky error."""
    device._check_stream(stream)
    if stream.capture is not None:
        device.captures.refuse(stream.capture, 107027, f"a query of stream {stream.name}")
    done = _wait_stream(device, stream, 0)
    _raise_sticky(stream)
    return done


def _wait_stream(device: SimDevice, stream: SimStream, timeout: float | None) -> bool:
    """Wait for what is enqueued now; once it is done the host knows all of it."""
    # The snapshot is taken before the target so it never covers work the wait did not.
    snapshot = device.sanitizer.snapshot(stream.name) if device.sanitizer else None
    done = stream.wait_position(stream.position(), timeout)
    if done and snapshot is not None and device.sanitizer is not None:
        device.sanitizer.host_learns(snapshot)
    return done


def stream_take_error(device: SimDevice, stream: SimStream) -> BackendError | None:
    """The stream's sticky error, consumed (None when it has none)."""
    return stream.take_error()


def _raise_sticky(stream: SimStream) -> None:
    error = stream.take_error()
    if error is not None:
        raise error


def stream_wait_event(device: SimDevice, stream: SimStream, event: SimEvent) -> None:
    """``aclrtStreamWaitEvent``: the stream's later tasks wait for the event's last record."""
    device._check_stream(stream)
    device._check_event(event)
    if device.captures.wait(stream, event):
        return
    event.check_waitable()
    if device.sanitizer is not None:
        device.sanitizer.wait(stream.name, event.snapshot)
    # The timeout in force when the wait is enqueued goes with it, as the runtime writes it into
    # the wait's task (EventWaitTask, src/runtime/core/src/task/task_info/event/event_task.cc).
    timeout = device.op_wait_timeout * device.engines.time_scale
    task = sync_task(WAIT, f"wait {event.name}", event, event.generation)  # every run's completion makes one
    if timeout:
        task.timeout = timeout
    device.submit_task(stream, task)


def device_sync(device: SimDevice, timeout_ms: int = -1) -> None:
    """``aclrtSynchronizeDeviceWithTimeout``: every stream of the device, models' own included."""
    check_timeout(timeout_ms, "aclrtSynchronizeDeviceWithTimeout")
    device.refuse_in_host_function("aclrtSynchronizeDevice")
    device.captures.forbid_device_sync()
    sync_streams(device.stream_sync, device.all_streams(), timeout_ms)


# -- events -------------------------------------------------------------------------------------
def event_record(device: SimDevice, event: SimEvent, stream: SimStream) -> None:
    """``aclrtRecordEvent``: the event completes when the stream reaches this point."""
    device._check_stream(stream)
    device._check_event(event)
    event.check_recordable()
    if stream.capture is not None:
        device.captures.record(stream, event)
        return
    if stream.update is not None:
        raise error_from_code(507009, "only single-op tasks may update a task group, got an event record")
    stream.check_submittable()
    snapshot = device.sanitizer.snapshot(stream.name) if device.sanitizer else {}
    generation = event.begin_record(snapshot)
    task = sync_task(RECORD, f"record {event.name}", event, generation)  # every run's completion makes one
    if stream.consumed:
        task.consumed = stream.consumed
    device.submit_task(stream, task)


def event_reset(device: SimDevice, event: SimEvent, stream: SimStream) -> None:
    """``aclrtResetEvent``: single-use events only; takes effect in ``stream``'s order."""
    device._check_stream(stream)
    device._check_event(event)
    event.reset()
    device.submit_control(stream, f"reset {event.name}", lambda: None)


def _check_not_captured(device: SimDevice, event: SimEvent, what: str) -> None:
    session = event.capture
    if session is not None:
        device.captures.refuse(session, 107028, f"a {what} of event {event.name}, recorded")


def event_query(device: SimDevice, event: SimEvent) -> bool:
    """``aclrtQueryEventStatus``: whether the event's last record completed."""
    device._check_event(event)
    _check_not_captured(device, event, "query")
    done = event.is_done()
    if done and device.sanitizer is not None:
        device.sanitizer.host_learns(event.snapshot)
    return done


def event_sync(device: SimDevice, event: SimEvent, timeout_ms: int = -1) -> None:
    """``aclrtSynchronizeEventWithTimeout``: wait for the event's last record, raising its error."""
    device._check_event(event)
    check_timeout(timeout_ms, f"aclrtSynchronizeEventWithTimeout of event {event.name}")
    device.refuse_in_host_function(f"aclrtSynchronizeEvent of event {event.name}")
    _check_not_captured(device, event, "synchronize")
    if event.in_model is not None:
        raise error_from_code(107000, f"event {event.name}'s latest record is inside captured model "
                                      f"{event.in_model.name}: a sync of it is refused (api_error.cc, "
                                      "ApiErrorDecorator::EventSynchronize: Event::IsEventInModel); record an event "
                                      "on the replaying stream after the replay and synchronize that")
    # The usual caller is a run's result, syncing its done event after the completion host
    # function behind it ran: a record that already completed.  That answer takes one look
    # under the event's lock (the result path runs cold after each wait).
    generation, snapshot = event.generation, event.snapshot
    done, error = event.outcome(generation)
    if not done:
        timeout = None if timeout_ms < 0 else timeout_ms / 1000
        if not event.wait_done(generation, timeout):
            raise error_from_code(507047, f"event {event.name} did not complete within {timeout_ms} ms")
        error = event.error_of(generation)
    if device.sanitizer is not None:
        device.sanitizer.host_learns(snapshot)
    if error is not None:
        raise error


def event_elapsed(device: SimDevice, start: SimEvent, end: SimEvent) -> float:
    """``aclrtEventElapsedTime``: milliseconds between two completed records."""
    device._check_event(start)
    device._check_event(end)
    return (end.timestamp() - start.timestamp()) * 1000.0
