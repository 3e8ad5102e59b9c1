"""The aclpipe exception tree and the one table that maps ACL/aclnn codes to it.

Every error a backend reports carries its numeric code; :func:`error_from_code` turns
a code into the right class with the message ``"NAME (code): explanation"`` followed by
what aclpipe knows of the context (node, op, stream).  Codes come from
``shared/reference/acl_api.md`` section 1.4 (runtime) and section 2 (aclnn).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anyio

__all__ = [
    "CODE_TABLE",
    "AclpipeError",
    "BackendError",
    "ClosedResourceError",
    "DeviceFault",
    "DeviceOutOfMemory",
    "DevicesUnavailableError",
    "EventLoopError",
    "ExecutionError",
    "GraphError",
    "HazardError",
    "InputCastError",
    "InputError",
    "InputFormatError",
    "InvalidArgumentError",
    "PlanError",
    "UnsupportedOpError",
    "error_from_code",
]


class AclpipeError(Exception):
    """Root of every error aclpipe raises on purpose."""


class BackendError(AclpipeError):
    """A backend call failed with an ACL or aclnn status code.

    Attributes
    ----------
    code:
        The numeric ``aclError`` / ``aclnnStatus``.
    name:
        The symbolic name, e.g. ``"ACL_ERROR_RT_AICORE_EXCEPTION"``.
    detail:
        What the backend said beyond the code (``aclGetRecentErrMsg`` text, the op, ...).
    context:
        Node, op and stream names when the failing call was part of a graph.
    """

    def __init__(self, code: int, detail: str = "", context: dict[str, Any] | None = None):
        self.code = code
        entry = CODE_TABLE.get(code)
        self.name = entry.name if entry else "UNKNOWN_ACL_ERROR"
        self.explanation = entry.explanation if entry else "unknown status code"
        self.detail = detail
        self.context = dict(context or {})
        super().__init__(self._message())

    def _message(self) -> str:
        text = f"{self.name} ({self.code}): {self.explanation}"
        if self.detail:
            text += f": {self.detail}"
        where = ", ".join(f"{key}={value}" for key, value in self.context.items() if value is not None)
        if where:
            text += f" [{where}]"
        return text

    def __reduce__(self) -> Any:
        return (type(self)._rebuild, (self.code, self.detail, self.context))

    @classmethod
    def _rebuild(cls, code: int, detail: str, context: dict[str, Any]) -> BackendError:
        return error_from_code(code, detail, context)


class InvalidArgumentError(BackendError, ValueError):
    """The device or an operator rejected an argument (aclnn 161001/161002, ACL 100000, 107000, ...)."""


class DeviceOutOfMemory(BackendError, MemoryError):
    """Device memory could not be allocated.

    ``requested``, ``in_use`` and ``limit`` are in bytes when the backend knows them.
    """

    def __init__(
        self,
        code: int = 207001,
        detail: str = "",
        context: dict[str, Any] | None = None,
        *,
        requested: int | None = None,
        in_use: int | None = None,
        limit: int | None = None,
    ):
        self.requested = requested
        self.in_use = in_use
        self.limit = limit
        if requested is not None and not detail:
            detail = (
                f"requested {requested} bytes with {in_use} of {limit} bytes in use; "
                "free buffers, lower the batch size or the pipeline depth, or raise the device capacity"
            )
        super().__init__(code, detail, context)


class DeviceFault(BackendError):
    """A task failed on the device (kernel exception, timeout, a host function that raised)."""


class GraphError(AclpipeError, ValueError):
    """A graph or graph file is malformed: cycle, unknown op, dangling value, shape mismatch."""


class InputError(AclpipeError, ValueError):
    """An input refused before anything runs.

    Attributes
    ----------
    input:
        The input's name, or None when the problem is a file or request as a whole.
    """

    def __init__(self, message: str, *, input: str | None = None):
        self.input = input
        super().__init__(message)

    def __reduce__(self) -> Any:  # keeps ``input`` across processes (Ray sends errors pickled)
        return (_rebuild_input_error, (type(self), str(self), self.input))


def _rebuild_input_error(cls: type[InputError], message: str, input: str | None) -> InputError:
    return cls(message, input=input)


class InputCastError(InputError, TypeError):
    """An input whose values the graph's dtype for it cannot hold as given: a cast numpy does not
    call same-kind (float to int, int to bool), an integer outside the dtype's range, a float
    that would overflow to infinity, or values that are not numbers (JSON ``null``, text).
    Also a :class:`TypeError`, as a dtype mismatch always was."""


class InputFormatError(InputError):
    """An input file or request body that cannot be read safely: not a ``.npy``/``.npz`` file, a
    truncated or malformed archive, a member that is not a ``.npy`` array or whose name repeats,
    data over :class:`~aclpipe.graph.limits.LoadLimits`, or JSON nested too deep."""


class UnsupportedOpError(AclpipeError):
    """An operator is not available on this backend or in this CANN installation."""


class PlanError(AclpipeError):
    """The planner could not place the graph (e.g. a constraint that cannot be met)."""


class ExecutionError(AclpipeError):
    """A node failed while a graph was running.

    Attributes
    ----------
    node, op, stream:
        Where it failed.
    cause:
        The underlying error (usually a :class:`BackendError`), also set as ``__cause__``.
    device:
        The device it failed on, when the pipeline drives several (``"sim:1"``).
    """

    def __init__(self, message: str, *, node: str | None = None, op: str | None = None,
                 stream: str | None = None, cause: BaseException | None = None, device: str | None = None):
        self.node = node
        self.op = op
        self.stream = stream
        self.cause = cause
        self.device = device
        super().__init__(message)


class DevicesUnavailableError(AclpipeError):
    """Every device of a pipeline with several devices is out of rotation after a fault.

    ``faults`` maps each device name to the error that took it out; put a device back with
    ``pipe.restore(name)`` once the cause is fixed.
    """

    def __init__(self, message: str, *, faults: dict[str, BaseException] | None = None):
        self.faults = dict(faults or {})
        super().__init__(message)


class HazardError(AclpipeError):
    """The sanitizer saw two accesses to the same memory with no happens-before between them.

    ``first`` and ``second`` describe both accesses (what, which stream, where enqueued).
    """

    def __init__(self, message: str, *, first: str = "", second: str = ""):
        self.first = first
        self.second = second
        super().__init__(message)


class ClosedResourceError(AclpipeError, anyio.ClosedResourceError):
    """A device, stream, event, buffer or pipeline was used after ``close()``.

    Also an :class:`anyio.ClosedResourceError`, so code that already catches anyio's (the
    same situation on a stream or socket) catches aclpipe's too.
    """


class EventLoopError(AclpipeError, RuntimeError):
    """A call from a thread or event loop that cannot be served there: a second thread or event
    loop while another one has work in a pipeline, or a blocking call (``run_sync``) from
    inside a running event loop (``await pipe.run(...)`` there instead)."""


@dataclass(frozen=True)
class CodeEntry:
    name: str
    explanation: str
    cls: type[BackendError]


def _table() -> dict[int, CodeEntry]:
    rows: list[tuple[int, str, str, type[BackendError]]] = [
        (0, "ACL_SUCCESS", "success", BackendError),
        # runtime (acl_base.h)
        (100000, "ACL_ERROR_INVALID_PARAM", "invalid parameter", InvalidArgumentError),
        (100001, "ACL_ERROR_UNINITIALIZE", "ACL is not initialized", BackendError),
        (100002, "ACL_ERROR_REPEAT_INITIALIZE", "ACL was already initialized", BackendError),
        (100033, "ACL_ERROR_REPEAT_SUBSCRIBE", "stream already subscribed", BackendError),
        (100034, "ACL_ERROR_STREAM_NOT_SUBSCRIBE", "stream not subscribed to a report thread", BackendError),
        (100035, "ACL_ERROR_THREAD_NOT_SUBSCRIBE", "thread not subscribed", BackendError),
        (100036, "ACL_ERROR_WAIT_CALLBACK_TIMEOUT", "waiting for callbacks timed out", DeviceFault),
        (100037, "ACL_ERROR_REPEAT_FINALIZE", "ACL was already finalized", BackendError),
        (200000, "ACL_ERROR_BAD_ALLOC", "memory allocation failed", DeviceOutOfMemory),
        (200001, "ACL_ERROR_API_NOT_SUPPORT", "API not supported", BackendError),
        (200002, "ACL_ERROR_INVALID_DEVICE", "invalid device", InvalidArgumentError),
        (200003, "ACL_ERROR_MEMORY_ADDRESS_UNALIGNED", "memory address is not 32-byte aligned",
         InvalidArgumentError),
        (200004, "ACL_ERROR_RESOURCE_NOT_MATCH", "resource does not match", InvalidArgumentError),
        (200005, "ACL_ERROR_INVALID_RESOURCE_HANDLE", "invalid resource handle", InvalidArgumentError),
        (200006, "ACL_ERROR_FEATURE_UNSUPPORTED", "feature not supported", BackendError),
        (300000, "ACL_ERROR_STORAGE_OVER_LIMIT", "storage over limit", DeviceOutOfMemory),
        (500000, "ACL_ERROR_INTERNAL_ERROR", "internal error", DeviceFault),
        (500001, "ACL_ERROR_FAILURE", "failure", DeviceFault),
        (500002, "ACL_ERROR_GE_FAILURE", "graph engine failure", DeviceFault),
        (500003, "ACL_ERROR_RT_FAILURE", "runtime failure", DeviceFault),
        (500004, "ACL_ERROR_DRV_FAILURE", "driver failure", DeviceFault),
        (500005, "ACL_ERROR_PROFILING_FAILURE", "profiling failure", BackendError),
        # runtime (rt_error_codes.h)
        (107000, "ACL_ERROR_RT_PARAM_INVALID", "invalid runtime parameter", InvalidArgumentError),
        (107001, "ACL_ERROR_RT_INVALID_DEVICEID", "invalid device id", InvalidArgumentError),
        (107002, "ACL_ERROR_RT_CONTEXT_NULL", "no current context", BackendError),
        (107003, "ACL_ERROR_RT_STREAM_CONTEXT", "stream not in current context", InvalidArgumentError),
        (107006, "ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID", "event has no valid timestamp", InvalidArgumentError),
        (107007, "ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL", "event timestamps reversed", InvalidArgumentError),
        (107008, "ACL_ERROR_RT_ADDR_UNALIGNED", "address is not aligned (64 bytes for a device-to-device copy)",
         InvalidArgumentError),
        (107011, "ACL_ERROR_RT_STREAM_SUBSCRIBE", "stream subscribe failed", BackendError),
        (107012, "ACL_ERROR_RT_THREAD_SUBSCRIBE", "thread subscribe failed", BackendError),
        (107015, "ACL_ERROR_RT_STREAM_NO_CB_REG", "callback not registered to stream", BackendError),
        (107017, "ACL_ERROR_RT_INVALID_HANDLE", "invalid handle", InvalidArgumentError),
        (107019, "ACL_ERROR_RT_WAIT_TIMEOUT", "wait timed out", DeviceFault),
        (107020, "ACL_ERROR_RT_TASK_TIMEOUT", "task timed out", DeviceFault),
        (107022, "ACL_ERROR_RT_DEVICE_TASK_ABORT", "a device task abort conflicts with this call", DeviceFault),
        (107023, "ACL_ERROR_RT_STREAM_ABORT", "the stream's tasks are being aborted", DeviceFault),
        # graph capture (aclmdlRI, docs/zh/api_ref/25-01_aclError.md)
        (107024, "ACL_ERROR_RT_CAPTURE_DEPENDENCY", "a captured event wait has no captured record", BackendError),
        (107025, "ACL_ERROR_RT_STREAM_UNJOINED", "a stream pulled into the capture did not rejoin the origin",
         BackendError),
        (107026, "ACL_ERROR_RT_MODEL_CAPTURED", "the model is being captured", BackendError),
        (107027, "ACL_ERROR_RT_STREAM_CAPTURED", "the stream is being captured", BackendError),
        (107028, "ACL_ERROR_RT_EVENT_CAPTURED", "the event was recorded inside a capture", BackendError),
        (107029, "ACL_ERROR_RT_STREAM_NOT_CAPTURED", "the stream is not being captured", BackendError),
        (107030, "ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT", "the capture mode forbids this call", BackendError),
        (107032, "ACL_ERROR_STREAM_CAPTURE_CONFLICT", "the event belongs to another capture", BackendError),
        (107033, "ACL_ERROR_STREAM_TASK_GROUP_STATUS", "task group begin/end or update calls out of order",
         BackendError),
        (107034, "ACL_ERROR_STREAM_TASK_GROUP_INTR", "a task group recording was interrupted", BackendError),
        (107036, "ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED", "capture end without a capture begun on this stream",
         BackendError),
        (107037, "ACL_ERROR_RT_MODEL_RUNNING", "the model is still executing", BackendError),
        (107038, "ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD", "capture end on another thread than its begin",
         BackendError),
        (107041, "ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC", "a synchronizing call inside a capture", BackendError),
        (207000, "ACL_ERROR_RT_FEATURE_NOT_SUPPORT", "feature not supported", BackendError),
        (207001, "ACL_ERROR_RT_MEMORY_ALLOCATION", "device memory allocation failed", DeviceOutOfMemory),
        (207002, "ACL_ERROR_RT_MEMORY_FREE", "device memory free failed", InvalidArgumentError),
        (207004, "ACL_ERROR_RT_NO_DEVICE", "no device", BackendError),
        (207005, "ACL_ERROR_RT_RESOURCE_ALLOC_FAIL", "resource allocation failed", BackendError),
        (207007, "ACL_ERROR_RT_NO_EVENT_RESOURCE", "no event resource", BackendError),
        (207008, "ACL_ERROR_RT_NO_STREAM_RESOURCE", "no stream resource", BackendError),
        (207012, "ACL_ERROR_RT_OVER_LIMIT", "over limit", BackendError),
        (207018, "ACL_ERROR_RT_DEVICE_OOM", "device out of memory", DeviceOutOfMemory),
        (207020, "ACL_ERROR_RT_TIMEOUT", "driver timeout", DeviceFault),
        (507000, "ACL_ERROR_RT_INTERNAL_ERROR", "runtime internal error", DeviceFault),
        (507002, "ACL_ERROR_RT_STREAM_TASK_FULL", "stream task queue full", DeviceFault),
        (507004, "ACL_ERROR_RT_STREAM_NOT_COMPLETE", "stream not complete", DeviceFault),
        (507006, "ACL_ERROR_RT_EVENT_NOT_COMPLETE", "event not complete", DeviceFault),
        (507009, "ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT", "task type not supported here", BackendError),
        (507011, "ACL_ERROR_RT_MODEL_EXECUTE", "model execution failed", DeviceFault),
        (507012, "ACL_ERROR_RT_REPORT_TIMEOUT", "report timeout", DeviceFault),
        (507014, "ACL_ERROR_RT_AICORE_TIMEOUT", "AI core timeout", DeviceFault),
        (507013, "ACL_ERROR_RT_SYS_DMA", "system DMA engine error", DeviceFault),
        (507015, "ACL_ERROR_RT_AICORE_EXCEPTION", "AI core exception", DeviceFault),
        (507042, "ACL_ERROR_RT_AICORE_TRAP_READ_OVERFLOW", "AI core read out of bounds", DeviceFault),
        (507043, "ACL_ERROR_RT_AICORE_TRAP_WRITE_OVERFLOW", "AI core write out of bounds", DeviceFault),
        (507046, "ACL_ERROR_RT_STREAM_SYNC_TIMEOUT", "stream synchronize timed out", DeviceFault),
        (507047, "ACL_ERROR_RT_EVENT_SYNC_TIMEOUT", "event synchronize timed out", DeviceFault),
        (507053, "ACL_ERROR_RT_DEVICE_MEM_ERROR", "uncorrectable device memory error (UCE)", DeviceFault),
        (507899, "ACL_ERROR_RT_DRV_INTERNAL_ERROR", "driver internal error", DeviceFault),
        (507903, "ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED", "the capture was invalidated", BackendError),
        # aclnn (op_errno.h)
        (161001, "ACLNN_ERR_PARAM_NULLPTR", "a required argument is NULL", InvalidArgumentError),
        (161002, "ACLNN_ERR_PARAM_INVALID", "an argument is invalid", InvalidArgumentError),
        (361001, "ACLNN_ERR_RUNTIME_ERROR", "runtime error inside the operator", DeviceFault),
        (561000, "ACLNN_ERR_INNER", "operator internal error", BackendError),
        (561001, "ACLNN_ERR_INNER_INFERSHAPE_ERROR", "shape inference failed", BackendError),
        (561002, "ACLNN_ERR_INNER_TILING_ERROR", "tiling failed", BackendError),
        (561003, "ACLNN_ERR_INNER_FIND_KERNEL_ERROR", "no kernel for these arguments", BackendError),
        (561101, "ACLNN_ERR_INNER_CREATE_EXECUTOR", "executor creation failed", BackendError),
        (561102, "ACLNN_ERR_INNER_NOT_TRANS_EXECUTOR", "executor is not repeatable", BackendError),
        (561103, "ACLNN_ERR_INNER_NULLPTR", "executor is NULL or already used", InvalidArgumentError),
    ]
    return {code: CodeEntry(name, explanation, cls) for code, name, explanation, cls in rows}


CODE_TABLE: dict[int, CodeEntry] = _table()


def error_from_code(code: int, detail: str = "", context: dict[str, Any] | None = None,
                    **fields: Any) -> BackendError:
    """Build the exception for ``code`` (an unknown code gives a plain :class:`BackendError`)."""
    entry = CODE_TABLE.get(code)
    cls = entry.cls if entry else BackendError
    if issubclass(cls, DeviceOutOfMemory):
        return cls(code, detail, context, **fields)
    return cls(code, detail, context)
