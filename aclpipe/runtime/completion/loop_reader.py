"""A timeline's wake pipe watched by an asyncio loop for as long as the timeline lives.

``anyio.wait_readable`` registers the descriptor with the loop's selector at every wait and
unregisters it after: two ``epoll_ctl`` calls per completion, each of which releases the GIL,
so on a machine whose other Python threads are busy (the simulator's streams) the loop
thread may then wait for the GIL before it resumes the caller.  Measured on the development
machine, a thread waking an asyncio task through a pipe: 84-87 µs median with
``wait_readable`` per wait, 68-74 µs with a reader registered once.

:class:`LoopReader` registers once per loop.  It registers a *duplicate* of the pipe's read
end: the timeline's :class:`~aclpipe.runtime.completion.lanes.LaneState` closes the original when the
device has passed everything (possibly on another thread, at any time), and a descriptor
number the loop's selector still holds must never be closed under it, or reused by another
file while registered.  The duplicate is unregistered and closed by :meth:`LoopReader.close`
(on the loop's thread, or handed to it), when the timeline is closed or collected, or when a
later wait comes from another loop.  A loop that was closed meanwhile has dropped its
registrations with its selector, so only the duplicate is closed then.

The callback holds the timeline weakly: a registered reader never keeps a dropped pipeline
alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["READ_BYTES", "LoopReader"]

#: How much of the wake pipe one read drains: a byte per host function that ran since the
#: last read, usually one.  Small enough for Python's small-object allocator (a 4096-byte read
#: allocates from the C heap and shrinks the result: 1 us more per wake-up, hot); bytes left
#: over keep the pipe readable, so the next wait or loop iteration reads them.
READ_BYTES = 256


class LoopReader:
    """One asyncio loop's registration of a duplicate of ``read_fd``; ``on_readable(owner)``
    runs on the loop's thread each time the pipe is readable, after it was drained."""

    def __init__(self, read_fd: int, owner: Any, on_readable: Callable[[Any], None]):
        self._source = read_fd
        self._owner = weakref.ref(owner)
        self._on_readable = on_readable
        self._lock = threading.Lock()  # close() may come from a finalizer on any thread
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fd = -1
        self.wakeups = 0

    def ensure(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Register with ``loop`` (the running one) unless already registered there; False
        when the loop cannot watch descriptors (``add_reader`` is not implemented, as on
        Windows' proactor loop): the caller then waits another way."""
        if self._loop is loop:
            return True
        self.close()
        fd = os.dup(self._source)  # the same open pipe: non-blocking like the original
        try:
            loop.add_reader(fd, self._readable, fd)
        except NotImplementedError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        with self._lock:
            self._loop, self._fd = loop, fd
        return True

    def registered_on(self, loop: asyncio.AbstractEventLoop) -> bool:
        return self._loop is loop

    def close(self, defer: bool = False) -> None:
        """Unregister and close the duplicate (from any thread; idempotent).  ``defer``: never
        on the spot, always through the loop's queue (a finalizer may run inside the loop's
        own selector code, which must not see its map change under it)."""
        with self._lock:
            loop, fd = self._loop, self._fd
            self._loop, self._fd = None, -1
        if loop is None:
            return
        if loop.is_closed():
            os.close(fd)  # the loop's selector went with it: nothing is registered any more
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop and not defer:
            _unregister(loop, fd)
            return
        try:
            loop.call_soon_threadsafe(_unregister, loop, fd)
        except RuntimeError:  # closed meanwhile
            os.close(fd)

    def _readable(self, fd: int) -> None:
        with contextlib.suppress(BlockingIOError, InterruptedError):
            if os.read(fd, READ_BYTES):
                self.wakeups += 1
        owner = self._owner()
        if owner is not None:
            self._on_readable(owner)


def _unregister(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    try:
        if not loop.is_closed():
            loop.remove_reader(fd)
    finally:
        os.close(fd)
