"""Constant folding: run a catalog op on the host when every input is known at build time.

The importer specializes a model to concrete input shapes, so ``Shape``/``Size`` give
constants, and every op whose inputs are all constants (the ``Gather``/``Unsqueeze``/
``Concat``/``Slice``/``Cast``/arithmetic chains exporters build on ``Shape``, weight
transposes, ``ConstantOfShape`` masks...) can be evaluated once instead of on every run.

:func:`evaluate_on_host` runs the op's own phase one (``infer`` + ``prepare``) and its numpy
reference kernel on host arrays: the same validation and the same numbers as the device
would give, with a host workspace of the size the op asks for.  View ops (``Reshape``,
``Transpose``...) are applied through their descriptor, exactly as the graph layer does.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..dtypes import DType, as_dtype
from ..ops import get_op
from ..tensor import TensorDesc

__all__ = ["Folded", "content_digest", "evaluate_on_host", "result_bytes"]


@dataclass(frozen=True, eq=False)
class Folded:
    """A tensor known at build time: an initializer, a ``Constant``, or a folded result.

    ``array`` is read-only.  ``name`` is the initializer's name (used as the device
    constant's name so that every specialization shares one upload), or None; ``hint`` is the
    ONNX value that holds it (the stem of a folded constant's name).
    """

    array: np.ndarray
    name: str | None = None
    hint: str | None = None

    @classmethod
    def of(cls, array: Any, name: str | None = None) -> Folded:
        """Wrap ``array`` read-only (copying it only when it is writable)."""
        data = np.asarray(array)
        if data.flags.writeable:
            data = data.copy()
            data.setflags(write=False)
        return cls(data, name)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.array.shape)

    @property
    def dtype(self) -> DType:
        return as_dtype(self.array.dtype)


def content_digest(array: np.ndarray) -> str:
    """A short digest of ``array``'s dtype, shape and bytes (names folded constants: two
    constants with one name always hold the same data, whatever signature made them)."""
    digest = hashlib.blake2b(digest_size=8)
    digest.update(f"{array.dtype.str}{array.shape}".encode())
    digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def result_bytes(op: str, arrays: Sequence[np.ndarray | None], attrs: Mapping[str, Any], outputs: int = 1) -> int:
    """How many bytes :func:`evaluate_on_host` would produce, from the op's shape inference
    alone (nothing is allocated: callers check a size limit first)."""
    spec = get_op(op)
    descs = _descs(arrays)
    if spec.is_view:
        if descs[0] is None:
            raise ValueError(f"{op} is a view and needs its first input")
        results = [spec.view(descs[0], attrs)]
    else:
        results = [desc for desc in list(spec.infer(descs, attrs))[:outputs] if desc is not None]
    return sum(math.prod(desc.shape) * desc.dtype.itemsize for desc in results)


def _descs(arrays: Sequence[np.ndarray | None]) -> list[TensorDesc | None]:
    return [None if array is None else TensorDesc.contiguous(tuple(array.shape), as_dtype(array.dtype))
            for array in arrays]


def evaluate_on_host(op: str, arrays: Sequence[np.ndarray | None], attrs: Mapping[str, Any],
                     outputs: int = 1) -> list[np.ndarray]:
    """Run catalog op ``op`` on host arrays; returns its first ``outputs`` results.

    Raises what the op's phase one raises (:class:`~aclpipe.errors.InvalidArgumentError`)
    for inputs it refuses.
    """
    spec = get_op(op)
    descs = _descs(arrays)
    if spec.is_view:
        source = arrays[0]
        if source is None or descs[0] is None:
            raise ValueError(f"{op} is a view and needs its first input")
        return [_apply_view(source, spec.view(descs[0], attrs))]
    out_descs = list(spec.infer(descs, attrs))[:outputs]
    plan = spec.prepare(descs, out_descs, attrs)
    results = [None if desc is None else np.empty(desc.shape, desc.dtype.numpy) for desc in out_descs]
    workspace = np.zeros(plan.workspace_size, np.uint8) if plan.workspace_size else None
    # np.asarray(order="C"), not ascontiguousarray: that makes a 0-d array 1-d, and kernels may
    # rely on each input having its descriptor's shape (a ufunc writing into a 0-d output does).
    plan.kernel([None if a is None else np.asarray(a, order="C") for a in arrays], results, workspace)
    return [result for result in results if result is not None]


def _apply_view(source: np.ndarray, view: TensorDesc) -> np.ndarray:
    """The elements ``view`` (a descriptor over ``source``'s contiguous storage) shows, copied."""
    flat = np.ascontiguousarray(source).reshape(-1)
    itemsize = flat.dtype.itemsize
    if not view.shape or 0 in view.shape:
        return flat[view.offset:view.offset + int(np.prod(view.shape))].reshape(view.shape).copy()
    shown = np.lib.stride_tricks.as_strided(flat[view.offset:], shape=view.shape,
                                            strides=tuple(s * itemsize for s in view.strides), writeable=False)
    return np.array(shown, copy=True)
