"""A device's host-function thread: every host function of the device runs here, one at a time.

``aclrtLaunchHostFunc`` (``hicann/runtime`` ``docs/zh/api_ref/12_execution_control.md``) runs
the function on "the thread registered for the stream" and blocks the stream's later tasks by
default.  The page leaves open whose thread that is; the runtime's source settles it:
``ApiImpl::LaunchHostFunc`` (``src/runtime/api/impl/api_impl.cc``) creates the thread once per
*context* (``Context::CreateContextCallBackThread``) and subscribes every stream that launches
a host function to it.  So host functions of different streams of one device never overlap:
they run one after another, in the order their streams reach them, and one that blocks holds
back the host functions of every stream of the device.  One that synchronizes its own stream
deadlocks here as it does on the device.

aclpipe's compiled completion helper (``host_func_c``) runs on the stream's worker instead of
hopping to this thread (which cannot be observed from C), but it holds :attr:`CallbackThread.lock`
while it runs, as the Python functions do: it too waits for a blocked host function of another
stream, as it would on the device.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from ...errors import HazardError

__all__ = ["CallbackThread", "in_host_function", "refuse_in_host_function"]

_RUNNING = threading.local()  # .fn: the host function this thread is running, if any


def in_host_function() -> bool:
    """Whether the calling thread is running a host function now (of any simulated device)."""
    return getattr(_RUNNING, "fn", None) is not None


def refuse_in_host_function(what: str) -> None:
    """12_execution_control.md (``aclrtLaunchHostFunc`` and ``aclrtLaunchCallback``): a callback
    "should not call resource allocation, resource release, stream synchronize, device
    synchronize, task launch or task abort interfaces, or errors or deadlocks may follow" (it
    runs on the context's one callback thread, which those calls may need).  The runtime has no
    code of its own for it, so the simulator refuses every such call made from inside a host
    function with :class:`~aclpipe.errors.HazardError` naming the call."""
    if in_host_function():
        raise HazardError(f"{what} called from inside a host function: 12_execution_control.md forbids "
                          "allocating, freeing, synchronizing and launching there (it may deadlock or fail on the "
                          "device); do it on the host after the stream passed the host function",
                          first="a host function on the device's callback thread", second=what)


class _Call:
    __slots__ = ("done", "error", "fn")

    def __init__(self, fn: Callable[[], object]):
        self.fn = fn
        self.done = threading.Event()
        self.error: BaseException | None = None


class CallbackThread:
    """The thread that runs one device's host functions, one call at a time in the order they
    arrive, each blocking its stream until it returns (``ACL_CALLBACK_BLOCK``)."""

    def __init__(self, name: str):
        #: Held while any host function of the device runs (here, or a C one on a stream's worker).
        self.lock = threading.Lock()
        self._queue: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()
        self.ident = self._thread.ident

    @property
    def current(self) -> bool:
        """Whether the calling thread is this one (a host function is calling back in)."""
        return threading.get_ident() == self.ident

    def call(self, fn: Callable[[], object]) -> BaseException | None:
        """Run ``fn`` on the callback thread and wait; returns what it raised, if anything."""
        item = _Call(fn)
        self._queue.put(item)
        item.done.wait()
        return item.error

    def run_native(self, fn: Callable[[], object]) -> None:
        """Run a C host function on the calling thread (a stream's worker), one at a time with
        every other host function of the device."""
        with self.lock:
            fn()

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                with self.lock:
                    _RUNNING.fn = item.fn
                    try:
                        item.fn()
                    finally:
                        _RUNNING.fn = None
            except BaseException as exc:  # noqa: BLE001 - a host function's failure belongs to its stream
                item.error = exc
            finally:
                item.done.set()

    def close(self) -> None:
        self._queue.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)
