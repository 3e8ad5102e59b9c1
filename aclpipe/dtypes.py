"""Data types and formats with their ACL numbers, the numpy mapping, and aclnn promotion.

``DType`` values are ``aclDataType`` numbers and ``Format`` values are ``aclFormat``
numbers (reference/acl_api.md 1.5), so they can be passed to the C API unchanged.
bfloat16 maps to ``ml_dtypes.bfloat16``, imported the first time a bfloat16 numpy dtype is needed:
loading ml_dtypes costs several times ``import numpy``, and most programs never touch bfloat16.
"""

from __future__ import annotations

import builtins
import enum
import functools
from typing import Any

import numpy as np

__all__ = ["DType", "Format", "as_dtype", "promote_types", "result_type_with_scalar"]


class DType(enum.IntEnum):
    """The tensor dtypes aclpipe supports, numbered as ``aclDataType``."""

    float32 = 0
    float16 = 1
    int8 = 2
    int32 = 3
    uint8 = 4
    int64 = 9
    bool = 12
    bfloat16 = 27

    @property
    def numpy(self) -> np.dtype[Any]:
        if self == DType.bfloat16:
            return _bfloat16()
        return _TO_NUMPY[self]

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]

    @property
    def is_floating(self) -> builtins.bool:  # plain ``bool`` here would name the member DType.bool
        return self in (DType.float32, DType.float16, DType.bfloat16)

    @property
    def is_integer(self) -> builtins.bool:
        return self in (DType.int8, DType.uint8, DType.int32, DType.int64)

    @property
    def compute(self) -> np.dtype[Any]:
        """The numpy dtype kernels accumulate in: fp16 and bf16 compute in fp32."""
        if self in (DType.float16, DType.bfloat16):
            return np.dtype(np.float32)
        return self.numpy

    def __str__(self) -> str:
        return self.name


class Format(enum.IntEnum):
    """Tensor formats, numbered as ``aclFormat`` (only the ones aclpipe kernels understand)."""

    NCHW = 0
    NHWC = 1
    ND = 2
    NCDHW = 30
    NC = 35
    NCL = 47

    def __str__(self) -> str:
        return self.name


# bfloat16 is absent until _bfloat16() adds it (both directions), so that ml_dtypes loads on demand.
_TO_NUMPY: dict[DType, np.dtype[Any]] = {
    DType.float32: np.dtype(np.float32),
    DType.float16: np.dtype(np.float16),
    DType.int8: np.dtype(np.int8),
    DType.uint8: np.dtype(np.uint8),
    DType.int32: np.dtype(np.int32),
    DType.int64: np.dtype(np.int64),
    DType.bool: np.dtype(np.bool_),
}
_FROM_NUMPY: dict[np.dtype[Any], DType] = {value: key for key, value in _TO_NUMPY.items()}
_ITEMSIZE = {**{key: value.itemsize for key, value in _TO_NUMPY.items()}, DType.bfloat16: 2}


@functools.cache
def _bfloat16() -> np.dtype[Any]:
    """``ml_dtypes.bfloat16`` as a numpy dtype, importing ml_dtypes the first time it is asked for."""
    import ml_dtypes

    dtype: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
    _TO_NUMPY[DType.bfloat16] = dtype
    _FROM_NUMPY[dtype] = DType.bfloat16
    return dtype


_ALIASES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "half": "float16",
            "float": "float32", "bool_": "bool", "int": "int64", "long": "int64"}


def as_dtype(value: Any) -> DType:
    """Accept a :class:`DType`, a name (``"float16"``, ``"bf16"``), a numpy dtype or an ACL number."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        name = _ALIASES.get(value, value)
        try:
            return DType[name]
        except KeyError:
            raise TypeError(
                f"unknown dtype {value!r}: expected one of {', '.join(d.name for d in DType)}"
            ) from None
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return DType(value)
        except ValueError:
            raise TypeError(f"ACL data type {value} is not supported by aclpipe") from None
    try:
        dtype = np.dtype(value)
    except TypeError:
        raise TypeError(f"cannot interpret {value!r} as a dtype") from None
    if dtype.name == "bfloat16":
        _bfloat16()  # a bfloat16 array means its provider is loaded: register ml_dtypes' type now
    try:
        return _FROM_NUMPY[dtype]
    except KeyError:
        if dtype == np.float64:
            raise TypeError(
                "float64 is not an NPU dtype: cast the array to float32 (arr.astype('float32'))"
            ) from None
        raise TypeError(
            f"numpy dtype {dtype} is not supported: use one of {', '.join(d.name for d in DType)}"
        ) from None


# aclnn follows PyTorch's promotion lattice for tensor-tensor ops.
_RANK = {DType.bool: 0, DType.uint8: 1, DType.int8: 1, DType.int32: 2, DType.int64: 3,
         DType.float16: 4, DType.bfloat16: 4, DType.float32: 5}


def promote_types(a: DType, b: DType) -> DType:
    """The dtype of ``a op b`` for two tensors, by aclnn's (PyTorch's) rules."""
    if a == b:
        return a
    if {a, b} == {DType.float16, DType.bfloat16}:
        return DType.float32
    if {a, b} == {DType.int8, DType.uint8}:
        # PyTorch gives int16, which aclpipe does not carry; int32 holds every value of both.
        return DType.int32
    return a if _RANK[a] >= _RANK[b] else b


def result_type_with_scalar(tensor: DType, scalar: float | bool) -> DType:
    """The dtype of ``tensor op scalar``: the tensor's dtype wins unless the scalar is of a higher
    category (a float scalar with an integer tensor gives float32)."""
    if isinstance(scalar, bool):
        return tensor
    if isinstance(scalar, float) and not tensor.is_floating:
        return DType.float32
    if isinstance(scalar, int) and tensor == DType.bool:
        return DType.int64
    return tensor
