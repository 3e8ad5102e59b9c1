"""Tensor descriptors: what ``aclCreateTensor`` takes, as a frozen value.

A :class:`TensorDesc` names device memory, it does not own it: view shape, strides and
storage offset in elements, dtype, format, and the device address of the storage base.
Kernels honour strides, so a transposed or sliced view is just another descriptor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from .dtypes import DType, Format, as_dtype

__all__ = ["MAX_DIMS", "TensorDesc", "contiguous_strides"]

MAX_DIMS = 8  # aclnn ops reject more than 8 dims (reference/acl_api.md section 5)


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides in elements."""
    strides = [1] * len(shape)
    for axis in range(len(shape) - 2, -1, -1):
        strides[axis] = strides[axis + 1] * max(shape[axis + 1], 1)
    return tuple(strides)


@dataclass(frozen=True)
class TensorDesc:
    """A strided view of device memory, like an ``aclTensor``.

    Parameters
    ----------
    shape:
        View dims.
    dtype:
        Element type.
    strides:
        In elements; ``None`` means contiguous row-major.
    offset:
        Storage offset in elements from ``address``.
    format:
        ``Format.ND`` unless layout matters (NCHW/NHWC for convolution and pooling).
    address:
        Device address of the storage base (0 while unbound).
    """

    shape: tuple[int, ...]
    dtype: DType
    strides: tuple[int, ...] = field(default=())
    offset: int = 0
    format: Format = Format.ND
    address: int = 0

    def __post_init__(self) -> None:
        shape = tuple(int(dim) for dim in self.shape)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", as_dtype(self.dtype))
        if any(dim < 0 for dim in shape):
            raise ValueError(f"tensor shape {shape} has a negative dimension")
        strides = tuple(int(s) for s in self.strides) if self.strides else contiguous_strides(shape)
        if len(strides) != len(shape):
            raise ValueError(f"strides {strides} do not match shape {shape}: need one stride per dim")
        if any(s < 0 for s in strides) or self.offset < 0:
            raise ValueError("strides and storage offset must be non-negative (aclCreateTensor)")
        object.__setattr__(self, "strides", strides)

    @classmethod
    def contiguous(cls, shape: tuple[int, ...], dtype: Any, address: int = 0,
                   format: Format = Format.ND) -> TensorDesc:
        return cls(tuple(shape), as_dtype(dtype), (), 0, format, address)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @cached_property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the view's elements (what a contiguous copy would take)."""
        return self.numel * self.dtype.itemsize

    @cached_property
    def extent_bytes(self) -> int:
        """Bytes from ``address`` that the view may touch: the allocation must hold this many."""
        if self.numel == 0:
            return 0
        last = self.offset + sum((dim - 1) * stride for dim, stride in zip(self.shape, self.strides))
        return (last + 1) * self.dtype.itemsize

    @property
    def is_contiguous(self) -> bool:
        expected = contiguous_strides(self.shape)
        return all(dim == 1 or s == e for dim, s, e in zip(self.shape, self.strides, expected))

    @property
    def data_address(self) -> int:
        """Address of the first element of the view."""
        return self.address + self.offset * self.dtype.itemsize

    def at(self, address: int) -> TensorDesc:
        """The same view over storage at ``address``."""
        # Already validated: copy the fields (and the cached sizes, which do not depend on the
        # address) instead of running __init__ again; preparing a program does this per tensor.
        desc = object.__new__(TensorDesc)
        # ``{**d}`` rather than ``d.copy()``: a copy keeps the source's table, which for an
        # instance dict that grew key by key (the cached sizes) is about twice what 9 keys need.
        fields = {**self.__dict__}
        fields["address"] = int(address)
        object.__setattr__(desc, "__dict__", fields)
        return desc

    def signature(self) -> tuple[Any, ...]:
        """Everything that shapes an executor, without the address."""
        # Cached like ``numel``: :meth:`at` copies it to the same view at other addresses.
        cached: tuple[Any, ...] | None = self.__dict__.get("_signature")
        if cached is None:
            cached = self.__dict__["_signature"] = (self.shape, self.strides, self.offset, int(self.dtype),
                                                    int(self.format))
        return cached

    def __str__(self) -> str:
        text = f"{self.dtype.name}{list(self.shape)}"
        if not self.is_contiguous:
            text += f" strides={list(self.strides)}"
        if self.offset:
            text += f" offset={self.offset}"
        if self.format != Format.ND:
            text += f" {self.format.name}"
        return text
