from __future__ import annotations

import numpy as np
import pytest
from helpers import desc, prepare, run_op

from aclpipe.ops.integer_product import FLOAT32_EXACT, ExactProduct

# the depths float32 holds exactly in one product: uint8 x int8 (255 * 128), uint8 x uint8
CHUNK = FLOAT32_EXACT // (255 * 128)
CHUNK_UINT8 = FLOAT32_EXACT // (255 * 255)


@pytest.mark.parametrize("depth,right,name", [
    (CHUNK, 128, "float32"), (CHUNK + 1, 128, "float32-by-2"), (2 * CHUNK, 128, "float32-by-2"),
    (2 * CHUNK + 1, 128, "float32-by-3"), (CHUNK_UINT8, 255, "float32"), (CHUNK_UINT8 + 1, 255, "float32-by-2"),
])
def test_depth_is_cut_where_partial_sums_would_pass_float32_integers(depth, right, name):
    assert ExactProduct.choose(depth, 255, right).name == name


def test_operands_too_wide_for_float32_terms_are_refused():
    with pytest.raises(ValueError, match="2\\*\\*24"):
        ExactProduct.choose(4, 2 ** 12, 2 ** 12 + 1)


def _worst_case(depth, b_type):
    """Operands at their largest magnitudes or one below (odd products, so that partial sums
    past 2**24 need not be float32 numbers)."""
    rng = np.random.default_rng(depth)
    a = rng.choice(np.array([254, 255], np.uint8), (3, depth))
    extreme = -128 if b_type == "int8" else 255
    b = rng.choice(np.array([extreme, extreme + (1 if extreme < 0 else -1)]).astype(b_type), (depth, 2))
    return a, b


@pytest.mark.parametrize("depth,b_type", [
    (CHUNK, "int8"), (CHUNK + 1, "int8"), (2 * CHUNK + 1, "int8"), (CHUNK_UINT8, "uint8"), (CHUNK_UINT8 + 1, "uint8"),
])
def test_matmul_integer_is_exact_on_both_sides_of_each_limit(device, depth, b_type):
    a, b = _worst_case(depth, b_type)
    zeros = (np.array(0, np.uint8), np.array(0, b_type))
    (got,) = run_op(device, "MatmulInteger", [a, b, *zeros])
    exact = a.astype(np.int64) @ b.astype(np.int64)
    np.testing.assert_array_equal(got, exact.astype(np.int32))


def test_matmul_integer_past_int32_wraps_like_the_accumulators(device):
    a = np.full((1, 70000), 255, np.uint8)
    b = np.full((70000, 1), 255, np.uint8)
    (got,) = run_op(device, "MatmulInteger", [a, b])
    assert prepare("MatmulInteger", [desc(a.shape, "uint8"), desc(b.shape, "uint8")]).variant == "blas-float32-by-272"
    np.testing.assert_array_equal(got, (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32))


@pytest.mark.parametrize("a_shape,b_shape", [((64,), (2, 64, 7)), ((3, 64), (64,)), ((2, 1, 4, 64), (3, 64, 5))])
def test_matmul_integer_one_dim_and_batched_operands_with_zero_points(device, a_shape, b_shape):
    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, a_shape).astype(np.uint8)
    b = rng.integers(-128, 128, b_shape).astype(np.int8)
    rows = a_shape[-2] if len(a_shape) > 1 else 1
    columns = b_shape[-1] if len(b_shape) > 1 else 1
    a_zero = rng.integers(0, 256, (rows,)).astype(np.uint8) if rows > 1 else np.array(7, np.uint8)
    b_zero = rng.integers(-5, 5, (columns,)).astype(np.int8)
    (got,) = run_op(device, "MatmulInteger", [a, b, a_zero, b_zero])
    shifted_a = a.astype(np.int64) - (a_zero.astype(np.int64).reshape(-1, 1) if rows > 1 else a_zero)
    expected = np.matmul(shifted_a, b.astype(np.int64) - b_zero.astype(np.int64).reshape(-1))
    np.testing.assert_array_equal(got, expected.astype(np.int32))


def test_matmul_integer_converts_a_wide_b_by_blocks_of_columns(device):
    # 1,024 rows take 96 float32 columns a block: 200 columns are two full blocks and a part
    rng = np.random.default_rng(2)
    a = rng.integers(0, 256, (2, 3, 1024)).astype(np.uint8)  # 6 rows: few, so b goes by blocks
    b = rng.integers(-128, 128, (1024, 200)).astype(np.int8)
    a_zero, b_zero = np.array(128, np.uint8), rng.integers(-3, 3, (200,)).astype(np.int8)
    plan = prepare("MatmulInteger", [desc(a.shape, "uint8"), desc(b.shape, "int8"), desc((), "uint8"),
                                     desc((200,), "int8")])
    assert plan.variant == "blas-float32-by-2" and plan.workspace_size < 4 * b.size
    (got,) = run_op(device, "MatmulInteger", [a, b, a_zero, b_zero])
    expected = (a.astype(np.int64) - 128) @ (b.astype(np.int64) - b_zero)
    np.testing.assert_array_equal(got, expected.astype(np.int32))
