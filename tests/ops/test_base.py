"""Plans' ``bind``: once per bound launch, then the same bits as ``kernel``, launch after launch.

A repeatable executor is launched twice on one workspace (the simulator keeps its bound run);
between the launches new values are copied into the input buffers, so a view that ``bind``
kept as a copy (or a result cached by mistake) shows up as the first launch's answer.  Each
launch's outputs must equal, bit for bit, ``plan.kernel`` run on host arrays of the same values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from helpers import OpCall, _storage, random

from aclpipe.dtypes import as_dtype
from aclpipe.errors import BackendError, DeviceFault
from aclpipe.ops import get_op
from aclpipe.ops.base import OpPlan
from aclpipe.tensor import TensorDesc

Make = Any  # a seed -> the input arrays


def _floats(*shapes: tuple[int, ...], dtype: str = "float32") -> Make:
    return lambda seed: [random(shape, dtype, seed + index) for index, shape in enumerate(shapes)]


def _indexed(data: tuple[int, ...], index: tuple[int, ...], high: int) -> Make:
    return lambda seed: [random(data, "float32", seed),
                         np.random.default_rng(seed).integers(0, high, size=index).astype(np.int64)]


#: (op, inputs by seed, attrs, layout): fast paths and the paths that fall back to ``kernel``.
CASES = [
    ("LayerNorm", _floats((2, 5, 8), (8,), (8,)), {"normalizedShape": [8]}, "view"),
    ("LayerNorm", _floats((3, 4, 6)), {"normalizedShape": [4, 6]}, "view"),
    ("LayerNorm", _floats((2, 5, 8), (8,), (8,)), {"normalizedShape": [8]}, "strided"),
    ("LayerNorm", _floats((3, 4, 6), (4, 6)), {"normalizedShape": [4, 6]}, "transposed"),
    ("LayerNorm", _floats((2, 5, 8), (8,), (8,), dtype="float16"), {"normalizedShape": [8]}, "view"),
    ("Softmax", _floats((3, 4, 6)), {"dim": -1}, "view"),
    ("Softmax", _floats((3, 4, 6)), {"dim": -1}, "strided"),
    ("Softmax", _floats((3, 4, 6)), {"dim": -1}, "transposed"),
    ("Softmax", _floats((3, 4, 6)), {"dim": 1}, "view"),
    ("Matmul", _floats((2, 3, 4), (4, 5)), {}, "view"),
    ("Matmul", _floats((2, 3, 4), (4, 5)), {}, "transposed"),
    ("Matmul", _floats((3, 4), (4, 5)), {"cubeMathType": 1}, "view"),
    ("Addmm", _floats((5,), (3, 4), (4, 5)), {}, "view"),
    ("Addmm", _floats((3, 5), (3, 4), (4, 5)), {"beta": 0.5, "alpha": 2.0}, "transposed"),
    ("Add", _floats((2, 3, 4), (4,)), {}, "view"),
    ("Mul", _floats((2, 3, 4), (2, 3, 4)), {}, "strided"),
    ("Add", _floats((2, 3), (2, 3), dtype="float16"), {"alpha": 2}, "view"),
    ("Relu", _floats((4, 6)), {}, "view"),
    ("Clamp", _floats((4, 6)), {"min": -0.5, "max": 0.5}, "view"),
    ("Hardsigmoid", _floats((4, 6)), {}, "view"),
    ("Erf", _floats((2, 3, 8)), {}, "strided"),
    ("Erf", _floats((2, 3, 8), dtype="float16"), {}, "view"),
    ("IndexSelect", _indexed((5, 3), (4,), 5), {"dim": 0}, "view"),
    ("IndexSelect", _indexed((3, 5), (4,), 5), {"dim": 1}, "view"),
    ("Embedding", _indexed((6, 3), (2, 2), 6), {}, "view"),
    ("Permute", _floats((2, 3, 4)), {"dims": [2, 0, 1]}, "view"),
    ("Permute", _floats((2, 3, 4)), {"dims": [2, 0, 1]}, "strided"),
    ("Cast", _floats((2, 3)), {"dtype": "float16"}, "view"),
    ("Split", _floats((6, 2)), {"splitSections": [2, 4], "dim": 0}, "view"),
    ("Convolution", _floats((1, 3, 6, 6), (4, 3, 3, 3), (4,)),
     {"stride": [1, 1], "padding": [1, 1], "dilation": [1, 1]}, "view"),
    ("Convolution", _floats((2, 4, 5, 5), (4, 1, 3, 3)),
     {"stride": [2, 2], "padding": [1, 1], "dilation": [1, 1], "groups": 4}, "view"),
    ("Convolution", _floats((1, 4, 3, 3), (6, 4, 1, 1), (6,)), {}, "view"),
    ("Convolution", _floats((1, 3, 6, 6), (4, 3, 3, 3)), {"padding": [1, 1], "cubeMathType": 2}, "view"),
    ("Mean", _floats((2, 3, 4, 4)), {"dim": [2, 3], "keepDim": True}, "view"),
    # unfolded by rows (many taps per output channel): mobile's depthwise 5x5 with stride 2,
    # a stride and dilation that split the taps into phase groups, a strided (copied) weight
    ("Convolution", _floats((2, 6, 9, 8), (6, 1, 5, 5), (6,)),
     {"stride": [2, 2], "padding": [2, 2], "dilation": [1, 1], "groups": 6}, "view"),
    ("Convolution", _floats((1, 4, 9, 8), (2, 4, 3, 2)),
     {"stride": [3, 2], "padding": [1, 0], "dilation": [2, 1]}, "view"),
    ("Convolution", _floats((1, 4, 6, 6), (2, 4, 3, 3), (2,)), {"padding": [1, 1]}, "transposed"),
    ("Convolution", _floats((1, 4, 6, 6), (2, 4, 3, 3), dtype="float16"), {"padding": [1, 1]}, "view"),
    # sums over trailing dims as dot products with ones; other dims and strided inputs
    ("Mean", _floats((2, 3, 4, 4)), {"dim": [3, 2], "keepDim": False}, "view"),
    ("Mean", _floats((2, 3, 4, 4)), {"dim": [1, 2], "keepDim": True}, "view"),
    ("Mean", _floats((2, 3, 4, 4)), {"dim": [2, 3], "keepDim": True}, "strided"),
    ("ReduceSum", _floats((3, 5, 7)), {"dims": [2], "keepDims": True}, "view"),
    ("ReduceSum", _floats((3, 5, 7), dtype="float16"), {"dims": [1, 2], "keepDims": False}, "view"),
    # the clamps compare against arrays of their bounds: one bound, and nan and signed zeros
    ("Clamp", _floats((4, 6)), {"min": -0.5}, "view"),
    ("Clamp", _floats((4, 6)), {"max": 0.25}, "strided"),
    ("Relu", lambda seed: [np.roll(np.array([[-0.0, 0.0, np.nan, -np.inf], [np.inf, -1.0, 2.0, -1e-45]],
                                            np.float32), seed)], {}, "view"),
    ("Hardswish", _floats((2, 3, 8)), {}, "view"),
    ("Hardswish", _floats((2, 3, 8)), {}, "strided"),
    ("Hardsigmoid", lambda seed: [np.roll(np.array([-0.0, 0.0, np.nan, -3.0, 3.0, np.inf, -np.inf, 2.9999],
                                                   np.float32), seed)], {}, "view"),
]


def _host(plan: OpPlan, arrays: Sequence[np.ndarray], out_shapes: Sequence[tuple[tuple[int, ...], Any]]
          ) -> list[np.ndarray]:
    """``plan.kernel`` on host copies of ``arrays``: the reference bits."""
    outs = [np.zeros(shape, dtype) for shape, dtype in out_shapes]
    plan.kernel([np.array(a) for a in arrays], outs, np.zeros(plan.workspace_size, np.uint8))
    return outs


def _refill(device: Any, stream: Any, call: OpCall, arrays: Sequence[np.ndarray], layout: str) -> None:
    """Copy ``arrays`` into ``call``'s input buffers, stored as ``layout`` stores them."""
    for buffer, array in zip(call.buffers, arrays):
        stored, _, _ = _storage(np.asarray(array), layout)
        fresh = device.upload(stored)
        stream.memcpy(buffer, fresh)
        stream.sync()
        fresh.close()


@pytest.mark.parametrize("op,make,attrs,layout", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_a_bound_launch_gives_the_kernels_bits_every_time(device, op, make, attrs, layout):
    first, second = make(1), make(7)
    call = OpCall(device, op, first, attrs, layout=layout)
    call.executor.set_repeatable()
    plan = call.executor.plan
    shapes = [(d.shape, d.dtype.numpy) for d in call.out_descs]
    stream = device.create_stream()
    workspace = device.alloc(call.workspace_size) if call.workspace_size else None
    try:
        for arrays in (first, second):
            _refill(device, stream, call, arrays, layout)
            call.launch(stream, workspace)
            stream.sync()
            for got, want in zip(call.results(), _host(plan, arrays, shapes)):
                assert got is not None
                np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    finally:
        if workspace is not None:
            workspace.close()
        call.close()
        stream.close()


@pytest.mark.parametrize("op", sorted({case[0] for case in CASES}))
def test_the_ops_of_the_benchmark_models_give_a_bind(op):
    """Their first case (fp32, contiguous) gets a plan with ``bind``."""
    _, make, attrs, _ = next(case for case in CASES if case[0] == op)
    spec = get_op(op)
    inputs = [TensorDesc.contiguous(a.shape, as_dtype(a.dtype)) for a in make(0)]
    assert spec.prepare(inputs, spec.infer(inputs, attrs), attrs).bind is not None


def test_a_bound_index_select_still_refuses_an_index_out_of_range(device):
    data = random((5, 3), "float32", 0)
    call = OpCall(device, "IndexSelect", [data, np.array([0, 4], np.int64)], {"dim": 0})
    call.executor.set_repeatable()
    stream = device.create_stream()
    try:
        call.launch(stream, None)
        stream.sync()
        _refill(device, stream, call, [data, np.array([1, 5], np.int64)], "view")
        call.launch(stream, None)
        with pytest.raises(DeviceFault) as caught:
            stream.sync()
        assert isinstance(caught.value, BackendError) and caught.value.code == 361001
        assert "= 5 is out of range" in str(caught.value)
    finally:
        call.close()
        stream.close()


def test_a_plan_without_bind_runs_its_kernel_on_every_launch(device):
    """An op that gives no ``bind`` (Where here) runs as before: its kernel, launch after launch."""
    condition = np.array([True, False, True])
    call = OpCall(device, "Where", [condition, random((3,), "float32", 1), random((3,), "float32", 2)])
    assert call.executor.plan.bind is None
    call.executor.set_repeatable()
    stream = device.create_stream()
    try:
        for seed in (3, 4):
            values = [condition, random((3,), "float32", seed), random((3,), "float32", seed + 1)]
            _refill(device, stream, call, values, "view")
            call.launch(stream, None)
            stream.sync()
            got = call.results()[0]
            np.testing.assert_array_equal(got, np.where(values[0], values[1], values[2]))
    finally:
        call.close()
        stream.close()
