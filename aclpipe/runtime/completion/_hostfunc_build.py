"""cffi build script for the C host function that completes work (compiled at install).

``aclpipe_advance(args)`` is what streams run when they pass a completion point: it stores
a new value into a per-lane counter (``counter[0]``), writes one byte to a wake pipe, and
last stores the value again into ``counter[1]``: once the host sees ``counter[1]`` reach a
value, that call touches nothing of the host's any more (neither the pipe nor the counter),
so the pipe may be closed.  Before all that it stamps the monotonic clock (``CLOCK_MONOTONIC``,
nanoseconds: the clock ``time.monotonic_ns`` reads on Linux) and the value into the pair at
``counter[2 + 2 * (value % 64)]``,
so the host can tell how long after the device passed a completion point the awaiting task
resumed (``Timeline.passed_at``).  It is plain C so that no Python runs on a runtime thread
(ARCHITECTURE.md 3.2, 6); the simulator's callback thread calls the very same function, so
both backends exercise one completion path.  ``aclpipe_advance_version()`` tells a stale
build (one without ``counter[1]``, or without the copies) from the current one.

The args may also list ``copies`` (``ncopies`` of them, or none): host-to-host byte copies made
after the stamp and before the counter moves.  A run's result uses them to copy its outputs
from the pinned staging (which the stream's D2H copies filled before it reached this host
function) into the arrays handed to the caller, so the loop thread wakes with the copies done.
A plain ``memcpy`` of host memory: no runtime call, which the ``aclrtLaunchHostFunc`` callback
rules (``hicann/runtime`` ``docs/zh/api_ref/12_execution_control.md``) restrict.
"""

import importlib.util
from pathlib import Path
from typing import Any

from cffi import FFI


def _structs() -> Any:
    """structs.py beside this file, loaded by path: at install time aclpipe cannot be imported."""
    path = Path(__file__).resolve().with_name("structs.py")
    spec = importlib.util.spec_from_file_location("aclpipe_completion_structs", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_STRUCTS = _structs()
CDEF = _STRUCTS.STRUCTS + _STRUCTS.FUNCTIONS

SOURCE = r"""
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <errno.h>
#include <time.h>

#define ACLPIPE_STAMPS 64  /* counter[2 + 2 * (v % 64)]: when v was passed; the next one: v */

""" + _STRUCTS.STRUCTS + r"""

static void store_max(int64_t *target, int64_t value)
{
    int64_t seen = __atomic_load_n(target, __ATOMIC_ACQUIRE);
    /* Monotonic: a late host function never moves a lane backwards. */
    while (seen < value &&
           !__atomic_compare_exchange_n(target, &seen, value, 0, __ATOMIC_RELEASE, __ATOMIC_ACQUIRE)) {
    }
}

int aclpipe_advance_version(void)
{
    return 4;
}

void aclpipe_advance(void *raw)
{
    /* Read everything first: once the counter moves, the owner may free the args. */
    aclpipe_advance_args *args = (aclpipe_advance_args *)raw;
    int64_t *counter = args->counter;
    int64_t value = args->value;
    int fd = args->wake_fd;
    int ncopies = args->ncopies;
    aclpipe_copy *copies = args->copies;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t *stamp = counter + 2 + 2 * (value % ACLPIPE_STAMPS);
    /* Before the counter moves; the value beside the stamp tells a reader whose it is (a reader
       takes it only when the value reads the same before and after the stamp). */
    __atomic_store_n(stamp + 1, (int64_t)0, __ATOMIC_RELEASE);
    __atomic_store_n(stamp, (int64_t)now.tv_sec * 1000000000 + (int64_t)now.tv_nsec, __ATOMIC_RELEASE);
    __atomic_store_n(stamp + 1, value, __ATOMIC_RELEASE);
    /* The copies land before the counter moves (its release store publishes them): whoever
       sees the value may read the destinations. */
    for (int i = 0; i < ncopies; ++i) {
        if (copies[i].nbytes)
            memcpy(copies[i].dst, copies[i].src, copies[i].nbytes);
    }
    store_max(counter, value);
    if (fd >= 0) {
        char byte = 1;
        ssize_t written;
        do {
            written = write(fd, &byte, 1);
        } while (written < 0 && errno == EINTR);
        /* EAGAIN means the pipe is already full of wake-ups: the reader will look anyway. */
    }
    /* The last touch: from here on the host may close the pipe and free the counter. */
    store_max(counter + 1, value);
}
"""

ffibuilder = FFI()
ffibuilder.cdef(CDEF)
ffibuilder.set_source("aclpipe.runtime.completion._hostfunc", SOURCE)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
