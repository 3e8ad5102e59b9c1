"""The callback thread: host functions run here, in stream order, never on a stream worker.

Like ``aclrtLaunchHostFunc`` with ``ACL_CALLBACK_BLOCK``, a stream that reaches a host
function hands it to this thread and waits until it returns, so work enqueued after it
starts only then.  One thread per device serves every stream, which is also what makes a
host function that synchronizes a stream deadlock here as it does on the device.
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
    """The thread that runs host functions, one call at a time, each blocking its stream
    until it returns (``ACL_CALLBACK_BLOCK``)."""
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
