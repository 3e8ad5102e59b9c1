"""The backend contract: primitives only, named after the C calls they stand for.

Policy (pooling, retries, event reuse, executor caching, completion) lives once above this
layer in :mod:`aclpipe.runtime` and :mod:`aclpipe.pipeline`, so the simulator tests the
same policy code that real hardware runs.  Handles (streams, events, executors) are opaque
objects owned by the backend; addresses are plain integers.

Every method raises :class:`aclpipe.errors.BackendError` (built from the ACL code) on
failure.  Stream errors are sticky: they surface at the next ``stream_sync`` or
``stream_query`` (or ``stream_take_error``) and are consumed by it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..errors import BackendError
from ..tensor import TensorDesc

__all__ = ["Backend", "Capabilities", "MemcpyKind", "Executor", "sync_streams"]


class MemcpyKind(enum.IntEnum):
    """``aclrtMemcpyKind``."""

    HOST_TO_HOST = 0
    HOST_TO_DEVICE = 1
    DEVICE_TO_HOST = 2
    DEVICE_TO_DEVICE = 3


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do, as data (never a platform check)."""

    host_callbacks: bool = True
    event_timing: bool = True
    max_streams: int = 1024
    sanitizer: bool = False
    fault_injection: bool = False
    timing_model: bool = False
    repeatable_executors: bool = True
    graph_capture: bool = False  # graph_capture_begin/end and graph_launch
    event_errors: bool = False  # event_sync raises the error of a record made on a failed stream


@runtime_checkable
class Executor(Protocol):
    """What phase one returns: the plan of one operator call."""

    op: str
    workspace_size: int


class Backend(Protocol):
    """One opened device."""

    name: str
    index: int
    capabilities: Capabilities

    def close(self) -> None: ...

    # memory ---------------------------------------------------------------------------------
    def mem_alloc(self, nbytes: int, label: str = "") -> int: ...
    def mem_free(self, address: int) -> None: ...
    def mem_alloc_host(self, nbytes: int, label: str = "") -> tuple[int, np.ndarray]: ...
    def mem_free_host(self, address: int) -> None: ...
    def mem_info(self) -> tuple[int, int]: ...
    def host_access(self, address: int, nbytes: int, *, write: bool, what: str) -> None: ...
    def memcpy_async(self, dst: int, src: int, nbytes: int, kind: MemcpyKind, stream: Any,
                     context: Mapping[str, Any] | None = None) -> None: ...
    def memset_async(self, address: int, value: int, nbytes: int, stream: Any) -> None: ...

    # streams --------------------------------------------------------------------------------
    def stream_create(self, priority: int = 0) -> Any: ...
    def stream_destroy(self, stream: Any) -> None: ...
    def stream_sync(self, stream: Any, timeout_ms: int = -1) -> None: ...
    def stream_query(self, stream: Any) -> bool: ...
    def stream_wait_event(self, stream: Any, event: Any) -> None: ...
    def stream_take_error(self, stream: Any) -> Exception | None: ...

    # events ---------------------------------------------------------------------------------
    def event_create(self, timing: bool = False) -> Any: ...
    def event_destroy(self, event: Any) -> None: ...
    def event_record(self, event: Any, stream: Any) -> None: ...
    def event_query(self, event: Any) -> bool: ...
    def event_sync(self, event: Any, timeout_ms: int = -1) -> None: ...
    def event_elapsed(self, start: Any, end: Any) -> float: ...

    # host work and device -------------------------------------------------------------------
    def host_func(self, stream: Any, fn: Callable[[], None], name: str = "") -> None: ...
    def host_func_c(self, stream: Any, fn_address: int, args_address: int) -> None:
        """Enqueue a C host function ``void fn(void *args)`` (``aclrtLaunchHostFunc``)."""
        ...
    def device_sync(self, timeout_ms: int = -1) -> None: ...

    # operators (aclnn two-phase) ------------------------------------------------------------
    def op_prepare(self, op: str, inputs: Sequence[TensorDesc | None],
                   outputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> Executor: ...
    def op_set_repeatable(self, executor: Executor) -> None: ...
    def op_set_tensor_address(self, executor: Executor, index: int, *, output: bool,
                              address: int) -> None: ...
    def op_destroy(self, executor: Executor) -> None: ...
    def op_launch(self, executor: Executor, workspace: int, workspace_size: int, stream: Any,
                  context: Mapping[str, Any] | None = None) -> None: ...


def sync_streams(stream_sync: Callable[[Any, int], None], streams: Iterable[Any], timeout_ms: int = -1) -> None:
    """``device_sync`` written once for every backend: ``stream_sync`` each of ``streams``, then
    raise the first error seen (a failed stream does not keep the others from being waited for)."""
    first: BackendError | None = None
    for stream in streams:
        try:
            stream_sync(stream, timeout_ms)
        except BackendError as error:
            first = first or error
    if first is not None:
        raise first
