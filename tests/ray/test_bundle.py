"""Graphs packed to travel to Ray workers, and rebuilt there."""

from __future__ import annotations

import pickle
from pathlib import Path

import anyio
import numpy as np
import pytest

import aclpipe
from aclpipe.ray import GraphBundle

GRAPHS = Path(__file__).resolve().parents[2] / "graphs"


async def _outputs(graph: aclpipe.Graph, x: np.ndarray) -> dict[str, np.ndarray]:
    async with aclpipe.Pipeline(graph) as pipe:
        return await pipe.run(x=x)


def built() -> aclpipe.Graph:
    g = aclpipe.Graph("built")
    x = g.input("x", shape=(None, 8))
    weight = np.random.default_rng(1).standard_normal((8, 4)).astype(np.float32)
    g.output("y", g.relu(g.matmul(x, g.constant("w", weight))))
    return g


@pytest.mark.parametrize("source", ["built", "file"])
def test_a_graph_and_its_constants_travel_by_value(source):
    graph = built() if source == "built" else aclpipe.load_graph(GRAPHS / "mlp.yaml")
    bundle = GraphBundle.of(graph if source == "built" else GRAPHS / "mlp.yaml")
    assert bundle.kind == "graph"
    if source == "built":
        assert list(bundle.arrays) == ["graph.w.npy"]  # arrays go as arrays, not files
    again = pickle.loads(pickle.dumps(bundle)).load()
    x = np.random.default_rng(0).standard_normal((4, 8 if source == "built" else 784)).astype(np.float32)
    expected, got = anyio.run(_outputs, graph, x), anyio.run(_outputs, again, x)
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name])


def test_onnx_models_travel_as_bytes():
    pytest.importorskip("onnx")
    path = GRAPHS / "mlp.onnx"
    from_path, from_bytes = GraphBundle.of(path), GraphBundle.of(path.read_bytes())
    assert from_path.kind == from_bytes.kind == "onnx" and from_path.text == from_bytes.text
    assert list(from_bytes.load().inputs) == list(aclpipe.load_onnx(path).inputs)


def test_anything_else_is_refused():
    with pytest.raises(TypeError, match="travels as"):
        GraphBundle.of(42)  # type: ignore[arg-type]
