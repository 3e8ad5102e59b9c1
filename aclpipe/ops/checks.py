"""Phase-one argument checks shared by every operator family.

Each check raises :func:`op_error` (aclnn 161001/161002) with the op, the argument, what was
expected and what was seen.  Kernel helpers at the bottom convert between storage dtypes
and the compute dtype (fp16/bf16 accumulate in fp32) and write results into output views.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..dtypes import DType
from ..tensor import MAX_DIMS, TensorDesc
from .base import op_error

__all__ = [
    "ALL",
    "FLOATS",
    "INTS",
    "NUMERIC",
    "broadcast_shapes",
    "compute_view",
    "elementwise_cost",
    "kept_view",
    "need",
    "need_dtype",
    "need_output",
    "need_rank",
    "need_same_dtype",
    "normalize_dim",
    "normalize_dims",
    "optional_attr",
    "store",
]

FLOATS = frozenset({DType.float32, DType.float16, DType.bfloat16})
INTS = frozenset({DType.int8, DType.uint8, DType.int32, DType.int64})
NUMERIC = FLOATS | INTS
ALL = NUMERIC | {DType.bool}


def need(op: str, name: str, tensor: TensorDesc | None) -> TensorDesc:
    """The tensor argument ``name`` of ``op``; 161001 when it is NULL, 161002 beyond 8 dims."""
    if tensor is None:
        raise op_error(op, name, "a tensor", "NULL", null=True)
    if tensor.ndim > MAX_DIMS:
        raise op_error(op, name, f"at most {MAX_DIMS} dims", f"{tensor.ndim} dims {list(tensor.shape)}")
    return tensor


def need_dtype(op: str, name: str, tensor: TensorDesc, allowed: Iterable[DType]) -> None:
    """Refuse (161002) a tensor whose dtype is not one of ``allowed``."""
    allowed = frozenset(allowed)
    if tensor.dtype not in allowed:
        names = ", ".join(sorted(d.name for d in allowed))
        raise op_error(op, name, f"dtype in {{{names}}}", tensor.dtype.name)


def need_same_dtype(op: str, names: Sequence[str], tensors: Sequence[TensorDesc]) -> None:
    """Refuse (161002) tensors whose dtype differs from the first one's."""
    first = tensors[0].dtype
    for name, tensor in zip(names[1:], tensors[1:]):
        if tensor.dtype != first:
            raise op_error(op, name, f"dtype {first.name} (same as {names[0]})", tensor.dtype.name)


def need_rank(op: str, name: str, tensor: TensorDesc, ranks: Iterable[int]) -> None:
    """Refuse (161002) a tensor whose rank is not one of ``ranks``."""
    ranks = tuple(ranks)
    if tensor.ndim not in ranks:
        raise op_error(op, name, f"rank in {ranks}", f"rank {tensor.ndim} {list(tensor.shape)}")


def broadcast_shapes(op: str, named: Sequence[tuple[str, tuple[int, ...]]]) -> tuple[int, ...]:
    """NumPy/PyTorch broadcasting of several shapes, with an op error naming the culprit."""
    ndim = max(len(shape) for _, shape in named)
    result = [1] * ndim
    for name, shape in named:
        padded = (1,) * (ndim - len(shape)) + tuple(shape)
        for axis, dim in enumerate(padded):
            if dim == result[axis] or dim == 1:
                continue
            if result[axis] == 1:
                result[axis] = dim
                continue
            shapes = ", ".join(f"{n}{list(s)}" for n, s in named)
            raise op_error(op, name, "shapes that broadcast together", shapes)
    if ndim > MAX_DIMS:
        raise op_error(op, "broadcast", f"at most {MAX_DIMS} dims", ndim)
    return tuple(result)


def need_output(op: str, name: str, out: TensorDesc | None, shape: tuple[int, ...],
                dtypes: DType | Iterable[DType]) -> TensorDesc:
    """The output must exist, have exactly ``shape`` and one of ``dtypes``."""
    out = need(op, name, out)
    if tuple(out.shape) != tuple(shape):
        raise op_error(op, name, f"shape {list(shape)}", list(out.shape))
    allowed = frozenset([dtypes] if isinstance(dtypes, DType) else dtypes)
    if out.dtype not in allowed:
        raise op_error(op, name, f"dtype in {{{', '.join(sorted(d.name for d in allowed))}}}", out.dtype.name)
    return out


def normalize_dim(op: str, name: str, dim: Any, ndim: int) -> int:
    """``dim`` as a non-negative axis of a rank-``ndim`` tensor (negative counts from the end);
    161002 when it is not an integer in range."""
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
        raise op_error(op, name, "an integer dim", repr(dim))
    low = -max(ndim, 1)
    high = max(ndim, 1) - 1
    if not low <= dim <= high:
        raise op_error(op, name, f"dim in [{low}, {high}]", dim)
    return int(dim) % max(ndim, 1)


def normalize_dims(op: str, name: str, dims: Any, ndim: int) -> tuple[int, ...]:
    """Several dims normalized (None: every axis); 161002 on a repeated or bad dim."""
    if dims is None:
        return tuple(range(ndim))
    if isinstance(dims, (int, np.integer)):
        dims = [dims]
    result = tuple(normalize_dim(op, name, d, ndim) for d in dims)
    if len(set(result)) != len(result):
        raise op_error(op, name, "distinct dims", list(dims))
    return result


def optional_attr(attrs: dict[str, Any], key: str, default: Any) -> Any:
    """``attrs[key]``, or ``default`` when it is absent or None."""
    value = attrs.get(key, default)
    return default if value is None else value


# -- kernel helpers ------------------------------------------------------------------------
def compute_view(array: np.ndarray, dtype: DType) -> np.ndarray:
    """``array`` in the dtype kernels compute in (fp16/bf16 -> fp32; others unchanged)."""
    target = dtype.compute
    return array.astype(target) if array.dtype != target else array


def store(out: np.ndarray, value: Any) -> None:
    """Write ``value`` into the output view, casting to its dtype (round-to-nearest)."""
    if isinstance(value, np.ndarray) and value.dtype == out.dtype:
        np.copyto(out, value)  # the common case, without asarray/astype's calls
        return
    np.copyto(out, np.asarray(value).astype(out.dtype, copy=False), casting="unsafe")


def target_view(out: np.ndarray, shape: tuple[int, ...], dtype: Any) -> np.ndarray | None:
    """``out`` reshaped to ``shape`` when a kernel can compute straight into it (it has the
    compute ``dtype`` and is C-contiguous, so the reshape is a view of the same bytes), else
    None: the kernel then computes into a temporary and :func:`store` s it."""
    if out.dtype != dtype or not out.flags.c_contiguous:
        return None
    return out.reshape(shape)


def kept_view(array: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray | None:
    """``array`` reshaped to ``shape`` when the result is a view of the same bytes, else None
    (a reshape of a strided view may copy).  Plans' ``bind`` keep such views across launches:
    a copy would hold the data of the launch that made it."""
    if array is None or array.size == 0:
        return None
    result = array.reshape(shape)
    return result if np.may_share_memory(result, array) else None


def elementwise_cost(numel: int, tensors: Sequence[TensorDesc | None],
                     flops_per_element: float = 1.0) -> tuple[float, float]:
    """(flops, bytes) of an elementwise kernel over ``numel`` outputs touching ``tensors``."""
    traffic = sum(t.numel * t.dtype.itemsize for t in tensors if t is not None)
    return numel * flops_per_element, float(traffic)


# -- workspace scratch (appended for the elementwise/activation/norm/reduce families) ---------
SCRATCH_ALIGN = 32  # every scratch region starts 32-byte aligned, like a device allocation


def scratch_layout(*region_bytes: int) -> tuple[int, tuple[int, ...]]:
    """Lay out consecutive scratch regions in one workspace.

    Returns the total workspace size and each region's byte offset; each region is rounded
    up to :data:`SCRATCH_ALIGN` so a region never shares bytes with the next one.
    """
    offsets = []
    total = 0
    for nbytes in region_bytes:
        offsets.append(total)
        total += -(-int(nbytes) // SCRATCH_ALIGN) * SCRATCH_ALIGN
    return total, tuple(offsets)


def scratch_view(workspace: np.ndarray | None, offset: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A typed view of ``shape`` elements of the workspace bytes at ``offset``.

    Kernels keep their statistics here (not in private numpy memory) so that a workspace that
    is short, or shared with a concurrent kernel, is caught at launch or by the sanitizer.
    """
    numpy_dtype = np.dtype(dtype)
    flat = len(shape) == 1  # most kernels keep a vector per row: no reshape (called per launch)
    nbytes = (shape[0] if flat else math.prod(shape)) * numpy_dtype.itemsize
    if workspace is None or offset + nbytes > workspace.size:
        have = 0 if workspace is None else workspace.size
        raise ValueError(f"workspace of {have} bytes cannot hold {nbytes} bytes at offset {offset}")
    view: np.ndarray = workspace[offset:offset + nbytes].view(numpy_dtype)
    return view if flat else view.reshape(shape)


# -- constant operands ------------------------------------------------------------------------
# numpy's maximum/minimum with a scalar operand take a loop without SIMD here (8.5 µs on 8,192
# floats, 2.3 µs against an array of the same shape: the results are the same bits, NaN and
# signed zeros included), so the clamping kernels compare against a read-only array of the bound.
# One array per (shape, dtype, value) is shared by every binding holding it, and freed with the
# last one (weak values): memory stays one array per distinct shape in use, not one per launch.
_CONSTANTS: weakref.WeakValueDictionary[tuple[Any, ...], np.ndarray] = weakref.WeakValueDictionary()
_CONSTANTS_LOCK = threading.Lock()


def constant(shape: tuple[int, ...], dtype: Any, value: Any) -> np.ndarray:
    """A read-only C-contiguous array of ``shape`` filled with ``value`` cast to ``dtype``,
    shared with every caller that asks for the same one (keep a reference while using it)."""
    numpy_dtype = np.dtype(dtype)
    scalar = np.asarray(value, numpy_dtype)
    key = (tuple(shape), numpy_dtype.str, scalar.tobytes())  # bytes: -0.0 and 0.0 differ
    with _CONSTANTS_LOCK:
        array = _CONSTANTS.get(key)
        if array is None:
            array = np.full(shape, scalar, numpy_dtype)
            array.flags.writeable = False
            _CONSTANTS[key] = array
    return array


def argument(values: Sequence[Any], index: int) -> Any:
    """``values[index]``, or None when the caller passed fewer arguments (an absent optional)."""
    return values[index] if index < len(values) else None


__all__ += ["SCRATCH_ALIGN", "argument", "constant", "scratch_layout", "scratch_view", "target_view"]
