"""The ``aclTensor``/``aclScalar``/``aclIntArray`` handles of one phase-one call.

:class:`CallArguments` creates them from aclpipe values and destroys them all at once.  They
must outlive every use the runtime can make of them: a repeatable executor is re-pointed
through its ``aclTensor`` handles (``aclSetInputTensorAddr``), so the executor owns its
arguments until it is destroyed.  A single-use executor copies what it needs at phase one
(torch_npu destroys the handles right after phase two, op_api_common_base.h:203), so its
arguments are released as soon as it was launched.

``aclCreateTensor`` is filled as torch_npu's ``ConvertType`` does (op_api_common.cpp
L883-968): the data pointer is the storage base, the offset counts elements, and the storage
is one dimension long, here the elements the view can reach (``TensorDesc.extent_bytes``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...errors import BackendError
from ...tensor import TensorDesc
from .cdefs import ffi

if TYPE_CHECKING:
    from .library import CannLibrary

__all__ = ["ACL_BOOL", "ACL_DOUBLE", "ACL_INT64", "CallArguments"]

ACL_INT64, ACL_DOUBLE, ACL_BOOL = 9, 11, 12  # aclDataType numbers for host scalars


class CallArguments:
    """Handles created for one call; :meth:`release` destroys every one of them."""

    def __init__(self, library: CannLibrary):
        self._library = library
        self._tensors: list[Any] = []
        self._scalars: list[Any] = []
        self._arrays: list[Any] = []

    def tensor(self, desc: TensorDesc | None) -> Any:
        """An ``aclTensor *`` for ``desc`` (NULL for None)."""
        if desc is None:
            return ffi.NULL
        storage = desc.extent_bytes // desc.dtype.itemsize
        handle = self._library.nnopbase.aclCreateTensor(
            ffi.new("int64_t[]", list(desc.shape)), desc.ndim, int(desc.dtype),
            ffi.new("int64_t[]", list(desc.strides)), desc.offset, int(desc.format),
            ffi.new("int64_t[]", [storage]), 1, ffi.cast("void *", desc.address))
        if handle == ffi.NULL:
            raise self._library.error(161002, f"aclCreateTensor({desc})")
        self._tensors.append(handle)
        return handle

    def scalar(self, value: Any) -> Any:
        """An ``aclScalar *`` holding a Python number (NULL for None), typed as PyTorch would:
        bool as ACL_BOOL, int as ACL_INT64, float as ACL_DOUBLE."""
        if value is None:
            return ffi.NULL
        if isinstance(value, bool):
            box, dtype = ffi.new("bool *", value), ACL_BOOL
        elif isinstance(value, int):
            box, dtype = ffi.new("int64_t *", value), ACL_INT64
        else:
            box, dtype = ffi.new("double *", float(value)), ACL_DOUBLE
        handle = self._library.nnopbase.aclCreateScalar(box, dtype)  # the value is copied
        if handle == ffi.NULL:
            raise self._library.error(161002, f"aclCreateScalar({value!r})")
        self._scalars.append(handle)
        return handle

    def int_array(self, values: Sequence[int] | None) -> Any:
        """An ``aclIntArray *`` (NULL for None); the values are copied."""
        if values is None:
            return ffi.NULL
        numbers = [int(v) for v in values]
        handle = self._library.nnopbase.aclCreateIntArray(ffi.new("int64_t[]", numbers), len(numbers))
        if handle == ffi.NULL:
            raise self._library.error(161002, f"aclCreateIntArray({numbers})")
        self._arrays.append(handle)
        return handle

    def release(self) -> None:
        """Destroy every handle (idempotent); raises the first failure after trying them all."""
        nnopbase = self._library.nnopbase
        first: BackendError | None = None
        for name, handles in (("aclDestroyTensor", self._tensors), ("aclDestroyScalar", self._scalars),
                              ("aclDestroyIntArray", self._arrays)):
            destroy = getattr(nnopbase, name)
            while handles:
                code = destroy(handles.pop())
                if code and first is None:
                    first = self._library.error(code, name)
        if first is not None:
            raise first
