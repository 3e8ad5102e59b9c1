"""Run one catalog op on the simulator the two-phase way, and compare against numpy.

``run_op`` uploads the inputs, runs phase one, allocates the workspace it asks for, launches,
synchronizes and downloads the outputs: exactly what a user of the raw backend does.

An input's ``layout`` says how it sits in device memory:

``"view"`` (the default)
    as numpy lays it out: a contiguous array as it is, a non-contiguous view (``x.T``,
    ``x[:, ::2]``) as a strided descriptor over its uploaded root array, so tests pass
    transposed operands as plainly as ``run_op(device, "Mm", [a.T, b])``;
``"contiguous"``
    a contiguous copy;
``"strided"``, ``"transposed"`` (:data:`LAYOUTS`)
    the same values stored as a strided or transposed view of a larger buffer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from aclpipe.dtypes import DType, as_dtype
from aclpipe.errors import HazardError
from aclpipe.ops import get_op
from aclpipe.runtime import Device
from aclpipe.runtime.buffer import DeviceBuffer
from aclpipe.tensor import TensorDesc, contiguous_strides

__all__ = ["FLOAT_DTYPES", "INT_DTYPES", "LAYOUTS", "OpCall", "as_float64", "assert_close", "assert_close_to_peak",
           "check_shared_workspace", "desc", "place", "prepare", "random", "random_array", "run_op", "tolerance"]

#: Layouts that store an array's values differently from numpy (tests parametrize over them).
LAYOUTS = ("contiguous", "strided", "transposed")
FLOAT_DTYPES = ("float32", "float16", "bfloat16")
INT_DTYPES = ("int8", "uint8", "int32", "int64")


def _root(array: np.ndarray) -> np.ndarray:
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def _numpy_layout(array: np.ndarray) -> tuple[np.ndarray, tuple[int, ...], int]:
    """(storage, element strides, element offset) describing ``array`` where numpy keeps it."""
    if array.flags.c_contiguous:
        return np.ascontiguousarray(array), (), 0
    root = _root(array)
    itemsize = array.dtype.itemsize
    if not root.flags.c_contiguous or root.dtype != array.dtype or any(s < 0 for s in array.strides):
        return np.ascontiguousarray(array), (), 0
    offset = (array.__array_interface__["data"][0] - root.__array_interface__["data"][0]) // itemsize
    return root, tuple(s // itemsize for s in array.strides), offset


def _storage(array: np.ndarray, layout: str) -> tuple[np.ndarray, tuple[int, ...], int]:
    """(buffer contents, element strides, element offset) putting ``array`` in ``layout``."""
    if layout == "view":
        return _numpy_layout(array)
    if layout == "transposed" and array.ndim >= 2:
        stored = np.ascontiguousarray(np.swapaxes(array, -1, -2))
        strides = list(contiguous_strides(stored.shape))
        strides[-1], strides[-2] = strides[-2], strides[-1]
        return stored, tuple(strides), 0
    if layout in ("strided", "transposed") and array.size:
        # every other element of the last dim, starting one element in: strides and an offset
        flat = array.reshape(array.shape or (1,))
        base = np.zeros(flat.shape[:-1] + (2 * flat.shape[-1],), dtype=array.dtype)
        base[..., 1::2] = flat
        strides = list(contiguous_strides(base.shape))
        strides[-1] = 2
        return base, tuple(strides[-array.ndim:]) if array.ndim else (), 1
    return np.ascontiguousarray(array), (), 0


def place(device: Device, array: np.ndarray, layout: str = "view", fmt: Any = None
          ) -> tuple[TensorDesc, DeviceBuffer]:
    """Upload ``array`` and describe it as a tensor in ``layout``."""
    stored, strides, offset = _storage(np.asarray(array), layout)
    buffer = device.upload(stored)
    desc = TensorDesc(array.shape, as_dtype(array.dtype), strides, offset, address=buffer.address)
    if fmt is not None:
        desc = TensorDesc(desc.shape, desc.dtype, desc.strides, desc.offset, fmt, desc.address)
    return desc, buffer


def desc(shape: tuple[int, ...], dtype: Any = "float32", **fields: Any) -> TensorDesc:
    """A descriptor for phase-one-only tests (no memory behind it)."""
    return TensorDesc(tuple(shape), as_dtype(dtype), **fields)


def prepare(op: str, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any] | None = None,
            outputs: Sequence[TensorDesc | None] | None = None) -> Any:
    """Phase one only, on descriptors (for error tests): outputs default to ``infer``'s."""
    spec = get_op(op)
    attrs = dict(attrs or {})
    if outputs is None:
        outputs = spec.infer(list(inputs), attrs)
    return spec.prepare(list(inputs), list(outputs), attrs)


class OpCall:
    """One op's tensors on the device and its phase-one executor, ready to launch.

    ``layout`` is one layout for every input or one per input; ``outputs`` overrides the
    inferred output descriptors (None entries leave an optional output out); ``fmt`` is the
    first input's format.
    """

    def __init__(self, device: Device, op: str, arrays: Sequence[np.ndarray | None],
                 attrs: Mapping[str, Any] | None = None, *, layout: str | Sequence[str] = "view",
                 outputs: Sequence[TensorDesc | None] | None = None, fmt: Any = None):
        self.device = device
        self.op = op
        attrs = dict(attrs or {})
        layouts = [layout] * len(arrays) if isinstance(layout, str) else list(layout)
        self.buffers: list[DeviceBuffer] = []
        inputs: list[TensorDesc | None] = []
        for index, (array, array_layout) in enumerate(zip(arrays, layouts)):
            if array is None:
                inputs.append(None)
                continue
            desc, buffer = place(device, array, array_layout, fmt if index == 0 else None)
            inputs.append(desc)
            self.buffers.append(buffer)
        self.out_descs = list(outputs) if outputs is not None else get_op(op).infer(inputs, attrs)
        self.out_buffers = [device.alloc(max(d.nbytes, 1)) if d is not None else None for d in self.out_descs]
        bound = [d.at(b.address) if d is not None and b is not None else None
                 for d, b in zip(self.out_descs, self.out_buffers)]
        self.executor = device.backend.op_prepare(op, inputs, bound, attrs)

    @property
    def workspace_size(self) -> int:
        return int(self.executor.workspace_size)

    def launch(self, stream: Any, workspace: DeviceBuffer | None, size: int | None = None) -> None:
        """Phase two on ``stream`` with ``workspace`` (``size`` defaults to the buffer's size)."""
        address = workspace.address if workspace is not None else 0
        if size is None:
            size = workspace.nbytes if workspace is not None else 0
        self.device.backend.op_launch(self.executor, address, size, stream.handle, {"node": f"test-{self.op}"})

    def launch_with_workspace(self, stream: Any) -> None:
        """Phase two on ``stream`` with a new workspace of exactly the size phase one asked for
        (none when it asked for none); :meth:`close` frees it."""
        workspace = self.device.alloc(self.workspace_size) if self.workspace_size else None
        if workspace is not None:
            self.buffers.append(workspace)
        self.launch(stream, workspace)

    def results(self) -> list[np.ndarray | None]:
        """Download every output (call after the stream synchronized)."""
        return [self.device.download(b, d.dtype, d.shape) if d is not None and b is not None else None
                for d, b in zip(self.out_descs, self.out_buffers)]

    def close(self) -> None:
        for buffer in (*self.buffers, *self.out_buffers):
            if buffer is not None:
                buffer.close()


def run_op(device: Device, op: str, arrays: Sequence[np.ndarray | None], attrs: Mapping[str, Any] | None = None,
           *, layout: str | Sequence[str] = "view", outputs: Sequence[TensorDesc | None] | None = None,
           fmt: Any = None) -> list[np.ndarray | None]:
    """Run ``op`` on the simulator (prepare, workspace, launch, sync, download) and return its
    outputs, None where an output was not asked for."""
    call = OpCall(device, op, arrays, attrs, layout=layout, outputs=outputs, fmt=fmt)
    stream = device.create_stream()
    try:
        call.launch_with_workspace(stream)
        stream.sync()
        return call.results()
    finally:
        call.close()
        stream.close()


def check_shared_workspace(device: Device, calls: Sequence[OpCall]) -> None:
    """Two calls on two streams over one workspace: the unordered second launch is refused with
    :class:`HazardError`; ordered after the first by an event, it runs.  Both streams are synced."""
    assert calls[0].workspace_size > 0
    workspace = device.alloc(calls[0].workspace_size)
    first, second = device.create_stream(), device.create_stream()
    calls[0].launch(first, workspace)
    with pytest.raises(HazardError):
        calls[1].launch(second, workspace)
    second.wait(first.record())
    calls[1].launch(second, workspace)
    # Sync both: the refused launch's input/output accesses were already recorded on ``second``.
    second.sync()
    first.sync()


def random_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, *, low: float = -3.0,
                 high: float = 3.0) -> np.ndarray:
    """Random values of ``dtype`` (integers within ``[low, high]`` clipped to the type's range)."""
    numpy_dtype = as_dtype(dtype).numpy
    if as_dtype(dtype) == DType.bool:
        return rng.random(shape) < 0.5
    if as_dtype(dtype).is_integer:
        info = np.iinfo(numpy_dtype)
        return rng.integers(max(int(low), info.min), min(int(high), info.max) + 1, size=shape).astype(numpy_dtype)
    return rng.uniform(low, high, size=shape).astype(numpy_dtype)


def random(shape: tuple[int, ...], dtype: Any, seed: int = 0, low: float = -2.0, high: float = 2.0) -> np.ndarray:
    """:func:`random_array` from a fresh generator seeded with ``seed``; integers lie in
    ``[-100, 100]`` (clipped to the type's range) whatever ``low`` and ``high`` say."""
    if as_dtype(dtype).is_integer:
        low, high = -100, 100
    return random_array(np.random.default_rng(seed), shape, dtype, low=low, high=high)


def as_float64(array: np.ndarray) -> np.ndarray:
    """The exact values of ``array`` (whatever its dtype) in float64, for references."""
    return np.asarray(array).astype(np.float64)


def tolerance(dtype: Any) -> tuple[float, float]:
    """(rtol, atol) for a result stored in ``dtype`` and computed in fp32."""
    dtype = as_dtype(dtype)
    return {DType.float32: (2e-5, 2e-6), DType.float16: (2e-3, 2e-3),
            DType.bfloat16: (1.6e-2, 1.6e-2)}.get(dtype, (0.0, 0.0))


#: rtol of :func:`assert_close_to_peak`, whose atol grows with the reference's magnitude instead.
_PEAK_RTOL = {DType.float32: 1e-5, DType.float16: 2e-3, DType.bfloat16: 1.6e-2}


def _assert_values(actual: np.ndarray, expected: np.ndarray, dtype: DType, rtol: float, atol: float) -> None:
    """Same shape; equal for non-float ``dtype``, else within ``rtol``/``atol`` (nan matches nan)."""
    assert actual.shape == expected.shape, f"shape {actual.shape}, expected {expected.shape}"
    if not dtype.is_floating:
        np.testing.assert_array_equal(actual, expected.astype(actual.dtype))
        return
    np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol,
                               equal_nan=True)


def assert_close(actual: np.ndarray, expected: np.ndarray, dtype: Any, *, scale: float = 1.0) -> None:
    """``actual`` (stored in ``dtype``) against a float64 reference, rounded to ``dtype`` first."""
    dtype = as_dtype(dtype)
    assert actual.dtype == dtype.numpy, f"dtype {actual.dtype}, expected {dtype.numpy}"
    expected = np.asarray(expected)
    if dtype.is_floating:
        with np.errstate(all="ignore"):
            expected = expected.astype(dtype.numpy).astype(np.float64)
    rtol, atol = tolerance(dtype)
    _assert_values(actual, expected, dtype, rtol * scale, atol * scale)


def assert_close_to_peak(actual: np.ndarray, expected: np.ndarray, dtype: Any, *, scale: float = 1.0) -> None:
    """``actual`` (stored in ``dtype``) against an unrounded float64 reference, with an absolute
    tolerance of rtol times the reference's largest magnitude (at least 1): errors of long
    accumulations (matmul, convolution, pooling) scale with the operands, not each element.

    ``scale`` widens the tolerance further (e.g. sqrt(K) for a dot product).
    """
    dtype = as_dtype(dtype)
    expected = np.asarray(expected)
    rtol = _PEAK_RTOL.get(dtype, 0.0) * scale
    atol = 0.0
    if dtype.is_floating and actual.shape == expected.shape:
        atol = rtol * max(float(np.nanmax(np.abs(expected))) if expected.size else 0.0, 1.0)
    _assert_values(actual, expected, dtype, rtol, atol)
