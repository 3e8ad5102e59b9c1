"""The completion host function: compiled C when it was built at install, else a Python fallback.

``aclpipe_advance(args)`` runs on a runtime thread when a stream passes a completion point.
``args`` is an ``aclpipe_advance_args``: a pointer to the lane's two counters, the value to
publish, the wake pipe's write end and the host-to-host copies to make first (``ncopies``
``aclpipe_copy`` entries: a run's outputs, staging to the caller's arrays).  In order, after
the stamp below and the copies, it raises ``counter[0]`` to the value,
writes one byte to the pipe, and raises ``counter[1]`` to the value: once the host sees
``counter[1]`` reach the value, that call touches nothing of the host's any more.  First of
all it stamps the monotonic clock (nanoseconds, ``CLOCK_MONOTONIC``: ``time.monotonic_ns`` on
Linux) and then the value into the pair at ``counter[2 + 2 * (value % STAMPS)]``, so a lane's
counter array holds ``COUNTER_LENGTH`` integers.

The compiled function (:mod:`aclpipe.runtime.completion._hostfunc_build`, built by ``pip install`` or
``python setup.py build_ext --inplace``; it needs a C compiler) runs no Python on the
runtime thread (ARCHITECTURE.md 3.2, 6).  Where it is missing (installed without a compiler,
or a source checkout that was not built), a cffi callback in ABI mode stands in: same
arguments, same order of effects, but it takes the GIL on the runtime thread, so it is
slower, and :data:`COMPILED` is False (``aclpipe devices`` says which one is in use).
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from .structs import STRUCTS

__all__ = ["COMPILED", "COUNTER_LENGTH", "HOST_FUNC_ADDRESS", "STAMPS", "HostCopies", "ffi"]

_CDEF = STRUCTS

#: The ABI version of the compiled helper this module expects (``counter[1]``, the stamps and
#: the copies).
_VERSION = 4
#: How many recent values keep their stamp (``ACLPIPE_STAMPS`` in the C source).
STAMPS = 64
#: Integers in a lane's counter array: passed, returned, then the stamps.
COUNTER_LENGTH = 2 + 2 * STAMPS


def _compiled() -> tuple[Any, int] | None:
    try:
        from ._hostfunc import ffi as compiled_ffi
        from ._hostfunc import lib
    except ImportError:
        return None
    if getattr(lib, "aclpipe_advance_version", lambda: 1)() != _VERSION:
        warnings.warn("aclpipe's compiled completion helper is from an older build; rebuild it with "
                      "'python setup.py build_ext --inplace' (using the Python fallback meanwhile)",
                      RuntimeWarning, stacklevel=3)
        return None
    return compiled_ffi, int(compiled_ffi.cast("uintptr_t", compiled_ffi.addressof(lib, "aclpipe_advance")))


def _fallback() -> tuple[Any, int, Any]:
    import cffi

    fallback_ffi: Any = cffi.FFI()
    fallback_ffi.cdef(_CDEF)
    lock = threading.Lock()  # the max-stores below must not interleave between two runtime threads

    def store_max(counter: Any, index: int, value: int) -> None:
        with lock:
            if counter[index] < value:
                counter[index] = value

    def advance(raw: Any) -> None:
        args = fallback_ffi.cast("aclpipe_advance_args *", raw)
        counter, value, fd = args.counter, int(args.value), int(args.wake_fd)
        at = 2 + 2 * (value % STAMPS)
        counter[at + 1] = 0
        counter[at] = time.monotonic_ns()
        counter[at + 1] = value
        for index in range(int(args.ncopies)):
            copy = args.copies[index]
            if copy.nbytes:
                fallback_ffi.memmove(copy.dst, copy.src, int(copy.nbytes))
        store_max(counter, 0, value)
        if fd >= 0:
            try:
                os.write(fd, b"\1")
            except (BlockingIOError, InterruptedError):
                pass  # a full pipe already holds wake-ups: the reader will look anyway
        store_max(counter, 1, value)

    callback = fallback_ffi.callback("void(void *)", advance)
    return fallback_ffi, int(fallback_ffi.cast("uintptr_t", callback)), callback


_found = _compiled()
COMPILED: bool = _found is not None
if _found is not None:
    ffi, HOST_FUNC_ADDRESS = _found
    _KEEP: Any = None
else:
    # Kept for the life of the process: runtime threads may call it until the very end.
    ffi, HOST_FUNC_ADDRESS, _KEEP = _fallback()


class HostCopies:
    """Copies a completion host function makes before it publishes its value: from fixed host
    sources (a slot's output staging) into arrays made fresh for each run, so that the loop
    thread wakes with a run's outputs already copied into the arrays its caller gets.

    Each :meth:`fresh` table is read by the host function of one run, which makes the copies
    after the stream passed everything before it (the run's D2H copies into the sources) and
    before its counter moves; the timeline keeps the table and the arrays alive until then.
    """

    def __init__(self, sources: Sequence[np.ndarray]):
        #: (source view, its address as cdata, its size) per copy; the views keep them alive
        self._sources = [(source, ffi.from_buffer(source), source.nbytes) for source in sources]

    def fresh(self) -> tuple[Any, list[np.ndarray]]:
        """``(table, arrays)``: new arrays shaped like the sources, and a new ``aclpipe_copy[]``
        table that copies each source into its array (for :meth:`Timeline.enqueue_advance`)."""
        table = ffi.new("aclpipe_copy[]", len(self._sources))
        arrays = []
        for entry, (source, address, nbytes) in zip(table, self._sources, strict=True):
            array = np.empty_like(source)
            entry.dst = ffi.from_buffer(array)
            entry.src = address
            entry.nbytes = nbytes
            arrays.append(array)
        return table, arrays
