"""The optional parts of the contract: graph capture, peer access, the latch, tracing and fault injection.

These are :class:`~aclpipe.backends.sim.backend.SimBackend`'s methods of the typed
sub-protocols its capabilities announce (ARCHITECTURE.md 3), bound as they are (see
:mod:`.core`); each checks its arguments and hands over to the part that models it:
:mod:`.capture`, :mod:`.peer`, :mod:`.recorder`, :mod:`.faults`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...errors import error_from_code
from .capture import CaptureMode, CaptureStatus, SimModel, TaskGroup
from .faults import FaultRule
from .recorder import TraceRecorder
from .stream import LATCH, Task

if TYPE_CHECKING:
    from ..protocol import TraceRecord
    from .core import SimDevice
    from .stream import SimStream

__all__ = ["capture_begin", "capture_end", "capture_get_info", "capture_task_group_begin",
           "capture_task_group_end", "capture_task_update_begin", "capture_task_update_end",
           "device_can_access_peer", "device_disable_peer_access", "device_enable_peer_access", "inject_fault",
           "latch", "model_destroy", "model_execute", "release_hangs", "trace_begin", "trace_end",
           "trace_modelled_time"]


# -- graph capture: model runtime instances (aclmdlRI, see .capture) -------------------------------
def capture_begin(device: SimDevice, stream: SimStream | None, mode: int = CaptureMode.GLOBAL) -> None:
    """``aclmdlRICaptureBegin``; ``None`` stands for the default stream (NULL), which cannot be
    captured: ``aclmdlRICaptureBeginImpl`` (``src/acl/aclrt_impl/model_ri.cpp``) refuses a NULL
    stream with ACL_ERROR_INVALID_PARAM (100000), and the runtime below refuses the context's
    default stream (``ApiImpl::StreamBeginCapture``, ``v100/api_impl_aclgraph.cc``)."""
    if stream is None:
        device._check_open()
        raise error_from_code(100000, "aclmdlRICaptureBegin: the default stream (NULL) cannot be captured "
                                      "(model_ri.cpp, aclmdlRICaptureBeginImpl); capture a stream you created")
    device._check_stream(stream)
    device.captures.begin(stream, CaptureMode(mode))


def capture_get_info(device: SimDevice, stream: SimStream) -> tuple[CaptureStatus, SimModel | None]:
    """``aclmdlRICaptureGetInfo``."""
    device._check_stream(stream)
    return device.captures.get_info(stream)


def capture_end(device: SimDevice, stream: SimStream) -> SimModel:
    """``aclmdlRICaptureEnd``: the model, ready to replay."""
    device._check_stream(stream)
    return device.captures.end(stream)


def capture_task_group_begin(device: SimDevice, stream: SimStream) -> None:
    """``aclmdlRICaptureTaskGrpBegin``."""
    device._check_stream(stream)
    device.captures.group_begin(stream)


def capture_task_group_end(device: SimDevice, stream: SimStream) -> TaskGroup:
    """``aclmdlRICaptureTaskGrpEnd``."""
    device._check_stream(stream)
    return device.captures.group_end(stream)


def capture_task_update_begin(device: SimDevice, stream: SimStream, group: TaskGroup) -> None:
    """``aclmdlRICaptureTaskUpdateBegin``."""
    device._check_stream(stream)
    device.captures.update_begin(stream, group)


def capture_task_update_end(device: SimDevice, stream: SimStream) -> None:
    """``aclmdlRICaptureTaskUpdateEnd``."""
    device._check_stream(stream)
    device.captures.update_end(stream)


def model_execute(device: SimDevice, model: SimModel, stream: SimStream,
                  context: Mapping[str, Any] | None = None) -> None:
    """``aclmdlRIExecuteAsync``: replay ``model`` on ``stream``."""
    device._check_stream(stream)
    device.refuse_in_host_function("aclmdlRIExecuteAsync")
    device.captures.execute(model, stream, context)


def model_destroy(device: SimDevice, model: SimModel) -> None:
    """``aclmdlRIDestroy``."""
    device.captures.destroy(model)


# -- peer access (several devices, see .peer) -------------------------------------------------------
def device_can_access_peer(device: SimDevice, peer: int) -> bool:
    """``aclrtDeviceCanAccessPeer(&can, self.index, peer)``; see :mod:`.peer`."""
    device._check_open()
    return device.peers.can_access(peer)


def device_enable_peer_access(device: SimDevice, peer: int, flags: int = 0) -> None:
    """``aclrtDeviceEnablePeerAccess(peer, flags)`` with this device current: one way, this
    device's streams may then copy to and from ``peer``'s memory."""
    device._check_open()
    device.peers.enable(peer, flags)


def device_disable_peer_access(device: SimDevice, peer: int) -> None:
    """``aclrtDeviceDisablePeerAccess(peer)`` with this device current."""
    device._check_open()
    device.peers.disable(peer)


# -- the latch (a test helper) ---------------------------------------------------------------------
def latch(device: SimDevice, stream: SimStream) -> threading.Event:
    """Hold ``stream`` at this point until the returned event is set (a test helper)."""
    device._check_stream(stream)
    if stream.capture is not None:
        device.captures.forbid(stream.capture, 507009, "a latch")
    gate = threading.Event()
    device.submit_task(stream, Task(LATCH, "latch", latch=gate))
    return gate


# -- timeline trace (sim only, see .recorder) ------------------------------------------------------
def trace_begin(device: SimDevice) -> None:
    """Start recording a :class:`TraceRecord` for every task any stream executes from now on
    (see :mod:`aclpipe.trace`).  A trace already recording is discarded."""
    device._check_open()
    device.recorder = TraceRecorder()


def trace_end(device: SimDevice, timeout: float = 10.0) -> list[TraceRecord]:
    """Stop recording and return the records, ordered by start time.

    Waits (up to ``timeout`` seconds) for the work already enqueued to finish first, so a
    trace ended right after a run completed also holds that run's last tasks; it does not
    consume sticky stream errors."""
    recorder = device.recorder
    if recorder is None:
        raise error_from_code(107000, "trace_end without trace_begin")
    for stream in device.all_streams():
        stream.wait_position(stream.position(), timeout)
    device.recorder = None
    return recorder.records()


def trace_modelled_time(device: SimDevice) -> bool:
    """Trace timestamps are modelled device time when the timing model is on."""
    return device.engines.timing


# -- fault injection (sim only, see .faults) -------------------------------------------------------
def inject_fault(device: SimDevice, kind: str, match: str | None = None, *, code: int | None = None, skip: int = 0,
                 times: int | None = 1, hang: bool = False, run: int | None = None) -> FaultRule:
    """Plant a fault; see :class:`aclpipe.backends.sim.faults.FaultRule`."""
    return device.faults.add(FaultRule(kind, match, code, skip, times, hang, run))


def release_hangs(device: SimDevice) -> None:
    """Let every task held by a planted hang go on."""
    device.faults.release()
