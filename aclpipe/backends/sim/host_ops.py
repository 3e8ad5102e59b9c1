"""Host functions: a Python or C function a stream runs in its order, on the device's host-function thread.

These are :class:`~aclpipe.backends.sim.backend.SimBackend`'s ``host_func`` methods, bound as
they are (see :mod:`.core`); the thread itself is :mod:`.callbacks`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import cffi

from ...errors import error_from_code
from .stream import HOST_FUNC, Task, bare_task

if TYPE_CHECKING:
    from .core import SimDevice
    from .stream import SimStream

__all__ = ["host_func", "host_func_c"]

#: Casts a C function address to something callable (ABI mode: nothing is compiled).
_FFI = cffi.FFI()


def host_func(device: SimDevice, stream: SimStream, fn: Callable[[], None], name: str = "") -> None:
    """``aclrtLaunchHostFunc``: run ``fn`` on the device's host-function thread when the stream
    reaches it, blocking the stream's later tasks until it returns."""
    device._check_stream(stream)
    rule_name = name or getattr(fn, "__name__", "host_func")
    _check_host_func_allowed(device, stream)
    planted = device.faults.check("host_func", rule_name, None)
    run = fn
    if planted is not None:
        code = planted.code or 507000

        def run() -> None:
            raise error_from_code(code, f"injected fault in host function {rule_name}")

    stream.host_thread()
    device.submit_task(stream, Task(HOST_FUNC, rule_name, run))


def _check_host_func_allowed(device: SimDevice, stream: SimStream) -> None:
    if stream.capture is not None:
        device.captures.forbid(stream.capture, 507009, "a host function")
    if stream.update is not None:
        raise error_from_code(507009, "only single-op tasks may update a task group, got a host function")


def host_func_c(device: SimDevice, stream: SimStream, fn_address: int, args_address: int) -> None:
    """Run a C ``void fn(void *)`` when the stream reaches it, blocking the stream's later tasks
    until it returns, as ``aclrtLaunchHostFunc`` does.  It runs on the stream's worker (no
    Python of the caller's runs, so which thread calls it is not observable); a planted fault
    still fails the stream first."""
    function = _function(fn_address)
    args = _FFI.cast("void *", args_address)
    device._check_stream(stream)
    _check_host_func_allowed(device, stream)
    planted = device.faults.check("host_func", "host_func_c", None)
    if planted is not None:
        # C cannot raise: a planted fault is the runtime reporting the callback failed.  The
        # stream fails first and the function still runs, so whoever it wakes (completion
        # counters) sees the error, instead of waiting for ever for a call that never comes.
        code = planted.code or 507000

        def fail() -> None:
            raise error_from_code(code, "injected fault in host function host_func_c")

        stream.host_thread()
        device.submit_task(stream, Task(HOST_FUNC, "host_func_c", fail))
    # Made like sync_task (every run's completion makes one): the constructor costs twice as much.
    task = bare_task(HOST_FUNC, "host_func_c")
    task.run, task.native = functools.partial(function, args), True
    device.submit_task(stream, task)


@functools.lru_cache(maxsize=64)
def _function(fn_address: int) -> Any:
    """The C function at ``fn_address``, cast once (a program calls the same one every run)."""
    return _FFI.cast("void (*)(void *)", fn_address)
