"""Run one catalog op on the simulator, the two-phase way, for the op-family tests.

Inputs are numpy arrays; a non-contiguous numpy view (``x.T``, ``x[:, ::2]``) becomes a
strided descriptor over its uploaded root array, so tests pass transposed operands as
plainly as ``run_op(device, "Mm", [a.T, b])``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from aclpipe.dtypes import as_dtype
from aclpipe.errors import HazardError
from aclpipe.ops import get_op
from aclpipe.runtime import Device
from aclpipe.tensor import TensorDesc

__all__ = ["OpCall", "assert_close", "cast", "desc", "random", "run_op", "tolerance"]


def _root(array: np.ndarray) -> np.ndarray:
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def _strided(array: np.ndarray) -> tuple[np.ndarray, tuple[int, ...], int]:
    """(storage to upload, element strides, element offset) for ``array``."""
    if array.flags.c_contiguous:
        return np.ascontiguousarray(array), (), 0
    root = _root(array)
    itemsize = array.dtype.itemsize
    if not root.flags.c_contiguous or root.dtype != array.dtype or any(s < 0 for s in array.strides):
        return np.ascontiguousarray(array), (), 0
    offset = (array.__array_interface__["data"][0] - root.__array_interface__["data"][0]) // itemsize
    return root, tuple(s // itemsize for s in array.strides), offset


class OpCall:
    """One op's tensors on the device: uploaded inputs, allocated outputs, descriptors.

    ``outputs`` gives ``(shape, dtype)`` per output; by default the op's ``infer`` decides.
    """

    def __init__(self, device: Device, op: str, inputs: Sequence[np.ndarray | None],
                 attrs: Mapping[str, Any] | None = None,
                 outputs: Sequence[tuple[tuple[int, ...], Any] | None] | None = None,
                 formats: Sequence[Any] | None = None):
        self.device, self.op, self.attrs = device, op, dict(attrs or {})
        self.buffers: list[Any] = []
        self.inputs: list[TensorDesc | None] = []
        for index, array in enumerate(inputs):
            self.inputs.append(None if array is None else self._upload(array, formats, index))
        if outputs is None:
            inferred = get_op(op).infer(self.inputs, self.attrs)
            outputs = [None if d is None else (d.shape, d.dtype) for d in inferred]
        self.outputs: list[TensorDesc | None] = []
        self.out_buffers: list[Any] = []
        for spec in outputs:
            if spec is None:
                self.outputs.append(None)
                self.out_buffers.append(None)
                continue
            desc = TensorDesc.contiguous(spec[0], spec[1])
            buffer = device.alloc(max(desc.nbytes, 1))
            self.buffers.append(buffer)
            self.out_buffers.append(buffer)
            self.outputs.append(desc.at(buffer.address))

    def _upload(self, array: np.ndarray, formats: Sequence[Any] | None, index: int) -> TensorDesc:
        storage, strides, offset = _strided(np.asarray(array))
        buffer = self.device.upload(storage)
        self.buffers.append(buffer)
        desc = TensorDesc(array.shape, as_dtype(array.dtype), strides, offset, address=buffer.address)
        if formats is not None and formats[index] is not None:
            desc = TensorDesc(desc.shape, desc.dtype, desc.strides, desc.offset, formats[index], desc.address)
        return desc

    def prepare(self) -> Any:
        return self.device.backend.op_prepare(self.op, self.inputs, self.outputs, self.attrs)

    def launch(self, executor: Any, stream: Any, workspace: Any = None, workspace_size: int | None = None) -> None:
        if workspace is None and executor.workspace_size:
            workspace = self.device.alloc(executor.workspace_size)
            self.buffers.append(workspace)
        address = workspace.address if workspace is not None else 0
        size = executor.workspace_size if workspace_size is None else workspace_size
        self.device.backend.op_launch(executor, address, size, stream.handle, {"node": f"test-{self.op}"})

    def results(self) -> list[np.ndarray | None]:
        return [None if d is None else self.device.download(b, d.dtype, d.shape)
                for d, b in zip(self.outputs, self.out_buffers)]


def run_op(device: Device, op: str, inputs: Sequence[np.ndarray | None], attrs: Mapping[str, Any] | None = None,
           outputs: Sequence[tuple[tuple[int, ...], Any] | None] | None = None,
           formats: Sequence[Any] | None = None) -> list[np.ndarray | None]:
    """Prepare, launch on a fresh stream, sync, and download every output."""
    call = OpCall(device, op, inputs, attrs, outputs, formats)
    stream = device.create_stream()
    call.launch(call.prepare(), stream)
    stream.sync()
    return call.results()


def cast(array: np.ndarray, dtype: Any) -> np.ndarray:
    return np.asarray(array).astype(as_dtype(dtype).numpy)


def tolerance(dtype: Any) -> float:
    """Relative tolerance for results stored in ``dtype`` (a few ulps of the output type)."""
    return {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}.get(as_dtype(dtype).name, 0.0)


def assert_close(actual: np.ndarray, expected: np.ndarray, dtype: Any, *, scale: float = 1.0) -> None:
    """``actual`` (stored in ``dtype``) against a float64 reference; exact for non-floats.

    ``scale`` widens the tolerance for long accumulations (e.g. sqrt(K) for a dot product).
    """
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    if not as_dtype(dtype).is_floating:
        np.testing.assert_array_equal(actual, expected.astype(actual.dtype))
        return
    rtol = tolerance(dtype) * scale
    magnitude = max(float(np.nanmax(np.abs(expected))) if expected.size else 0.0, 1.0)
    np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64),
                               rtol=rtol, atol=rtol * magnitude)


def desc(shape: tuple[int, ...], dtype: Any = "float32", **fields: Any) -> TensorDesc:
    """A descriptor for phase-one-only tests (no memory behind it)."""
    return TensorDesc(tuple(shape), as_dtype(dtype), **fields)


def random(shape: tuple[int, ...], dtype: Any, seed: int = 0, low: float = -2.0, high: float = 2.0) -> np.ndarray:
    """Random values already representable in ``dtype`` (so the float64 reference sees the same)."""
    rng = np.random.default_rng(seed)
    numpy_dtype = as_dtype(dtype).numpy
    if as_dtype(dtype).is_floating:
        return rng.uniform(low, high, size=shape).astype(numpy_dtype)
    if numpy_dtype == np.bool_:
        return rng.random(size=shape) < 0.5
    info = np.iinfo(numpy_dtype)
    return rng.integers(max(info.min, -100), min(info.max, 100), size=shape, endpoint=True).astype(numpy_dtype)


def check_shared_workspace(device: Device, calls: Sequence[OpCall]) -> None:
    """Two calls on two streams over one workspace: the unordered second launch is refused with
    :class:`HazardError`; ordered after the first by an event, it runs.  Both streams are synced."""
    executors = [call.prepare() for call in calls]
    assert executors[0].workspace_size > 0
    workspace = device.alloc(executors[0].workspace_size)
    first, second = device.create_stream(), device.create_stream()
    calls[0].launch(executors[0], first, workspace)
    with pytest.raises(HazardError):
        calls[1].launch(executors[1], second, workspace)
    second.wait(first.record())
    calls[1].launch(executors[1], second, workspace)
    # Sync both: the refused launch's input/output accesses were already recorded on ``second``.
    second.sync()
    first.sync()
