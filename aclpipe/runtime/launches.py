"""A slot's launches as a flat table: every wait, record, kernel and copy of a run, fixed in advance.

When nothing in a slot's run varies from run to run (repeatable executors, workspaces pinned
at fixed addresses), preparing turns its steps into :class:`LaunchRecord` rows once, and a
run enqueues the table in one call: a backend with :class:`LaunchTables` walks it natively
(the ascend backend in C), any other backend gets the tight loop below, which calls the
same primitives a node-by-node run would.  A refusal names the node of the failing row
(errors map back by index).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..backends.protocol import Backend, LaunchKind, LaunchRecord, launch_tables
from ..errors import BackendError, ClosedResourceError

__all__ = ["LaunchTable", "enqueue_records"]


def enqueue_records(backend: Backend, records: Sequence[LaunchRecord], run: int | None) -> None:
    """Call the primitive of every record, in order (what a backend without tables gets).

    A refusal raises the backend's error with the record's node, op and index added."""
    # The backend's primitives looked up once: a capture of a 19,367-node program walks 56,000 rows.
    launch, wait, record_event, copy = (backend.op_launch, backend.stream_wait_event, backend.event_record,
                                        backend.memcpy_async)
    for index, record in enumerate(records):
        try:
            kind = record.kind
            if kind == _KERNEL:
                context = record.context if run is None else {**record.context, "run": run}
                launch(record.executor, record.workspace, record.workspace_size, record.stream, context)
            elif kind == _WAIT:
                wait(record.stream, record.event)
            elif kind == _RECORD:
                record_event(record.event, record.stream)
            elif record.nbytes:
                context = record.context if run is None else {**record.context, "run": run}
                copy(record.dst, record.src, record.nbytes, record.copy_kind, record.stream, context)
        except BackendError as error:
            _name_the_row(error, record, index, run)
            raise


_KERNEL, _WAIT, _RECORD = LaunchKind.KERNEL, LaunchKind.WAIT, LaunchKind.RECORD


def _name_the_row(error: BackendError, record: LaunchRecord, index: int, run: int | None) -> None:
    added = {key: value for key, value in {**record.context, "index": index, "run": run}.items()
             if value is not None and key not in error.context}
    if added:
        error.context.update(added)
        error.args = (error._message(),)


class LaunchTable:
    """The launches of one slot's run (or of its tail), enqueued with one call.

    Parameters
    ----------
    backend:
        Where they go; a :class:`LaunchTables` backend gets a native table.
    records:
        The rows, in enqueue order.
    """

    def __init__(self, backend: Backend, records: Sequence[LaunchRecord]):
        self.backend = backend
        self.records = tuple(records)
        self._tables = launch_tables(backend)
        self._native: Any = self._tables.table_create(self.records) if self._tables is not None else None
        self.closed = False

    @property
    def native(self) -> bool:
        """Whether the backend walks the table itself."""
        return self._native is not None

    def enqueue(self, run: int | None = None) -> None:
        """Enqueue every row; ``run`` goes into the context of each launch (for fault windows)."""
        if self.closed:
            raise ClosedResourceError("this launch table was closed with its program")
        if self._native is not None:
            assert self._tables is not None
            self._tables.table_enqueue(self._native, run)
        else:
            enqueue_records(self.backend, self.records, run)

    def close(self) -> None:
        """Free the native table, if any; idempotent."""
        self.closed = True
        native, self._native = self._native, None
        if native is not None and self._tables is not None and not self.backend.closed:
            self._tables.table_destroy(native)

    def __len__(self) -> int:
        return len(self.records)

    def __repr__(self) -> str:
        return f"<LaunchTable {len(self.records)} rows{' native' if self._native is not None else ''}>"
