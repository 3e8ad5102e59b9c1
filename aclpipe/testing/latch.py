"""A latch: hold a stream at a point until the test releases it (cuda.core's test latch).

``gate = latch(stream)`` enqueues a task that blocks ``stream`` there; work enqueued after it
waits, other streams keep running, and ``gate.release()`` lets the stream go on.  Tests use
it to control completion order without sleeping: "while the producer is held, the consumer
has not run" is a fact, not a timing guess.

On the simulator the latch is a device-side task (``backend.latch``): it holds only its own
stream.  On a backend without one it is a host function that blocks on a
:class:`threading.Event`.  That also holds the stream, and occupies the thread that runs its
host functions while it waits, which is the *device's* one callback thread (the runtime
makes one per context: ``ApiImpl::LaunchHostFunc``, ``src/runtime/api/impl/api_impl.cc``;
the ``aclrtLaunchCallback`` fallback has one report thread per device too), so host functions
of *other* streams of the device, aclpipe's completion helper included, are delayed until the
release.  Checks that need host functions on another stream while a latch is held must use a
backend with a native latch.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Self

from ..backends.protocol import latching

if TYPE_CHECKING:
    from ..runtime import Stream

__all__ = ["Latch", "latch"]


class Latch:
    """A held point in a stream; :meth:`release` lets the stream continue.

    Also a context manager (released on exit, even when the body raises), and released when
    collected, so a forgotten latch cannot hang a stream for ever.
    """

    def __init__(self, stream: Stream, gate: threading.Event, kind: str):
        self.stream = stream
        self.kind = kind  #: ``"device"`` (a native latch task) or ``"host_func"``
        self._gate = gate
        self._finalizer = weakref.finalize(self, gate.set)

    @property
    def released(self) -> bool:
        return self._gate.is_set()

    def release(self) -> None:
        """Let the stream continue past the latch; idempotent."""
        self._finalizer()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "released" if self.released else "holding"
        return f"<Latch ({self.kind}) {state} stream {self.stream.name}>"


def latch(stream: Stream) -> Latch:
    """Hold ``stream`` at its current end until the returned latch is released.

    Raises
    ------
    NotImplementedError
        The backend has neither a native latch nor host functions.
    """
    native = latching(stream.device.backend)
    if native is not None:
        return Latch(stream, native.latch(stream.handle), "device")
    if not stream.device.capabilities.host_callbacks:
        raise NotImplementedError(f"{stream.device.name} has no latch task and no host functions; "
                                  "a latch cannot hold its streams")
    gate = threading.Event()

    def hold() -> None:
        gate.wait()

    stream.host_func(hold, name="latch")
    return Latch(stream, gate, "host_func")
