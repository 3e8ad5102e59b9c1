"""Floating-point errors inside kernels: inf and nan are data, as on the device.

Kernels that may overflow, divide by zero or make nan run their numpy calls with every
floating-point error ignored.  ``np.errstate`` costs about 1.5 µs each time it is entered,
a tenth of a small kernel, so a thread that runs nothing but kernels (each simulated stream's
worker) ignores them once for good with :func:`ignore_fp_errors_on_this_thread`, and
:func:`ignore_fp_errors` is then a no-op there.  numpy keeps the error state per thread (in a
context variable since numpy 2.0, "allowing different threads ... to have independent
configurations", numpy's "Floating point error handling" page; in the thread's state before),
so other threads, the caller's included, keep numpy's defaults.

A plan's bound run (``OpPlan.bind``) is wrapped once with :func:`fp_errors_ignored`, which
tests the thread's flag itself on each call: 0.1 µs where entering ``ignore_fp_errors()``'s
null context costs 0.4, on launches whose numpy work is 1-2 µs.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["fp_errors_ignored", "ignore_fp_errors", "ignore_fp_errors_on_this_thread"]

_THREAD = threading.local()
_NOTHING = contextlib.nullcontext()


def ignore_fp_errors_on_this_thread() -> None:
    """Ignore every floating-point error on the calling thread from now on."""
    np.seterr(all="ignore")
    _THREAD.ignoring = True


def ignore_fp_errors() -> contextlib.AbstractContextManager[Any]:
    """``np.errstate(all="ignore")``, or nothing on a thread that ignores them already."""
    if getattr(_THREAD, "ignoring", False):
        return _NOTHING
    return np.errstate(all="ignore")


def fp_errors_ignored(run: Callable[[], None]) -> Callable[[], None]:
    """``run`` with every floating-point error ignored, as under :func:`ignore_fp_errors`, on
    whichever thread calls it: directly on one that ignores them already (a stream worker),
    under ``np.errstate`` elsewhere."""
    state = _THREAD

    def guarded() -> None:
        if getattr(state, "ignoring", False):
            run()
            return
        with np.errstate(all="ignore"):
            run()

    return guarded
