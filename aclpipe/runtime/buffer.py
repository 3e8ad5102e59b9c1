"""Device and pinned host buffers: owned memory, freed by ``close()`` or when collected.

A :class:`DeviceBuffer` is an opaque device address and a size; the host reaches its bytes
only through stream copies.  A :class:`HostBuffer` is pinned host memory (``aclrtMallocHost``)
that async copies read and write; :meth:`HostBuffer.numpy` hands out a numpy view and, on
a sanitizing device, checks that no copy still in flight touches those bytes.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..dtypes import as_dtype
from ..errors import ClosedResourceError

if TYPE_CHECKING:
    from .device import Device

__all__ = ["DeviceBuffer", "HostBuffer"]


def _free_device(backend: Any, address: int) -> None:
    if not backend.closed:
        backend.mem_free(address)


def _free_host(backend: Any, address: int) -> None:
    if not backend.closed:
        backend.mem_free_host(address)


class _Buffer:
    """What both kinds of buffer share: ``nbytes`` at ``address``, owned until :meth:`close` or
    garbage collection frees it."""

    def __init__(self, device: Device, address: int, nbytes: int, label: str,
                 release: Callable[[Any, int], None]):
        self.device = device
        self.address = address
        self.nbytes = nbytes
        self.label = label
        # Any arguments: subclasses (the pool's PoolBuffer) finalize differently.
        self._finalizer: weakref.finalize[..., Any] = weakref.finalize(self, release, device.backend, address)

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def check_open(self) -> None:
        if self.closed:
            raise ClosedResourceError(f"{self!r} was freed")

    def close(self) -> None:
        """Free the memory now. The caller must know the device is done with it (the sanitizer
        checks); idempotent."""
        self._finalizer()

    free = close


class DeviceBuffer(_Buffer):
    """``nbytes`` of device memory at ``address``."""

    def __init__(self, device: Device, address: int, nbytes: int, label: str = ""):
        super().__init__(device, address, nbytes, label, _free_device)

    def __repr__(self) -> str:
        state = "freed" if self.closed else f"{self.address:#x}"
        label = f" {self.label!r}" if self.label else ""
        return f"<DeviceBuffer{label} {self.nbytes} bytes at {state} on {self.device.name}>"


class HostBuffer(_Buffer):
    """``nbytes`` of pinned host memory."""

    def __init__(self, device: Device, address: int, data: np.ndarray, label: str = ""):
        super().__init__(device, address, int(data.nbytes), label, _free_host)
        self._data = data
        #: (dtype, shape, offset) -> (view, nbytes): views already checked, reused by each run
        self._views: dict[tuple[Any, Any, int], tuple[np.ndarray, int]] = {}
        self._what = f"host view of {label or 'HostBuffer'}"  # what the sanitizer names

    def numpy(self, dtype: Any = np.uint8, shape: tuple[int, ...] | int | None = None, *,
              offset: int = 0) -> np.ndarray:
        """A view of the buffer as ``dtype`` with ``shape`` (default: as many elements as fit).

        Taking the view counts as a host write of those bytes: copies into or out of the
        buffer must have completed (synchronize the stream or an event recorded after them).
        """
        return self._checked(dtype, shape, offset, write=True).view()  # a fresh array: callers may reshape it

    def copy_out(self, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
        """A copy of the buffer's first bytes as ``dtype`` with ``shape``.  It reads them on the
        host: copies into the buffer must have completed (as for :meth:`numpy`)."""
        return self._checked(dtype, shape, 0, write=False).copy()

    def read_view(self, dtype: Any, shape: tuple[int, ...]) -> tuple[np.ndarray, int, int, str]:
        """``(view, address, nbytes, what)``: the buffer's first bytes as ``dtype`` with ``shape``,
        for a caller that reads them after every run, as :meth:`copy_out` does, without asking
        for the view each time.  Before each read it calls the backend's
        ``host_access(address, nbytes, write=False, what=what)``, then copies the view; the view
        is the buffer's memory, never to be handed out, nor read once the buffer is closed."""
        view, nbytes = self._lookup(dtype, shape, 0)
        return view, self.address, max(nbytes, 1), self._what

    def _checked(self, dtype: Any, shape: tuple[int, ...] | int | None, offset: int, *, write: bool) -> np.ndarray:
        """The cached view, once the buffer is known open and the host access is checked."""
        view, nbytes = self._lookup(dtype, shape, offset)
        self.device.backend.host_access(self.address + offset, max(nbytes, 1), write=write, what=self._what)
        return view

    def _lookup(self, dtype: Any, shape: tuple[int, ...] | int | None, offset: int) -> tuple[np.ndarray, int]:
        """The cached view and its size, once the buffer is known open."""
        # Every run's inputs and outputs come through here: the usual case costs one lookup.
        if not self._finalizer.alive:
            self.check_open()
        try:
            return self._views[(dtype, shape, offset)]
        except (KeyError, TypeError):  # not seen yet, or unhashable arguments
            return self._view(dtype, shape, offset)

    def _view(self, dtype: Any, shape: tuple[int, ...] | int | None, offset: int) -> tuple[np.ndarray, int]:
        numpy_dtype = as_dtype(dtype).numpy
        key = (dtype, shape, offset)
        if shape is None:
            count = (self.nbytes - offset) // numpy_dtype.itemsize
            shape = (count,)
        elif isinstance(shape, int):
            shape = (shape,)
        nbytes = int(np.prod(shape, dtype=np.int64)) * numpy_dtype.itemsize
        if offset < 0 or offset + nbytes > self.nbytes:
            raise ValueError(f"a {numpy_dtype} view of shape {tuple(shape)} at offset {offset} needs "
                             f"{offset + nbytes} bytes; the buffer has {self.nbytes}")
        view = self._data[offset:offset + nbytes].view(numpy_dtype).reshape(shape)
        try:
            if len(self._views) < 64:
                self._views[key] = (view, nbytes)
        except TypeError:
            pass  # unhashable arguments: not kept
        return view, nbytes

    def __repr__(self) -> str:
        state = "freed" if self.closed else f"{self.address:#x}"
        return f"<HostBuffer {self.nbytes} bytes at {state}>"
