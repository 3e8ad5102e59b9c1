"""The blocking API: one event loop thread per pipeline serves every thread that calls it.

``pipe.run_sync(x=batch)`` is what code without an event loop calls, often from a thread
pool with every thread on the same pipeline (as with ``onnxruntime.InferenceSession.run``).
A pipeline's slot queues, locks and completion waits belong to one event loop at a time
(:mod:`.affinity`), so blocking calls cannot each run an event loop of their own: two at
once would be refused.  Instead they are handed to one event loop thread, started by the
pipeline's first blocking call and stopped by ``close()``:

- Any number of threads may call at once.  Their runs are tasks of that one loop, sharing
  the ``depth`` slots as concurrent ``await pipe.run(...)`` calls would (so they overlap on
  the device); each caller gets its own result, and a thread's calls run in the order it
  made them (it waits for each).
- The async API keeps its guard: while the loop thread has runs in flight, ``await
  pipe.run(...)`` on another event loop raises :class:`EventLoopError`, and so does a
  blocking call while another event loop has runs in flight.
- A blocking call interrupted in its thread (``KeyboardInterrupt``) cancels its run, as a
  cancelled task's run is cancelled.
- The thread is a daemon and holds no reference to the pipeline: a pipeline dropped without
  ``close()`` stops its loop thread when it is collected, and interpreter exit never waits
  for it (a run hung on the device must not hang exit).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import TypeVar

import anyio
from anyio.from_thread import BlockingPortal

__all__ = ["BlockingLoop", "blocking_loop"]

T = TypeVar("T")

#: Where an object's loop is kept (in its ``__dict__``), and the lock that makes it once.
_ATTRIBUTE = "_blocking_loop"
_ATTACHING = threading.Lock()


class BlockingLoop:
    """An event loop thread that runs coroutine functions for blocking callers.

    Parameters
    ----------
    name:
        What it serves, for the thread's name (``"pipeline 'mlp'"``).
    """

    def __init__(self, name: str):
        self.name = name
        self._lock = threading.Lock()  # starting and stopping versus callers taking the portal
        self._portal: BlockingPortal | None = None
        self._thread: threading.Thread | None = None

    def call(self, func: Callable[[], Awaitable[T]]) -> T:
        """Run ``func()`` on the loop thread (started if needed) and return its result."""
        while True:
            portal = self._running_portal()
            try:
                future: Future[T] = portal.start_task_soon(func)
            except RuntimeError:
                if self._portal is portal:
                    raise
                continue  # stopped between taking the portal and using it: a new loop takes it
            try:
                return future.result()
            except BaseException:
                future.cancel()  # interrupted here (a done future ignores it): the task is cancelled
                raise

    def _running_portal(self) -> BlockingPortal:
        with self._lock:
            if self._portal is None:
                self._portal, self._thread = self._start()
            return self._portal

    def _start(self) -> tuple[BlockingPortal, threading.Thread]:
        ready = threading.Event()
        started: list[BlockingPortal | BaseException] = []
        # The target is a function of this object, never of the pipeline: the thread must not
        # keep the pipeline alive, or a pipeline dropped without close() would never be collected.
        thread = threading.Thread(target=_serve, args=(ready, started), name=f"aclpipe blocking calls: {self.name}",
                                  daemon=True)
        thread.start()
        ready.wait()
        outcome = started[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome, thread

    @property
    def running(self) -> bool:
        return self._portal is not None

    def close_with(self, aclose: Callable[[], Awaitable[None]]) -> None:
        """A blocking ``close()``: run ``aclose`` on this loop, then stop the loop, whatever
        ``aclose`` raised (what every owner's ``close`` does)."""
        try:
            self.call(aclose)
        finally:
            self.stop()

    def stop(self) -> None:
        """Let the tasks in flight finish, then end the loop thread; idempotent.  A later
        :meth:`call` starts a new one."""
        with self._lock:
            portal, thread = self._portal, self._thread
            self._portal = self._thread = None
        if portal is None or thread is None:
            return
        if thread is threading.current_thread():
            # Collected on its own loop thread, which cannot wait for itself: another thread asks.
            threading.Thread(target=_stop, args=(portal,), daemon=True).start()
            return
        _stop(portal)
        thread.join()


def blocking_loop(owner: object, name: str) -> BlockingLoop:
    """``owner``'s :class:`BlockingLoop`, made at the first call and kept in ``owner``; its
    thread stops when ``owner`` is collected (not at interpreter exit: see the module docstring)."""
    attached = vars(owner)
    loop = attached.get(_ATTRIBUTE)
    if loop is None:
        with _ATTACHING:
            loop = attached.get(_ATTRIBUTE)
            if loop is None:
                loop = attached[_ATTRIBUTE] = BlockingLoop(name)
                weakref.finalize(owner, loop.stop).atexit = False
    assert isinstance(loop, BlockingLoop)
    return loop


def _serve(ready: threading.Event, started: list[BlockingPortal | BaseException]) -> None:
    try:
        anyio.run(_portal_until_stopped, ready, started)
    except BaseException as error:  # noqa: BLE001 - handed to the thread that waits for the start
        if not ready.is_set():
            started.append(error)
            ready.set()


async def _portal_until_stopped(ready: threading.Event, started: list[BlockingPortal | BaseException]) -> None:
    async with BlockingPortal() as portal:
        started.append(portal)
        ready.set()
        await portal.sleep_until_stopped()


def _stop(portal: BlockingPortal) -> None:
    try:
        portal.call(portal.stop)
    except RuntimeError:
        pass  # stopped already (its loop ended)
