"""The report thread: host callbacks for CANN releases without ``aclrtLaunchHostFunc``.

``aclrtLaunchCallback`` runs a callback only on a thread subscribed to the stream with
``aclrtSubscribeReport``, inside that thread's ``aclrtProcessReport``.  As torch_npu and the
runtime samples do (reference/acl_api.md section 4), one private thread per device sets the
device's context and loops ``aclrtProcessReport(100)``; every stream of the device is
subscribed to it when created and unsubscribed before it is destroyed.  The rules kept here
(section 5): one subscribed thread per stream, one device per thread.

The callbacks are aclpipe's C completion function, so no Python runs in them; the loop
itself is Python but calls into C with the GIL released (cffi does), waiting at most 100 ms.

An idle poll is no failure, whichever generation of codes the runtime answers with: current
CANN returns ``ACL_ERROR_RT_THREAD_SUBSCRIBE`` (107012, no stream subscribed to the thread) and
``ACL_ERROR_RT_REPORT_TIMEOUT`` (507012, no callback came), as ``aclrtProcessReportImpl``
(``src/acl/aclrt_impl/callback.cpp``) passes the runtime's codes on; older releases returned the
deprecated 100035 and 100036.  Real failures are kept, at most :data:`MAX_ERRORS` of them (the
first ones, which explain the rest), and counted.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from ...errors import BackendError
from .cdefs import (
    ACL_ERROR_RT_REPORT_TIMEOUT,
    ACL_ERROR_RT_THREAD_SUBSCRIBE,
    ACL_ERROR_THREAD_NOT_SUBSCRIBE,
    ACL_ERROR_WAIT_CALLBACK_TIMEOUT,
)

if TYPE_CHECKING:
    from .library import CannLibrary

__all__ = ["IDLE_CODES", "MAX_ERRORS", "POLL_MS", "ReportThread"]

POLL_MS = 100
#: How many failures a report thread keeps (later ones are only counted).
MAX_ERRORS = 16
#: What ``aclrtProcessReport`` answers when no callback came or no stream is subscribed (yet, or
#: any more): both generations of codes.
IDLE_CODES = frozenset({0, ACL_ERROR_THREAD_NOT_SUBSCRIBE, ACL_ERROR_WAIT_CALLBACK_TIMEOUT,
                        ACL_ERROR_RT_THREAD_SUBSCRIBE, ACL_ERROR_RT_REPORT_TIMEOUT})


class ReportThread:
    """A thread running ``aclrtProcessReport`` for the streams subscribed to it.

    Parameters
    ----------
    library:
        The loaded CANN libraries.
    context:
        The device's ``aclrtContext``: set on the thread before anything else.
    name:
        Thread name (for debuggers).
    """

    def __init__(self, library: CannLibrary, context: Any, name: str):
        self._library = library
        self._context = context
        self._condition = threading.Condition()
        self._subscribed = 0
        self._stopping = False
        self.errors: list[BackendError] = []  #: the first :data:`MAX_ERRORS` failures
        self.failures = 0  #: every failure, kept or not
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()
        # threading's ident is pthread_self() on POSIX: the id aclrtSubscribeReport expects.
        self.thread_id = int(self._thread.ident or 0)

    def subscribe(self, stream: Any) -> None:
        """Route ``stream``'s callbacks to this thread."""
        self._library.check(self._library.runtime.aclrtSubscribeReport(self.thread_id, stream),
                            "aclrtSubscribeReport")
        with self._condition:
            self._subscribed += 1
            self._condition.notify_all()

    def unsubscribe(self, stream: Any) -> None:
        """Stop serving ``stream`` (its callbacks must have run: synchronize it first)."""
        code = self._library.runtime.aclrtUnSubscribeReport(self.thread_id, stream)
        with self._condition:
            self._subscribed -= 1
        self._library.check(code, "aclrtUnSubscribeReport")

    def _loop(self) -> None:
        runtime = self._library.runtime
        code = runtime.aclrtSetCurrentContext(self._context)
        if code:
            self._failed(code, "aclrtSetCurrentContext on the report thread")
            return
        while self._wait_for_streams():
            code = runtime.aclrtProcessReport(POLL_MS)
            if code in IDLE_CODES:
                continue  # a callback ran, none came, or the last stream just left
            self._failed(code, "aclrtProcessReport")
            time.sleep(POLL_MS / 1000)  # do not spin on a persistent failure

    def _failed(self, code: int, what: str) -> None:
        self.failures += 1
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(self._library.error(code, what))

    def _wait_for_streams(self) -> bool:
        # Without a subscribed stream aclrtProcessReport returns at once: sleep instead.
        with self._condition:
            while self._subscribed == 0 and not self._stopping:
                self._condition.wait()
            return not self._stopping

    def close(self) -> None:
        """Stop the thread (every stream must be unsubscribed already)."""
        with self._condition:
            self._stopping = True
            self._condition.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=5 * POLL_MS / 1000 + 5)
