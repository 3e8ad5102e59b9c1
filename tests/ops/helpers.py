"""Run one catalog op on the simulator the two-phase way, and compare against numpy.

``run_op`` uploads the inputs (contiguous, or laid out as a strided / transposed view of a
larger buffer), runs phase one, allocates the workspace it asks for, launches, synchronizes
and downloads the outputs: exactly what a user of the raw backend does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from aclpipe.dtypes import DType, as_dtype
from aclpipe.ops import get_op
from aclpipe.runtime import Device
from aclpipe.runtime.buffer import DeviceBuffer
from aclpipe.tensor import TensorDesc, contiguous_strides

__all__ = ["LAYOUTS", "OpCall", "place", "run_op", "prepare", "random_array", "as_float64", "assert_close", "tolerance",
           "FLOAT_DTYPES", "INT_DTYPES"]

#: How an input is laid out in device memory.
LAYOUTS = ("contiguous", "strided", "transposed")
FLOAT_DTYPES = ("float32", "float16", "bfloat16")
INT_DTYPES = ("int8", "uint8", "int32", "int64")


def _storage(array: np.ndarray, layout: str) -> tuple[np.ndarray, tuple[int, ...], int]:
    """(buffer contents, element strides, element offset) putting ``array`` in ``layout``."""
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


def place(device: Device, array: np.ndarray, layout: str = "contiguous", fmt: Any = None
          ) -> tuple[TensorDesc, DeviceBuffer]:
    """Upload ``array`` and describe it as a tensor in ``layout``."""
    stored, strides, offset = _storage(array, layout)
    buffer = device.upload(stored)
    desc = TensorDesc(array.shape, as_dtype(array.dtype), strides, offset, address=buffer.address)
    if fmt is not None:
        desc = TensorDesc(desc.shape, desc.dtype, desc.strides, desc.offset, fmt, desc.address)
    return desc, buffer


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
                 attrs: Mapping[str, Any] | None = None, *, layout: str | Sequence[str] = "contiguous",
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

    def results(self) -> list[np.ndarray | None]:
        """Download every output (call after the stream synchronized)."""
        return [self.device.download(b, d.dtype, d.shape) if d is not None and b is not None else None
                for d, b in zip(self.out_descs, self.out_buffers)]

    def close(self) -> None:
        for buffer in (*self.buffers, *self.out_buffers):
            if buffer is not None:
                buffer.close()


def run_op(device: Device, op: str, arrays: Sequence[np.ndarray | None], attrs: Mapping[str, Any] | None = None,
           *, layout: str | Sequence[str] = "contiguous", outputs: Sequence[TensorDesc | None] | None = None,
           fmt: Any = None) -> list[np.ndarray | None]:
    """Run ``op`` on the simulator (prepare, workspace, launch, sync, download) and return its
    outputs, None where an output was not asked for."""
    call = OpCall(device, op, arrays, attrs, layout=layout, outputs=outputs, fmt=fmt)
    stream = device.create_stream()
    workspace = device.alloc(call.workspace_size) if call.workspace_size else None
    try:
        call.launch(stream, workspace)
        stream.sync()
        return call.results()
    finally:
        call.close()
        if workspace is not None:
            workspace.close()
        stream.close()


def random_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, *, low: float = -3.0,
                 high: float = 3.0) -> np.ndarray:
    """Random values of ``dtype`` (integers within ``[low, high]`` clipped to the type's range)."""
    numpy_dtype = as_dtype(dtype).numpy
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if as_dtype(dtype).is_integer:
        info = np.iinfo(numpy_dtype)
        return rng.integers(max(int(low), info.min), min(int(high), info.max) + 1, size=shape).astype(numpy_dtype)
    return rng.uniform(low, high, size=shape).astype(numpy_dtype)


def as_float64(array: np.ndarray) -> np.ndarray:
    """The exact values of ``array`` (whatever its dtype) in float64, for references."""
    return np.asarray(array).astype(np.float64)


def tolerance(dtype: Any) -> tuple[float, float]:
    """(rtol, atol) for a result stored in ``dtype`` and computed in fp32."""
    dtype = as_dtype(dtype)
    return {DType.float32: (2e-5, 2e-6), DType.float16: (2e-3, 2e-3),
            DType.bfloat16: (1.6e-2, 1.6e-2)}.get(dtype, (0.0, 0.0))


def assert_close(actual: np.ndarray, expected: np.ndarray, dtype: Any, *, scale: float = 1.0) -> None:
    """``actual`` (stored in ``dtype``) against a float64 reference, rounded to ``dtype`` first."""
    dtype = as_dtype(dtype)
    assert actual.dtype == dtype.numpy, f"dtype {actual.dtype}, expected {dtype.numpy}"
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"shape {actual.shape}, expected {expected.shape}"
    if not dtype.is_floating:
        np.testing.assert_array_equal(actual, expected.astype(dtype.numpy))
        return
    rtol, atol = tolerance(dtype)
    with np.errstate(all="ignore"):
        rounded = expected.astype(dtype.numpy).astype(np.float64)
    np.testing.assert_allclose(actual.astype(np.float64), rounded, rtol=rtol * scale, atol=atol * scale,
                               equal_nan=True)

