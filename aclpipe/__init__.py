"""aclpipe: run DAGs of Ascend NPU (aclnn) operators asynchronously from Python."""

from __future__ import annotations

from .dtypes import DType, Format
from .errors import (
    AclpipeError,
    BackendError,
    ClosedResourceError,
    DeviceFault,
    DeviceOutOfMemory,
    ExecutionError,
    GraphError,
    HazardError,
    InvalidArgumentError,
    PlanError,
    UnsupportedOpError,
)
from .executor_cache import CacheStats, ExecutorCache
from .graph import BoundGraph, Graph, load_graph
from .pipeline import Pipeline, PipelineStats
from .plan import Plan, PlannedNode, ValuePlacement, make_plan
from .runner import OpRunner
from .runtime import (
    Device,
    DeviceBuffer,
    Event,
    HostBuffer,
    MemInfo,
    MemoryPool,
    PoolBuffer,
    PoolStats,
    Stream,
    device_count,
    open_device,
)
from . import trace
from .tensor import TensorDesc
from .trace import Trace, record_trace
from .workspace import CachedWorkspace, PerCallWorkspace, Workspace, WorkspacePool, WorkspaceStats, make_workspace_strategy

__version__ = "0.1.0"

__all__ = [
    "AclpipeError", "BackendError", "ClosedResourceError", "DeviceFault", "DeviceOutOfMemory",
    "ExecutionError", "GraphError", "HazardError", "InvalidArgumentError", "PlanError", "UnsupportedOpError",
    "DType", "Format", "TensorDesc",
    "Device", "DeviceBuffer", "Event", "HostBuffer", "MemInfo", "Stream", "device_count", "open_device",
    "MemoryPool", "PoolBuffer", "PoolStats",
    "Graph", "BoundGraph", "load_graph", "Plan", "PlannedNode", "ValuePlacement", "make_plan",
    "Pipeline", "PipelineStats",
    "OpRunner", "ExecutorCache", "CacheStats", "Workspace", "WorkspaceStats", "PerCallWorkspace", "CachedWorkspace",
    "WorkspacePool", "make_workspace_strategy",
    "Trace", "record_trace", "trace",
    "load_onnx", "OnnxGraph",
]


def __getattr__(name: str) -> object:
    # ONNX import needs the optional ``onnx`` package: load it only when asked for.
    if name in ("load_onnx", "OnnxGraph"):
        from .onnx import importer

        return getattr(importer, name)
    raise AttributeError(f"module 'aclpipe' has no attribute {name!r}")
