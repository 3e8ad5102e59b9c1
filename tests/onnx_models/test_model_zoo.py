"""Whole models through ``load_onnx`` + ``Pipeline`` on the simulator (sanitizer on), on 1 and 4
streams, against onnxruntime: every output within 1e-4 of the peer relative to the output's
scale (integer outputs exactly equal), for every input signature the zoo lists.

The zoo (``graphs/onnx_zoo``): BERT-style encoders at opsets 11/14/17/21 (dynamic batch and
sequence), MobileNetV3-style and OCR-style CNNs at three opsets each (dynamic batch and spatial
dims), PyTorch exports (when torch is installed), and the onnx package's ``light`` ImageNet
topologies with seeded random weights at their full 224x224 input (their fixed-size pooling
and Reshapes do not allow smaller inputs).
"""

from __future__ import annotations

from typing import Any

import anyio
import numpy as np
import pytest
from onnx_peer import peer_outputs, relative_error
from onnx_zoo import MODELS, torch_available

import aclpipe
from aclpipe.onnx.importer import OnnxGraph, load_onnx

TOLERANCE = 1e-4  # relative to each output's largest magnitude; the issue asks for well under 1e-3

_GRAPHS: dict[str, OnnxGraph] = {}
_EXPECTED: dict[str, list[list[np.ndarray]]] = {}


def _graph(name: str) -> OnnxGraph:
    if name not in _GRAPHS:
        _GRAPHS[name] = load_onnx(MODELS[name].model)
    return _GRAPHS[name]


def _expected(name: str) -> list[list[np.ndarray]]:
    if name not in _EXPECTED:
        _EXPECTED[name] = [peer_outputs(MODELS[name].model, feeds) for feeds in MODELS[name].feeds()]
    return _EXPECTED[name]


def _selected(group: str) -> list[Any]:
    names = [name for name, model in MODELS.items() if model.group == group]
    marks = [pytest.mark.skipif(not torch_available(), reason="torch is not installed")] if group == "torch" else []
    return [pytest.param(name, marks=marks) for name in names]


async def _run_all(graph: OnnxGraph, feeds: list[dict[str, np.ndarray]], streams: int) -> list[dict[str, np.ndarray]]:
    device = aclpipe.open_device("sim", sanitizer=True)
    try:
        # The pool is sized for the largest signature's workspaces (the first one listed).
        async with aclpipe.Pipeline(graph, device, streams=streams, pool_bytes=32 << 20) as pipe:
            if streams == 1:
                return [await pipe.run(**batch) for batch in feeds]
            return [result async for result in pipe.stream(feeds)]
    finally:
        device.close()


def _check(name: str, streams: int) -> None:
    model = MODELS[name]
    results = anyio.run(_run_all, _graph(name), model.feeds(), streams)
    for signature, (got, expected) in enumerate(zip(results, _expected(name))):
        for output, want in zip(model.model.graph.output, expected):
            value = got[output.name]
            assert value.dtype == want.dtype, f"{name} {output.name}: dtype {value.dtype}, expected {want.dtype}"
            if want.dtype.kind in "iub":
                np.testing.assert_array_equal(value, want, err_msg=f"{name} {output.name} signature {signature}")
            else:
                error = relative_error(value, want)
                assert error < TOLERANCE, f"{name} {output.name} signature {signature}: relative error {error:.2e}"


@pytest.mark.parametrize("streams", [1, 4])
@pytest.mark.parametrize("name", _selected("zoo"))
def test_zoo_model_matches_onnxruntime(name: str, streams: int) -> None:
    _check(name, streams)


@pytest.mark.parametrize("streams", [1, 4])
@pytest.mark.parametrize("name", _selected("torch"))
def test_pytorch_export_matches_onnxruntime(name: str, streams: int) -> None:
    _check(name, streams)


@pytest.mark.slow
@pytest.mark.parametrize("streams", [1, 4])
@pytest.mark.parametrize("name", _selected("light"))
def test_light_model_matches_onnxruntime(name: str, streams: int) -> None:
    if name == "light_vgg19":
        pytest.skip("VGG-19 (143M weights, 20 GFLOPs) is measured by benchmarks/bench_onnx.py, not tested here")
    _check(name, streams)
    if streams == 4:  # the last use: free the weights (hundreds of MB for AlexNet and ZFNet)
        _GRAPHS.pop(name, None)
        MODELS[name].__dict__.pop("model", None)


def test_dynamic_models_specialize_once_per_signature() -> None:
    graph = _graph("bert_opset14")
    assert not graph.is_static and graph.nodes == ()
    for feeds in MODELS["bert_opset14"].feeds():
        graph.specialize(**feeds)
        graph.specialize(**feeds)
    assert graph.signatures == len(MODELS["bert_opset14"].shapes)
