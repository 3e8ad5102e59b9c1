"""Python host functions on CANN, for tests and the conformance kit only.

The pipeline completes work through ``host_func_c`` with aclpipe's compiled C function, so no
Python runs on a runtime thread there.  ``Backend.host_func(stream, fn)`` must still run a
Python callable when the stream gets there, blocking the stream until it returns.  It is
implemented with a single cffi callback (``void (*)(void *)``) launched through the same
C path (``aclrtLaunchHostFunc`` or ``aclrtLaunchCallback``), whose argument is a cffi handle
to a :class:`PythonHostCall`.  The callback takes the GIL on the runtime's thread; it never
lets an exception reach C: what ``fn`` raises becomes the stream's host error, reported by
the next ``stream_sync``/``stream_query``/``stream_take_error`` (unlike the simulator, the
device does not skip the work queued after it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ...errors import BackendError, HazardError, error_from_code
from .cdefs import ffi

__all__ = ["HostErrors", "PythonHostCall", "callback_address", "refuse_in_host_function"]

_RUNNING = threading.local()  # .call: the Python host function this thread is running, if any


def refuse_in_host_function(what: str) -> None:
    """Refuse ``what`` when called from inside a Python host function.

    12_execution_control.md (``aclrtLaunchHostFunc``, ``aclrtLaunchCallback``): a callback
    "should not call resource allocation, resource release, stream synchronize, device
    synchronize, task launch or task abort interfaces, or errors or deadlocks may follow": it
    runs on the context's one callback thread.  The runtime has no error code for it (it may
    simply hang), so the binding refuses first, and never makes the context current on the
    runtime's thread for such a call."""
    call = getattr(_RUNNING, "call", None)
    if call is not None:
        raise HazardError(f"{what} called from inside host function {call.name}: 12_execution_control.md forbids "
                          "allocating, freeing, synchronizing and launching there (it may deadlock or fail on the "
                          "device); do it on the host after the stream passed the host function",
                          first=f"host function {call.name} on the context's callback thread", second=what)


class HostErrors:
    """The errors Python host functions raised on one stream, oldest first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._errors: list[BackendError] = []

    def add(self, error: BackendError) -> None:
        with self._lock:
            self._errors.append(error)

    def take(self) -> BackendError | None:
        """The oldest error (the rest are dropped: the first failure explains the others)."""
        if not self._errors:  # the usual answer, without the lock: one read under the GIL
            return None
        with self._lock:
            errors, self._errors = self._errors, []
        return errors[0] if errors else None


class PythonHostCall:
    """One enqueued Python host function; kept alive by ``pending`` until it ran."""

    def __init__(self, fn: Callable[[], None], name: str, errors: HostErrors, pending: set[PythonHostCall]):
        self.fn = fn
        self.name = name
        self.errors = errors
        self.pending = pending
        self.handle = ffi.new_handle(self)
        pending.add(self)

    @property
    def address(self) -> int:
        return int(ffi.cast("uintptr_t", self.handle))

    def run(self) -> None:
        _RUNNING.call = self
        try:
            self.fn()
        except BaseException as raised:  # noqa: BLE001 - never into C: the stream reports it instead
            error = error_from_code(507000, f"host function {self.name} raised {raised!r}")
            error.__cause__ = raised
            self.errors.add(error)
        finally:
            _RUNNING.call = None
            self.pending.discard(self)  # C is done with the handle once this returns


def _trampoline(argument: Any) -> None:
    call = ffi.from_handle(argument)
    call.run()


def _report(exception: Any, value: Any, traceback: Any) -> None:
    return None  # run() catches everything; nothing may propagate into the runtime thread


_CALLBACK: Any = None
_CALLBACK_LOCK = threading.Lock()


def callback_address() -> int:
    """Address of the trampoline, usable wherever an ``aclrtHostFunc``/``aclrtCallback`` is.

    Made on first use: a cffi callback needs executable memory, which the pipeline's C
    completion path never does."""
    global _CALLBACK
    with _CALLBACK_LOCK:
        if _CALLBACK is None:
            _CALLBACK = ffi.callback("void(void *)", _trampoline, onerror=_report)
    return int(ffi.cast("uintptr_t", _CALLBACK))
