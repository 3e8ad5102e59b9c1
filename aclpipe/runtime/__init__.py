"""Device, Stream, Event, buffers, MemoryPool, the completion Timeline and the workspace
strategies: policy written once over any backend."""

from .buffer import DeviceBuffer, HostBuffer
from .completion import HOST_FUNC_ADDRESS, Timeline
from .device import Device, MemInfo, device_count, open_device
from .event import Event
from .pool import MemoryPool, PoolBuffer, PoolStats
from .stream import Stream
from .workspaces import (
    NO_WORKSPACE,
    STRATEGIES,
    CachedWorkspace,
    PerCallWorkspace,
    StaticWorkspace,
    StreamOrderedWorkspace,
    Workspace,
    WorkspacePool,
    WorkspaceStats,
    WorkspaceStrategy,
    make_workspace_strategy,
    workspace_strategy,
)

__all__ = [
    "HOST_FUNC_ADDRESS",
    "NO_WORKSPACE",
    "STRATEGIES",
    "CachedWorkspace",
    "Device",
    "DeviceBuffer",
    "Event",
    "HostBuffer",
    "MemInfo",
    "MemoryPool",
    "PerCallWorkspace",
    "PoolBuffer",
    "PoolStats",
    "StaticWorkspace",
    "Stream",
    "StreamOrderedWorkspace",
    "Timeline",
    "Workspace",
    "WorkspacePool",
    "WorkspaceStats",
    "WorkspaceStrategy",
    "device_count",
    "make_workspace_strategy",
    "open_device",
    "workspace_strategy",
]
