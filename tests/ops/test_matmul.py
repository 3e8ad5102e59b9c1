"""Matmul, BatchMatMul, Mm, Addmm on the simulator against float64 numpy."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import (
    FLOAT_DTYPES,
    OpCall,
    assert_close_to_peak,
    check_shared_workspace,
    desc,
    random,
    run_op,
)

from aclpipe.errors import InvalidArgumentError
from aclpipe.ops import get_op
from aclpipe.ops.matmul import round_to_hf32

F64 = np.float64


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shapes", [((5,), (5,)), ((4, 5), (5,)), ((5,), (5, 3)), ((2, 4, 5), (5, 3)),
                                    ((2, 1, 4, 5), (3, 5, 2)), ((4, 5), (2, 5, 3))])
def test_matmul_follows_torch_matmul_shapes(device, dtype, shapes):
    a, b = random(shapes[0], dtype, 1), random(shapes[1], dtype, 2)
    (out,) = run_op(device, "Matmul", [a, b])
    assert out.dtype == a.dtype
    assert_close_to_peak(out, np.matmul(a.astype(F64), b.astype(F64)), dtype, scale=3)


@pytest.mark.parametrize("layout", ["contiguous", "strided", "transposed"])
def test_a_batch_of_rows_against_one_matrix_in_any_layout(device, layout):
    # contiguous rows go to BLAS as one matrix; other layouts through the workspace, per batch entry
    a, b = random((2, 16, 96), "float32", 1), random((96, 24), "float32", 2)
    (out,) = run_op(device, "Matmul", [a, b], layout=[layout, "contiguous"])
    assert_close_to_peak(out, np.matmul(a.astype(F64), b.astype(F64)), "float32", scale=3)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_mm_and_bmm_read_transposed_operands_through_the_workspace(device, dtype):
    a, b = random((6, 4), dtype, 1), random((5, 6), dtype, 2)  # a.T is [4, 6], b.T is [6, 5]
    call = OpCall(device, "Mm", [a.T, b.T])
    assert call.workspace_size >= a.nbytes + b.nbytes
    stream = device.create_stream()
    call.launch_with_workspace(stream)
    stream.sync()
    assert_close_to_peak(call.results()[0], a.T.astype(F64) @ b.T.astype(F64), dtype, scale=3)

    x, y = random((3, 5, 4), dtype, 3), random((3, 5, 2), dtype, 4)
    (out,) = run_op(device, "BatchMatMul", [x.transpose(0, 2, 1), y])
    assert_close_to_peak(out, np.matmul(x.transpose(0, 2, 1).astype(F64), y.astype(F64)), dtype, scale=3)


def test_contiguous_operands_need_no_workspace(device):
    call = OpCall(device, "Mm", [random((4, 3), "float32"), random((3, 2), "float32")])
    assert call.workspace_size == 0


def test_workspace_holds_the_contiguous_copy(device):
    a = random((6, 4), "float32", 1)
    call = OpCall(device, "Mm", [a.T, random((6, 3), "float32", 2)])
    workspace = device.alloc(call.workspace_size)
    stream = device.create_stream()
    call.launch(stream, workspace)
    stream.sync()
    staged = device.download(workspace, "float32", (4, 6))
    np.testing.assert_array_equal(staged, a.T)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_addmm_scales_and_broadcasts_self(device, dtype):
    bias, m1, m2 = random((3,), dtype, 1), random((4, 5), dtype, 2), random((3, 5), dtype, 3)
    (out,) = run_op(device, "Addmm", [bias, m1, m2.T], {"beta": 0.5, "alpha": 2.0})
    expected = 0.5 * bias.astype(F64) + 2.0 * (m1.astype(F64) @ m2.T.astype(F64))
    assert_close_to_peak(out, expected, dtype, scale=3)


def test_addmm_with_beta_zero_ignores_nan_in_self(device):
    m1, m2 = random((2, 3), "float32", 1), random((3, 2), "float32", 2)
    (out,) = run_op(device, "Addmm", [np.full((2, 2), np.nan, np.float32), m1, m2], {"beta": 0})
    assert_close_to_peak(out, m1.astype(F64) @ m2.astype(F64), "float32")


def test_cube_math_type_rounds_float32_operands(device):
    a, b = random((8, 16), "float32", 1), random((16, 8), "float32", 2)
    exact = a.astype(F64) @ b.astype(F64)
    (keep,) = run_op(device, "Mm", [a, b], {"cubeMathType": 0})
    (fp16,) = run_op(device, "Mm", [a, b], {"cubeMathType": 2})
    (hf32,) = run_op(device, "Mm", [a, b], {"cubeMathType": 3})
    assert_close_to_peak(keep, exact, "float32", scale=4)
    via_fp16 = a.astype(np.float16).astype(F64) @ b.astype(np.float16).astype(F64)
    assert_close_to_peak(fp16, via_fp16, "float32", scale=4)
    assert_close_to_peak(hf32, round_to_hf32(a).astype(F64) @ round_to_hf32(b).astype(F64), "float32", scale=4)
    assert not np.allclose(hf32, exact, rtol=1e-6, atol=0)


def test_round_to_hf32_keeps_eleven_mantissa_bits_and_non_finite_values():
    values = np.array([1 + 2**-11, 1 + 2**-12 + 2**-13, np.inf, -np.inf, np.nan], np.float32)
    rounded = round_to_hf32(values)
    assert rounded[0] == np.float32(1 + 2**-11)
    assert rounded[1] == np.float32(1 + 2**-11)
    assert np.isposinf(rounded[2]) and np.isneginf(rounded[3]) and np.isnan(rounded[4])


def test_plans_run_on_the_cube_with_matmul_flops():
    plan = get_op("Matmul").prepare([desc((3, 4, 5)), desc((5, 6))], [desc((3, 4, 6))], {})
    assert plan.cube and plan.flops == 2 * 4 * 6 * 5 * 3


@pytest.mark.parametrize("op, inputs, out, attrs, code, needle", [
    ("Mm", [None, desc((3, 2))], desc((2, 2)), {}, 161001, "self"),
    ("Mm", [desc((2, 3)), desc((3, 2))], None, {}, 161001, "out"),
    ("Mm", [desc((1, 2, 3)), desc((3, 2))], desc((2, 2)), {}, 161002, "rank"),
    ("Mm", [desc((2, 3)), desc((4, 2))], desc((2, 2)), {}, 161002, "mat2"),
    ("Mm", [desc((2, 3)), desc((3, 2), "float16")], desc((2, 2)), {}, 161002, "float16"),
    ("Mm", [desc((2, 3), "int32"), desc((3, 2), "int32")], desc((2, 2), "int32"), {}, 161002, "int32"),
    ("Mm", [desc((2, 3)), desc((3, 2))], desc((2, 3)), {}, 161002, "out"),
    ("Mm", [desc((2, 3)), desc((3, 2))], desc((2, 2), "float16"), {}, 161002, "out"),
    ("Mm", [desc((2, 3)), desc((3, 2))], desc((2, 2)), {"cubeMathType": 5}, 161002, "cubeMathType"),
    ("Matmul", [desc(()), desc((3,))], desc(()), {}, 161002, "0-d"),
    ("Matmul", [desc((2, 4, 3)), desc((3, 3, 2))], desc((3, 4, 2)), {}, 161002, "broadcast"),
    ("BatchMatMul", [desc((2, 4, 3)), desc((3, 3, 2))], desc((2, 4, 2)), {}, 161002, "batch"),
    ("Addmm", [desc((3, 3)), desc((2, 3)), desc((3, 2))], desc((2, 2)), {}, 161002, "self"),
    ("Addmm", [desc((2,)), desc((2, 3)), desc((3, 2))], desc((2, 2)), {"alpha": "x"}, 161002, "alpha"),
])
def test_phase_one_refuses_bad_arguments(device, op, inputs, out, attrs, code, needle):
    with pytest.raises(InvalidArgumentError) as caught:
        device.backend.op_prepare(op, inputs, [out], attrs)
    assert caught.value.code == code
    assert f"aclnn{op}" in str(caught.value) and needle in str(caught.value)


def test_short_or_missing_workspace_is_refused_at_launch(device):
    call = OpCall(device, "Mm", [random((5, 4), "float32").T, random((5, 3), "float32")])
    stream = device.create_stream()
    short = device.alloc(call.workspace_size - 32)
    with pytest.raises(InvalidArgumentError) as caught:
        call.launch(stream, short, call.workspace_size - 32)
    assert caught.value.code == 161002 and "workspace" in str(caught.value)
    with pytest.raises(InvalidArgumentError) as caught:
        device.backend.op_launch(call.executor, 0, 0, stream.handle)
    assert caught.value.code == 161001


def test_workspace_shared_by_unordered_streams_is_a_hazard(device):
    a, b = random((6, 4), "float32", 1), random((6, 3), "float32", 2)
    calls = [OpCall(device, "Mm", [a.T, b]) for _ in range(2)]
    check_shared_workspace(device, calls)
    for call in calls:
        assert_close_to_peak(call.results()[0], a.T.astype(F64) @ b.astype(F64), "float32", scale=3)
