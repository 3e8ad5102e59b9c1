"""aclpipe: run DAGs of Ascend NPU (aclnn) operators asynchronously from Python.

The public surface is :data:`__all__`; the layers beneath it, each importing only the ones
below (tests/test_public_api.py keeps it so): ``ray`` (optional) -> ``cli`` -> ``decode``
-> ``pipeline`` -> ``eager`` -> ``onnx`` -> ``trace`` -> ``plan`` -> ``graph`` -> ``testing``
-> ``runtime`` -> ``backends`` -> ``ops``; ``errors``, ``dtypes`` and ``tensor`` serve them all.
"""

from __future__ import annotations

from . import trace
from .dtypes import DType, Format
from .eager import CacheStats, ExecutorCache, OpRunner
from .errors import (
    AclpipeError,
    BackendError,
    ClosedResourceError,
    DeviceFault,
    DeviceOutOfMemory,
    DevicesUnavailableError,
    EventLoopError,
    ExecutionError,
    GraphError,
    HazardError,
    InputCastError,
    InputError,
    InputFormatError,
    InvalidArgumentError,
    PlanError,
    UnsupportedOpError,
)
from .graph import BoundGraph, Graph, LoadLimits, load_graph
from .pipeline import Pipeline, PipelineStats, load_model, run
from .plan import ArenaRule, Plan, PlannedNode, ValuePlacement, make_plan
from .runtime import (
    CachedWorkspace,
    Device,
    DeviceBuffer,
    Event,
    HostBuffer,
    MemInfo,
    MemoryPool,
    PerCallWorkspace,
    PoolBuffer,
    PoolStats,
    StaticWorkspace,
    Stream,
    Workspace,
    WorkspacePool,
    WorkspaceStats,
    device_count,
    make_workspace_strategy,
    open_device,
)
from .tensor import TensorDesc
from .trace import Trace, record_trace

__version__ = "0.1.0"

__all__ = [
    "AclpipeError",
    "ArenaRule",
    "BackendError",
    "BoundGraph",
    "CacheStats",
    "CachedWorkspace",
    "ClosedResourceError",
    "DType",
    "Decoder",
    "Device",
    "DeviceBuffer",
    "DeviceFault",
    "DeviceOutOfMemory",
    "DevicesUnavailableError",
    "Event",
    "EventLoopError",
    "ExecutionError",
    "ExecutorCache",
    "Format",
    "Graph",
    "GraphError",
    "HazardError",
    "HostBuffer",
    "InputCastError",
    "InputError",
    "InputFormatError",
    "InvalidArgumentError",
    "LoadLimits",
    "MemInfo",
    "MemoryPool",
    "OnnxGraph",
    "OpRunner",
    "PerCallWorkspace",
    "Pipeline",
    "PipelineStats",
    "Plan",
    "PlanError",
    "PlannedNode",
    "PoolBuffer",
    "PoolStats",
    "PromptTooLongError",
    "StaticWorkspace",
    "Stream",
    "TensorDesc",
    "Trace",
    "UnsupportedOpError",
    "ValuePlacement",
    "Workspace",
    "WorkspacePool",
    "WorkspaceStats",
    "device_count",
    "load_graph",
    "load_model",
    "load_onnx",
    "make_plan",
    "make_workspace_strategy",
    "open_device",
    "record_trace",
    "run",
    "trace",
]


def __getattr__(name: str) -> object:
    # ONNX import needs the optional ``onnx`` package: load it only when asked for.
    if name in ("load_onnx", "OnnxGraph"):
        from .onnx import importer

        return getattr(importer, name)
    # Decoding reads ONNX decoders: loaded only when asked for, like load_onnx.
    if name in ("Decoder", "PromptTooLongError"):
        from . import decode

        return getattr(decode, name)
    raise AttributeError(f"module 'aclpipe' has no attribute {name!r}")
