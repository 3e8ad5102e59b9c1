"""Shape buckets (pad, run, slice back) and batches with no rows."""

from __future__ import annotations

import numpy as np
import pytest
from pipeline_graphs import assert_outputs, mlp, reference

from aclpipe import GraphError, Pipeline
from aclpipe.graph import Graph
from aclpipe.pipeline import ShapeBuckets

pytestmark = pytest.mark.anyio


def batch(rows: int, seed: int = 0, width: int = 32) -> np.ndarray:
    return np.random.default_rng(seed + rows).standard_normal((rows, width)).astype(np.float32)


async def test_every_batch_size_is_served_by_a_few_buckets(device, anyio_backend):
    graph = mlp()
    async with Pipeline(graph, device, buckets=(1, 2, 4, 8)) as pipe:
        for rows in range(1, 12):
            x = batch(rows)
            out = await pipe.run(x=x)
            assert out["y"].shape == (rows, 10)
            assert_outputs(out, reference(graph, {"x": x}))
        # 1, 2, 4 and 8 rows, then 9, 10 and 11 (past the largest bucket) at their own sizes.
        assert pipe.stats().prepared == 7


async def test_buckets_apply_to_streams_too(device):
    graph = mlp()
    sizes = [3, 1, 5, 2, 7]
    async with Pipeline(graph, device, buckets=(4, 8)) as pipe:
        results = [out async for out in pipe.stream({"x": batch(rows)} for rows in sizes)]
        assert pipe.stats().prepared == 2
    for rows, out in zip(sizes, results):
        assert_outputs(out, reference(graph, {"x": batch(rows)}))


def two_inputs() -> Graph:
    g = Graph("pair")
    a, b = g.input("a", shape=("batch", 8)), g.input("b", shape=("batch", 8))
    g.output("sum", g.add(a, b))
    return g


async def test_inputs_sharing_the_batch_are_padded_together(device):
    async with Pipeline(two_inputs(), device, buckets=(4,)) as pipe:
        a, b = batch(3, width=8), batch(3, seed=1, width=8)
        np.testing.assert_allclose((await pipe.run(a=a, b=b))["sum"], a + b, rtol=1e-6)
        with pytest.raises(ValueError, match="share the batch"):
            await pipe.run(a=a, b=batch(2, width=8))


async def test_an_output_that_does_not_lead_with_the_batch_is_refused(device):
    g = Graph("total")
    x = g.input("x", shape=(None, 8))
    g.output("total", g.op("ReduceSum", x, dims=[0], keepDims=False))
    async with Pipeline(g, device, buckets=(4,)) as pipe:
        with pytest.raises(GraphError, match="first dim is not the batch"):
            await pipe.run(x=batch(3, width=8))
        assert pipe.stats().in_flight == 0
        np.testing.assert_allclose((await pipe.run(x=batch(4, width=8)))["total"], batch(4, width=8).sum(0),
                                   rtol=1e-5)


@pytest.mark.parametrize("bad, error", [((), ValueError), ((0, 4), ValueError), ((2.5,), ValueError),
                                        (("4",), ValueError), (4, TypeError)])
def test_bad_buckets_are_refused(bad, error):
    with pytest.raises(error, match="buckets"):
        ShapeBuckets(mlp(), bad)


def test_buckets_need_a_dynamic_first_dim():
    with pytest.raises(ValueError, match="first dim is dynamic"):
        ShapeBuckets(mlp(batch=4), (4, 8))


async def test_an_empty_batch_gives_empty_outputs_without_touching_the_device(device, anyio_backend):
    async with Pipeline(mlp(), device) as pipe:
        out = await pipe.run(x=np.zeros((0, 32), np.float32))
        assert out["y"].shape == (0, 10) and out["y"].dtype == np.float32
        assert pipe.stats().runs == 0 and pipe.stats().signatures == 0


async def test_an_empty_batch_keeps_its_place_in_a_stream(device):
    graph = mlp()
    sizes = [2, 0, 3, 0]
    async with Pipeline(graph, device, buckets=(4,)) as pipe:
        results = [out async for out in pipe.stream({"x": batch(rows)} for rows in sizes)]
    assert [out["y"].shape[0] for out in results] == sizes
    assert_outputs(results[2], reference(graph, {"x": batch(3)}))


async def test_an_empty_batch_whose_output_is_not_empty_runs_on_the_device(device, anyio_backend):
    g = Graph("total")
    x = g.input("x", shape=(None, 8))
    g.output("total", g.op("ReduceSum", x, dims=[0], keepDims=False))
    g.output("rows", g.relu(x))
    async with Pipeline(g, device) as pipe:
        out = await pipe.run(x=np.zeros((0, 8), np.float32))  # zero-size tensors on the device
        np.testing.assert_array_equal(out["total"], np.zeros(8, np.float32))  # a sum's identity
        assert out["rows"].shape == (0, 8) and pipe.stats().runs == 1
        np.testing.assert_allclose((await pipe.run(x=batch(3, width=8)))["total"], batch(3, width=8).sum(0),
                                   rtol=1e-5)


# -- the one input rule (issue 23, section 3) ------------------------------------------------------------------
@pytest.mark.parametrize(("value", "dtype", "message"), [
    (np.array([2**33 + 5]), "int32", "do not fit int32"),
    (np.array([200], np.uint8), "int8", "do not fit int8"),
    (np.array([-1, 255]), "uint8", "values from -1 to 255 do not fit uint8"),
    (np.array([1e300]), "float32", "overflows float32 to infinity"),
    (np.array([70000]), "float16", "overflows float16 to infinity"),
    (np.array([1e300]), "bfloat16", "overflows bfloat16 to infinity"),
    ([1.9, -2.7], "int32", "float64 values cannot become int32"),
    ([1, 0], "bool", "int64 values cannot become bool"),
    ([1.0, None], "float32", r"null \(None\)"),
    (np.ones(2, np.complex64), "float32", "complex numbers"),
])
def test_as_input_refuses_any_cast_that_would_change_a_value(value, dtype, message):
    from aclpipe.errors import InputCastError
    from aclpipe.pipeline.batches import as_input

    with pytest.raises(InputCastError, match=message) as info:
        as_input("x", value, dtype)
    assert info.value.input == "x" and isinstance(info.value, TypeError)


def test_as_input_converts_when_every_value_survives_and_pipeline_run_takes_the_declared_dtype_only():
    from aclpipe.errors import InputCastError
    from aclpipe.pipeline.batches import as_input

    kept = as_input("x", np.array([-(2**31), 2**31 - 1]), "int32")
    assert kept.dtype == np.int32 and kept.tolist() == [-(2**31), 2**31 - 1]
    floats = as_input("x", np.array([1.5, np.nan, -np.inf]), "float32")  # NaN and inf in the data stay
    assert floats.dtype == np.float32 and np.isnan(floats[1]) and floats[2] == -np.inf
    assert as_input("x", [True, False], "int32").tolist() == [1, 0]
    assert as_input("x", [[0, 255]], "uint8").dtype == np.uint8  # JSON's int64 into uint8: every value fits
    same = np.ones(3, np.float32)
    assert as_input("x", same, "float32", convert=False) is same
    with pytest.raises(InputCastError, match="expected dtype float32 .* got float64"):
        as_input("x", np.ones(3), "float32", convert=False)
