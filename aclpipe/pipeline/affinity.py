"""Which thread and event loop a pipeline serves: one at a time, refused otherwise.

A :class:`~aclpipe.pipeline.Pipeline` is not thread-safe, by design: its slot queues, enqueue
lock, fault log and completion pump belong to the event loop that uses them, and making every
run take locks would cost the host time a run is meant to save.  What it does instead is
notice.  While a pipeline is *in use* (a task is inside ``run``, ``stream``, ``aclose``,
``prepare`` or ``plan_for``, or a ``stream`` generator holds runs in flight) it belongs to
that thread and event loop; a call from any other thread or event loop meanwhile raises
:class:`EventLoopError` before it touches anything.  Once idle, any thread or loop may use it
(asyncio, then trio, then a worker thread): the check costs one uncontended lock per call.

The blocking API is not refused this way between its own callers: ``run_sync`` and ``close``
hand every call to the pipeline's one event loop thread (:mod:`.sync`), so any number of
threads may call them at once; they are refused only while another event loop has the
pipeline in use (and from inside a running event loop, where they would block it).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from collections.abc import Iterator

from ..errors import EventLoopError

__all__ = ["LoopAffinity", "refuse_inside_event_loop", "running_loop"]

get_ident = threading.get_ident


def running_loop() -> object | None:
    """The event loop running in this thread (asyncio's loop, or trio's run token), or None.

    Asked directly of asyncio and trio, the two libraries anyio runs on: their lookups cost a
    few hundred nanoseconds, where ``anyio.lowlevel.current_token()`` costs microseconds, and
    this runs on every call of the pipeline."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        pass
    trio = sys.modules.get("trio")  # only a loaded trio can be running
    if trio is not None:
        try:
            token: object = trio.lowlevel.current_trio_token()
        except RuntimeError:
            return None
        return token
    return None


def _describe(owner: tuple[int, object | None]) -> str:
    thread = next((t.name for t in threading.enumerate() if t.ident == owner[0]), f"thread {owner[0]}")
    return f"thread {thread!r}" + (" with its event loop" if owner[1] is not None else " (no event loop)")


class LoopAffinity:
    """The thread and event loop using an object now, and how many calls are inside it.

    Parameters
    ----------
    what:
        The object's name in error messages (``"pipeline 'mlp'"``).
    """

    def __init__(self, what: str):
        self.what = what
        self._lock = threading.Lock()
        self._owner: tuple[int, object | None] | None = None
        self._depth = 0

    def enter(self, call: str) -> None:
        """Claim the object for this thread and loop, or raise :class:`EventLoopError`."""
        me = (get_ident(), running_loop())
        with self._lock:
            owner = self._owner
            if owner is not None and owner != me:
                raise EventLoopError(
                    f"{call}: {self.what} is in use by {_describe(owner)}; a pipeline serves one thread and "
                    "event loop at a time. From threads without an event loop call pipe.run_sync (any number "
                    "of threads may), give each event loop its own Pipeline (they may share a Device), or "
                    "hand the work to the owning loop (anyio.from_thread.run)")
            self._owner = me
            self._depth += 1

    def leave(self) -> None:
        with self._lock:
            self._depth -= 1
            if not self._depth:
                self._owner = None

    @contextlib.contextmanager
    def use(self, call: str) -> Iterator[None]:
        """``with affinity.use("run"):`` around a call (async bodies included)."""
        self.enter(call)
        try:
            yield
        finally:
            self.leave()

    @property
    def busy(self) -> bool:
        return self._owner is not None


def refuse_inside_event_loop(call: str) -> None:
    """Raise :class:`EventLoopError` when this thread runs an event loop (a blocking call there
    would stall every other task, or deadlock on work only that loop can finish)."""
    if running_loop() is not None:
        raise EventLoopError(f"{call} blocks, so it cannot be called from inside a running event loop; "
                             "await the async form instead (await pipe.run(...), await pipe.aclose())")
