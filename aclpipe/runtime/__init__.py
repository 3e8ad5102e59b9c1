"""Device, Stream, Event, DeviceBuffer, HostBuffer, MemoryPool: written once over any backend."""

from .buffer import DeviceBuffer, HostBuffer
from .device import Device, MemInfo, device_count, open_device
from .event import Event
from .pool import MemoryPool, PoolBuffer, PoolStats
from .stream import Stream

__all__ = ["Device", "MemInfo", "open_device", "device_count", "Stream", "Event", "DeviceBuffer", "HostBuffer",
           "MemoryPool", "PoolBuffer", "PoolStats"]
