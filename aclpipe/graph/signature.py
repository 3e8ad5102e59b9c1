"""What a prepared program is specific to: the input shapes and, for the few inputs whose
contents decide the graph itself (host values), their contents.

Most graphs are specialized by input shapes alone.  An imported ONNX model may also read a
small graph input where aclnn takes a host array (Reshape's shape, Slice's starts, an If
condition...); like TensorRT's shape tensors, such an input is a *host value*: its contents
are part of the signature, and the graph built for it holds them as constants, so the input
itself is never copied to the device.  :meth:`Graph.signature <aclpipe.Graph.signature>`
makes a :class:`Signature` from run inputs; :class:`~aclpipe.Pipeline` keys its prepared
programs by it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["HostValue", "Signature"]


@dataclass(frozen=True)
class HostValue:
    """The contents of one host-value input: compared and hashed by dtype, shape and bytes."""

    array: np.ndarray = field(compare=False, hash=False)
    key: tuple[str, tuple[int, ...], bytes] = field(repr=False)

    @classmethod
    def of(cls, array: np.ndarray) -> HostValue:
        """A read-only copy of ``array``."""
        data = np.array(array, copy=True)
        data.setflags(write=False)
        return cls(data, (data.dtype.str, tuple(int(d) for d in data.shape), data.tobytes()))

    def matches(self, array: np.ndarray) -> bool:
        """Whether ``array`` has this value's dtype, shape and bytes (what :meth:`of` keys on)."""
        dtype, shape, data = self.key
        return array.dtype.str == dtype and array.shape == shape and array.tobytes() == data

    def __str__(self) -> str:
        text = np.array2string(self.array, separator=", ", threshold=16)
        return text if self.array.ndim else str(self.array.item())


@dataclass(frozen=True)
class Signature:
    """Input shapes, and the contents of the host-value inputs (sorted by name)."""

    shapes: tuple[tuple[str, tuple[int, ...]], ...]
    host_values: tuple[tuple[str, HostValue], ...] = ()

    @classmethod
    def of(cls, shapes: Mapping[str, tuple[int, ...]], host_values: Mapping[str, np.ndarray] | None = None
           ) -> Signature:
        host = host_values or {}
        return cls(tuple(sorted((name, tuple(shape)) for name, shape in shapes.items())),
                   tuple(sorted((name, HostValue.of(array)) for name, array in host.items())))

    @property
    def host(self) -> dict[str, np.ndarray]:
        """Host-value input name -> its (read-only) contents."""
        return {name: value.array for name, value in self.host_values}

    @property
    def device_shapes(self) -> dict[str, tuple[int, ...]]:
        """Shapes of the inputs copied to the device (every input but the host values)."""
        host = {name for name, _ in self.host_values}
        return {name: shape for name, shape in self.shapes if name not in host}

    def bind_arguments(self) -> dict[str, Any]:
        """What ``graph.bind(**...)`` takes for this signature: shapes, and host values' arrays."""
        return {**self.device_shapes, **self.host}

    def describe(self) -> str:
        """``x=(2, 3), shape=[3, 2] (host value)``: for messages."""
        host = dict(self.host_values)
        return ", ".join(f"{name}={host[name]} (host value)" if name in host else f"{name}={shape}"
                         for name, shape in self.shapes)
