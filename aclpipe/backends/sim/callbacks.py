"""A stream's host-function thread: its host functions run here, in order, never on the worker.

Like ``aclrtLaunchHostFunc`` (``hicann/runtime`` ``docs/zh/api_ref/12_execution_control.md``:
the function runs "on the thread registered for the stream, created inside the call" and
blocks the stream's later tasks by default), a stream that reaches a host function hands it
to its own thread and waits until it returns.  Each stream has its own thread, so host
functions of different streams may run at the same time; one that synchronizes its own
stream deadlocks here as it does on the device.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

__all__ = ["CallbackThread"]


class _Call:
    __slots__ = ("done", "error", "fn")

    def __init__(self, fn: Callable[[], object]):
        self.fn = fn
        self.done = threading.Event()
        self.error: BaseException | None = None


class CallbackThread:
    """The thread that runs one stream's host functions, one call at a time, each blocking the
    stream until it returns (``ACL_CALLBACK_BLOCK``)."""
    def __init__(self, name: str):
        self._queue: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()
        self.ident = self._thread.ident

    def call(self, fn: Callable[[], object]) -> BaseException | None:
        """Run ``fn`` on the callback thread and wait; returns what it raised, if anything."""
        item = _Call(fn)
        self._queue.put(item)
        item.done.wait()
        return item.error

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                item.fn()
            except BaseException as exc:  # noqa: BLE001 - a host function's failure belongs to its stream
                item.error = exc
            finally:
                item.done.set()

    def close(self) -> None:
        self._queue.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)
