"""aclnn operators through the ascend backend and the fake libopapi, against the simulator.

The same inputs must give the same outputs on ``sim`` and ``ascend``; phase-one errors must
read the same; executors follow the two-phase rules (single use, repeatable and re-pointed,
refused repeatability); an op the library lacks is an UnsupportedOpError, not a crash.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

import aclpipe
from aclpipe.eager import OpRunner
from aclpipe.eager.executor_cache import ExecutorCache
from aclpipe.errors import BackendError, InvalidArgumentError, UnsupportedOpError
from aclpipe.ops import get_op
from aclpipe.runtime import Device
from aclpipe.runtime.buffer import DeviceBuffer
from aclpipe.tensor import TensorDesc

RNG = np.random.default_rng(7)


def rand(*shape: int, dtype: str = "float32") -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


class Buffers:
    """Device buffers a test keeps alive (dropping one frees its memory), by address."""

    def __init__(self, device: Device):
        self.device = device
        self.by_address: dict[int, DeviceBuffer] = {}

    def keep(self, buffer: DeviceBuffer) -> int:
        self.by_address[buffer.address] = buffer
        return buffer.address

    def upload(self, array: np.ndarray | None, transposed: bool = False) -> TensorDesc | None:
        """``array`` on the device; with ``transposed``, its transpose stored and a strided view."""
        if array is None:
            return None
        if not transposed:
            return TensorDesc.contiguous(array.shape, array.dtype, self.keep(self.device.upload(array)))
        stored = np.ascontiguousarray(array.T)
        strides = tuple(reversed(TensorDesc.contiguous(stored.shape, array.dtype).strides))
        return TensorDesc(array.shape, array.dtype, strides, address=self.keep(self.device.upload(stored)))

    def output(self, desc: TensorDesc) -> TensorDesc:
        return desc.at(self.keep(self.device.alloc(max(desc.nbytes, 1))))

    def download(self, desc: TensorDesc) -> np.ndarray:
        return self.device.download(self.by_address[desc.address], desc.dtype, desc.shape)


def run(device: Device, op: str, arrays: Sequence[np.ndarray | None], attrs: Mapping[str, Any],
        transposed: Sequence[int] = ()) -> list[np.ndarray]:
    """Phase one, workspace, phase two, sync, download: the raw backend the way a user drives it."""
    backend, stream, buffers = device.backend, device.create_stream(), Buffers(device)
    inputs = [buffers.upload(array, index in transposed) for index, array in enumerate(arrays)]
    outputs = [None if desc is None else buffers.output(desc) for desc in get_op(op).infer(inputs, attrs)]
    executor = backend.op_prepare(op, inputs, outputs, attrs)
    size = executor.workspace_size
    workspace = device.alloc(size) if size else None
    backend.op_launch(executor, workspace.address if workspace else 0, size, stream.handle, {"node": op})
    stream.sync()
    backend.op_destroy(executor)
    return [buffers.download(desc) for desc in outputs if desc is not None]


CASES = [
    ("Add", [rand(3, 4), rand(4)], {"alpha": 2.5}),
    ("Add", [rand(2, 8, dtype="float16"), rand(2, 8, dtype="float16")], {}),
    ("Add", [np.arange(12, dtype=np.int32).reshape(3, 4), np.full((3, 1), 5, np.int32)], {"alpha": 3}),
    ("Adds", [rand(5)], {"other": 1.5, "alpha": 2.0}),
    ("Sub", [rand(2, 3), rand(2, 3)], {"alpha": 0.5}),
    ("Mul", [rand(2, 1, 4), rand(3, 1)], {}),
    ("Muls", [rand(6)], {"other": 3.0}),
    ("Div", [rand(4, 4), rand(4, 4) + 3], {}),
    ("Relu", [rand(17)], {}),
    ("Gelu", [rand(3, 5)], {}),
    ("Silu", [rand(9)], {}),
    ("Sigmoid", [rand(9)], {}),
    ("Tanh", [rand(9)], {}),
    ("Exp", [rand(2, 3)], {}),
    ("Softmax", [rand(4, 6)], {"dim": -1}),
    ("Softmax", [rand(3, 4, 5)], {"dim": 1}),
    ("LayerNorm", [rand(3, 8), rand(8), rand(8)], {"normalizedShape": [8], "eps": 1e-5}),
    ("LayerNorm", [rand(2, 3, 4), None, None], {"normalizedShape": [3, 4]}),
    ("Matmul", [rand(2, 3, 4), rand(4, 5)], {"cubeMathType": 1}),
    ("Mm", [rand(3, 4), rand(4, 2)], {}),
    ("BatchMatMul", [rand(2, 3, 4), rand(2, 4, 5)], {}),
    ("Cast", [rand(10) * 10], {"dtype": "int32"}),
    ("Cast", [rand(10)], {"dtype": "float16"}),
    ("Permute", [rand(2, 3, 4)], {"dims": [2, 0, -2]}),
    ("InplaceCopy", [rand(4)], {}),
]


@pytest.mark.parametrize("op, arrays, attrs", CASES, ids=[f"{op}-{i}" for i, (op, _, _) in enumerate(CASES)])
def test_the_same_inputs_give_the_same_outputs_on_sim_and_ascend(ascend, device, op, arrays, attrs):
    expected = run(device, op, arrays, attrs)
    seen = run(ascend, op, arrays, attrs)
    assert len(seen) == len(expected)
    for got, want in zip(seen, expected):
        assert got.dtype == want.dtype and got.shape == want.shape
        tolerance = 2e-3 if want.dtype == np.float16 else 1e-5
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("op, arrays, transposed", [
    ("Relu", [rand(4, 6)], [0]),
    ("Matmul", [rand(3, 5), rand(5, 4)], [0, 1]),
    ("Add", [rand(6, 2), rand(6, 2)], [1]),
])
def test_strided_views_compute_the_same(ascend, device, op, arrays, transposed):
    expected = run(device, op, arrays, {}, transposed)
    np.testing.assert_allclose(run(ascend, op, arrays, {}, transposed)[0], expected[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op, arrays, attrs", [
    ("Add", [rand(3, 4), rand(5)], {}),
    ("Softmax", [rand(3, 4)], {"dim": 5}),
    ("Mm", [rand(2, 3, 4), rand(4, 2)], {}),
    ("LayerNorm", [rand(3, 8), None, None], {"normalizedShape": [7]}),
    ("Relu", [np.zeros(3, np.bool_)], {}),
])
def test_phase_one_errors_read_the_same(ascend, device, op, arrays, attrs):
    errors = []
    for dev in (device, ascend):
        buffers = Buffers(dev)
        inputs = [buffers.upload(array) for array in arrays]
        outputs = [buffers.output(TensorDesc.contiguous((3, 4), "float32"))]
        with pytest.raises(InvalidArgumentError) as caught:
            dev.backend.op_prepare(op, inputs, outputs, attrs)
        errors.append(caught.value)
    assert str(errors[0]) == str(errors[1]) and errors[0].code == errors[1].code


def test_the_operator_library_reports_its_own_refusals(ascend, device):
    # The catalog accepts a 1-D matmul; the fake's aclnnMatmul refuses it in phase one.
    vector, matrix = rand(4), rand(4, 3)
    assert run(device, "Matmul", [vector, matrix], {})[0].shape == (3,)
    with pytest.raises(InvalidArgumentError) as caught:
        run(ascend, "Matmul", [vector, matrix], {})
    assert caught.value.code == 161002
    assert "aclnnMatmulGetWorkspaceSize" in str(caught.value) and "no 1-D matmul" in str(caught.value)


def add_call(buffers: Buffers, a: np.ndarray, b: np.ndarray) -> tuple[list[Any], list[TensorDesc]]:
    return [buffers.upload(a), buffers.upload(b)], [buffers.output(TensorDesc.contiguous(a.shape, "float32"))]


def test_single_use_executors_refuse_a_second_launch(ascend):
    stream, buffers = ascend.create_stream(), Buffers(ascend)
    inputs, outputs = add_call(buffers, rand(8), rand(8))
    executor = ascend.backend.op_prepare("Add", inputs, outputs, {})
    ascend.backend.op_launch(executor, 0, 0, stream.handle)
    with pytest.raises(InvalidArgumentError, match="single-use executor was already launched") as caught:
        ascend.backend.op_launch(executor, 0, 0, stream.handle)
    assert caught.value.code == 561103
    with pytest.raises(InvalidArgumentError, match="right after phase one"):
        ascend.backend.op_set_repeatable(executor)
    ascend.backend.op_destroy(executor)
    stream.sync()


def test_repeatable_executors_are_re_pointed_between_launches(ascend):
    backend, stream, buffers = ascend.backend, ascend.create_stream(), Buffers(ascend)
    first, second = (rand(16), rand(16)), (rand(16), rand(16))
    inputs, outputs = add_call(buffers, *first)
    executor = backend.op_prepare("Add", inputs, outputs, {"alpha": 2})
    backend.op_set_repeatable(executor)
    backend.op_launch(executor, 0, 0, stream.handle)
    other_inputs, other_outputs = add_call(buffers, *second)
    for index, desc in enumerate(other_inputs):
        backend.op_set_tensor_address(executor, index, output=False, address=desc.address)
    backend.op_set_tensor_address(executor, 0, output=True, address=other_outputs[0].address)
    backend.op_launch(executor, 0, 0, stream.handle)
    stream.sync()
    for (a, b), out in ((first, outputs[0]), (second, other_outputs[0])):
        np.testing.assert_allclose(buffers.download(out), a + 2 * b, rtol=1e-6)
    with pytest.raises(InvalidArgumentError, match="not 32-byte aligned"):
        backend.op_set_tensor_address(executor, 0, output=False, address=other_inputs[0].address + 4)
    with pytest.raises(InvalidArgumentError, match="out of range"):
        backend.op_set_tensor_address(executor, 2, output=False, address=other_inputs[0].address)
    backend.op_destroy(executor)
    with pytest.raises(InvalidArgumentError, match="destroyed"):
        backend.op_launch(executor, 0, 0, stream.handle)


def test_an_op_that_refuses_repeatable_still_runs_once_and_the_cache_falls_back(ascend):
    backend, stream, buffers = ascend.backend, ascend.create_stream(), Buffers(ascend)
    source = rand(8)
    inputs, outputs = [buffers.upload(source)], [buffers.output(TensorDesc.contiguous((8,), "float32"))]
    executor = backend.op_prepare("InplaceCopy", inputs, outputs, {})
    with pytest.raises(BackendError, match="same-address ViewCopy") as caught:
        backend.op_set_repeatable(executor)
    assert caught.value.code == 561102
    backend.op_launch(executor, 0, 0, stream.handle)
    stream.sync()
    np.testing.assert_array_equal(buffers.download(outputs[0]), source)
    for _ in range(3):  # OpRunner's cache runs phase one each time for a refusing op
        data = rand(8)
        np.testing.assert_array_equal(OpRunner("InplaceCopy", stream).input(data).output().run()[0], data)
    assert ExecutorCache.for_device(ascend).stats().not_repeatable >= 1


def test_op_runner_caches_repeatable_executors_on_ascend(ascend):
    stream = ascend.create_stream()
    for _ in range(3):
        a, b = rand(4, 6), rand(6)
        (out,) = OpRunner("Add", stream).input(a).input(b).output().attr(alpha=0.5).run()
        np.testing.assert_allclose(out, a + 0.5 * b, rtol=1e-6)
    (probabilities,) = OpRunner("Softmax", stream).input(np.zeros((2, 4), np.float32)).output().run()
    np.testing.assert_allclose(probabilities, 0.25)
    assert ExecutorCache.for_device(ascend).stats().hits >= 2


def test_workspace_rules_are_enforced_before_the_call(ascend):
    backend, stream, buffers = ascend.backend, ascend.create_stream(), Buffers(ascend)
    x = buffers.upload(rand(8, 16))
    out = buffers.output(TensorDesc.contiguous((8, 16), "float32"))
    executor = backend.op_prepare("Softmax", [x], [out], {"dim": -1})
    assert executor.workspace_size > 0  # row statistics
    with pytest.raises(InvalidArgumentError, match="workspace is NULL") as null:
        backend.op_launch(executor, 0, 0, stream.handle)
    assert null.value.code == 161001
    small = ascend.alloc(16)
    with pytest.raises(InvalidArgumentError, match="smaller than"):
        backend.op_launch(executor, small.address, 16, stream.handle)
    workspace = ascend.alloc(executor.workspace_size)
    backend.op_launch(executor, workspace.address, executor.workspace_size, stream.handle)
    stream.sync()


def test_host_memory_as_a_tensor_is_refused_by_the_launch(ascend):
    pinned = ascend.alloc_host(64)
    x = TensorDesc.contiguous((16,), "float32", pinned.address)
    buffers, stream = Buffers(ascend), ascend.create_stream()
    out = buffers.output(TensorDesc.contiguous((16,), "float32"))
    executor = ascend.backend.op_prepare("Relu", [x], [out], {})
    with pytest.raises(InvalidArgumentError, match="pinned host memory") as caught:
        ascend.backend.op_launch(executor, 0, 0, stream.handle, {"node": "relu-1"})
    assert "node=relu-1" in str(caught.value)
    ascend.backend.op_destroy(executor)


def test_ops_the_library_lacks_are_unsupported_not_a_crash(ascend):
    buffers = Buffers(ascend)
    x, gamma = buffers.upload(rand(2, 4)), buffers.upload(rand(4))
    outputs = [buffers.output(TensorDesc.contiguous((2, 4), "float32")), None]
    with pytest.raises(UnsupportedOpError, match="aclnnRmsNormGetWorkspaceSize is missing from libopapi.so"):
        ascend.backend.op_prepare("RmsNorm", [x, gamma], outputs, {"epsilon": 1e-6})
    with pytest.raises(UnsupportedOpError, match="no binding for catalog op 'GatherNd'"):
        ascend.backend.op_prepare("GatherNd", [x, x], outputs[:1], {})


def test_handles_are_released_with_their_executors(fake_lib, hooks):
    kinds = ("tensor", "scalar", "int_array", "executor")
    before = {kind: hooks.live(kind) for kind in kinds}
    with aclpipe.open_device("ascend:0") as device:
        run(device, "Add", [rand(4), rand(4)], {"alpha": 2.0})
        run(device, "LayerNorm", [rand(2, 4), None, None], {"normalizedShape": [4]})
        buffers = Buffers(device)
        inputs, outputs = add_call(buffers, rand(4), rand(4))
        executor = device.backend.op_prepare("Add", inputs, outputs, {})
        device.backend.op_set_repeatable(executor)
        assert hooks.live("executor") == before["executor"] + 1
        device.backend.op_destroy(executor)
        abandoned = device.backend.op_prepare("Relu", inputs[:1], outputs, {})  # never launched
        device.backend.op_destroy(abandoned)
        forgotten = device.backend.op_prepare("Add", inputs, outputs, {"alpha": 3})
        device.backend.op_set_repeatable(forgotten)  # still held when the device closes
    assert {kind: hooks.live(kind) for kind in kinds} == before
    device.backend.op_destroy(forgotten)  # after close: a no-op, not a crash
