"""Launch tables on ascend: a slot's waits, records, kernels and copies walked in C.

:class:`AscendLaunchTable` turns :class:`~aclpipe.backends.protocol.LaunchRecord` rows into
an array of C structs once; a run is then one call, ``aclpipe_enqueue`` (compiled at install
from :mod:`._launch_build`), which calls ``aclrtStreamWaitEvent``, ``aclrtRecordEvent``,
``aclnnXxx`` and ``aclrtMemcpyAsync`` through function pointers and stops at the first
refusal, returning its index.  Without the compiled helper the same calls go through cffi
one by one from a flat Python list.

What can be checked once is checked when the table is made (live streams and events,
repeatable executors with the workspace phase one asked for); the device keeps an *epoch*
that every stream, event or executor destruction advances, and a table checks its handles
again before the first run after that, so a destroyed handle is refused in Python instead
of handed to CANN.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..protocol import LaunchKind, LaunchRecord, MemcpyKind
from .cdefs import ffi as abi

if TYPE_CHECKING:
    from .executor import AscendExecutor
    from .library import CannLibrary

try:  # compiled at install; the fallback below does the same calls from Python
    from ._launch import ffi as api_ffi
    from ._launch import lib as api_lib
except ImportError:  # pragma: no cover - only without a C compiler at install
    api_ffi = api_lib = None

__all__ = ["AscendLaunchTable", "compiled"]


def compiled() -> bool:
    """Whether tables are walked by the compiled C helper (else by a Python loop)."""
    return api_lib is not None


def _address(function: Any) -> int:
    return int(abi.cast("uintptr_t", function))


class AscendLaunchTable:
    """The rows of one table, as C structs (or cffi calls), with what errors name per row.

    Parameters
    ----------
    library:
        The loaded CANN libraries.
    records:
        The rows, checked by the caller.
    names:
        Per row: the C function's name (for the error message) and its context (node, op,
        stream, event).
    """

    def __init__(self, library: CannLibrary, records: Sequence[LaunchRecord], names: list[tuple[str, dict[str, Any]]]):
        self.records = tuple(records)
        self.names = names
        self.epoch = -1  # the device epoch its handles were last checked at
        self.executors: list[AscendExecutor] = [r.executor for r in records if r.kind == LaunchKind.KERNEL]
        runtime = library.runtime
        self._calls: Any = None
        self._rows: Any = None
        self._python: list[tuple[Callable[..., int], tuple[Any, ...]]] = []
        if api_ffi is not None:
            self._calls = api_ffi.new("aclpipe_runtime_calls *", {
                "stream_wait_event": _address(runtime.aclrtStreamWaitEvent),
                "record_event": _address(runtime.aclrtRecordEvent),
                "memcpy_async": _address(runtime.aclrtMemcpyAsync)})
            self._rows = api_ffi.new("aclpipe_launch[]", max(len(records), 1))
            for index, record in enumerate(records):
                self._fill(self._rows[index], record)
        else:
            self._python = [self._call(runtime, record) for record in records]

    @staticmethod
    def _fill(row: Any, record: LaunchRecord) -> None:
        row.kind = int(record.kind)
        if record.kind in (LaunchKind.WAIT, LaunchKind.RECORD):
            row.stream, row.event = api_ffi.cast("void *", _address(record.stream.handle)), \
                api_ffi.cast("void *", _address(record.event.handle))
        elif record.kind == LaunchKind.KERNEL:
            executor = record.executor
            row.function = _address(executor.phase_two)
            row.stream = api_ffi.cast("void *", _address(record.stream.handle))
            row.executor = api_ffi.cast("void *", _address(executor.handle))
            row.workspace = api_ffi.cast("void *", record.workspace)
            row.workspace_size = record.workspace_size
        else:
            row.stream = api_ffi.cast("void *", _address(record.stream.handle))
            row.copy_kind = int(record.copy_kind)
            row.dst, row.src, row.nbytes = api_ffi.cast("void *", record.dst), api_ffi.cast("void *", record.src), \
                record.nbytes

    @staticmethod
    def _call(runtime: Any, record: LaunchRecord) -> tuple[Callable[..., int], tuple[Any, ...]]:
        if record.kind == LaunchKind.WAIT:
            return runtime.aclrtStreamWaitEvent, (record.stream.handle, record.event.handle)
        if record.kind == LaunchKind.RECORD:
            return runtime.aclrtRecordEvent, (record.event.handle, record.stream.handle)
        if record.kind == LaunchKind.KERNEL:
            executor = record.executor
            return executor.phase_two, (abi.cast("void *", record.workspace), record.workspace_size, executor.handle,
                                        record.stream.handle)
        if not record.nbytes:
            return (lambda: 0), ()
        return runtime.aclrtMemcpyAsync, (abi.cast("void *", record.dst), record.nbytes, abi.cast("void *", record.src),
                                          record.nbytes, int(MemcpyKind(record.copy_kind)), record.stream.handle)

    def walk(self) -> tuple[int, int]:
        """Enqueue every row; returns ``(0, count)``, or ``(code, index)`` of the first refusal."""
        if self._rows is not None:
            failed = api_ffi.new("size_t *")
            code = api_lib.aclpipe_enqueue(self._calls, self._rows, len(self.records), failed)
            return (int(code), int(failed[0])) if code else (0, len(self.records))
        for index, (function, arguments) in enumerate(self._python):
            code = function(*arguments)
            if code:
                return int(code), index
        return 0, len(self.records)

