"""Completion: how the host learns that a stream passed a point, without polling.

A stream runs one small C host function (:mod:`.host_function`, built from
:mod:`._hostfunc_build` at install) at each completion point: it stamps the time, makes a
run's output copies, raises the lane's counter and writes a byte to a wake pipe.  Per stream a
:mod:`.lanes` counter; one :mod:`.loop_reader` watches the pipe from the event loop; the
:mod:`.timeline` ties them together (``enqueue_advance`` on a stream, ``await wait(lane,
value)`` on the host).  The C structs both sides share are declared once, in
:mod:`.structs` (ARCHITECTURE.md 3.2, 6).
"""

from __future__ import annotations

from .host_function import COMPILED, COUNTER_LENGTH, HOST_FUNC_ADDRESS, STAMPS, HostCopies, ffi
from .timeline import Timeline

__all__ = ["COMPILED", "COUNTER_LENGTH", "HOST_FUNC_ADDRESS", "STAMPS", "HostCopies", "Timeline", "ffi"]
