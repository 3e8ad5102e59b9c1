"""numpy's own thread pools while a simulated device is open: one thread each (threadpoolctl).

The simulator's parallelism is its stream workers: each stream runs its numpy kernels on a
thread of its own.  A multi-threaded BLAS (OpenBLAS, MKL) or OpenMP pool underneath them
starts more threads per matrix product, and OpenBLAS's threads spin between calls, so on
a small machine they take the cores the stream workers need: the quick start's latency was
2 ms with one BLAS thread and 30-50 ms with the default pool, varying run to run.

The pools' sizes are process-wide settings of those libraries (threadpoolctl sets them; no
per-thread limit exists for OpenBLAS), so they are limited while at least one simulated
device is open and restored when the last one closes.  ``ACLPIPE_SIM_BLAS_THREADS`` sets the
limit (default 1; 0 leaves the pools alone).
"""

from __future__ import annotations

import os
import threading
from typing import Any

__all__ = ["ThreadLimit", "blas_thread_limit"]


def blas_thread_limit() -> int:
    """The limit simulated devices apply (``ACLPIPE_SIM_BLAS_THREADS``, default 1; 0: none)."""
    text = os.environ.get("ACLPIPE_SIM_BLAS_THREADS", "").strip()
    if not text:
        return 1
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"ACLPIPE_SIM_BLAS_THREADS must be a whole number of threads (0: no limit), got {text!r}"
                         ) from None
    if value < 0:
        raise ValueError(f"ACLPIPE_SIM_BLAS_THREADS must be >= 0, got {value}")
    return value


class ThreadLimit:
    """A process-wide limit held while any user holds it (each simulated device, once)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._limiter: Any = None

    @property
    def users(self) -> int:
        return self._users

    def acquire(self) -> None:
        """Count one more user; the first applies the limit."""
        with self._lock:
            self._users += 1
            if self._users == 1:
                limit = blas_thread_limit()
                if limit:
                    from threadpoolctl import threadpool_limits

                    self._limiter = threadpool_limits(limits=limit)

    def release(self) -> None:
        """Count one user less; the last restores the pools' own sizes."""
        with self._lock:
            if self._users == 0:
                return
            self._users -= 1
            if self._users == 0 and self._limiter is not None:
                limiter, self._limiter = self._limiter, None
                limiter.restore_original_limits()


#: The one limit of the process.
LIMIT = ThreadLimit()
