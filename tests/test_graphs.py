"""The ready graphs in graphs/: each YAML runs through a Pipeline on the simulator and matches a
plain numpy evaluation written here; the ONNX files are small, valid and up to date."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import anyio
import numpy as np
import pytest

import aclpipe

GRAPHS = Path(__file__).resolve().parent.parent / "graphs"
Weights = Mapping[str, np.ndarray]


# -- numpy references --------------------------------------------------------------------------------
def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    shifted = np.exp(x - x.max(axis=axis, keepdims=True))
    return shifted / shifted.sum(axis=axis, keepdims=True)


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def gelu(x: np.ndarray) -> np.ndarray:
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray, padding: int) -> np.ndarray:
    """Stride 1, NCHW, OIHW."""
    padded = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, w.shape[2:], axis=(2, 3))
    return np.einsum("nchwij,ocij->nohw", windows, w) + b[None, :, None, None]


def batch_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, mean: np.ndarray, var: np.ndarray,
               eps: float = 1e-5) -> np.ndarray:
    shape = (1, -1, 1, 1)
    return (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * gamma.reshape(shape) + beta.reshape(shape)


def pool2x2(x: np.ndarray, reduce: Callable[..., np.ndarray]) -> np.ndarray:
    n, c, h, w = x.shape
    return reduce(x.reshape(n, c, h // 2, 2, w // 2, 2), axis=(3, 5))


def mlp(x: np.ndarray, p: Weights) -> dict[str, np.ndarray]:
    h = np.maximum(x @ p["w1"] + p["b1"], 0)
    h = np.maximum(h @ p["w2"] + p["b2"], 0)
    logits = h @ p["w3"] + p["b3"]
    return {"logits": logits, "probs": softmax(logits)}


def transformer(x: np.ndarray, p: Weights) -> dict[str, np.ndarray]:
    batch, seq, width = x.shape
    heads = 4

    def split(t: np.ndarray) -> np.ndarray:
        return t.reshape(batch, seq, heads, width // heads).transpose(0, 2, 1, 3)

    q, k, v = (split(x @ p[f"w{n}"] + p[f"b{n}"]) for n in "qkv")
    attention = softmax(q @ k.transpose(0, 1, 3, 2) * 0.25)
    context = (attention @ v).transpose(0, 2, 1, 3).reshape(batch, seq, width)
    norm1 = layer_norm(x + context @ p["wo"] + p["bo"], p["ln1_gamma"], p["ln1_beta"])
    ff = gelu(norm1 @ p["w_ff1"] + p["b_ff1"]) @ p["w_ff2"] + p["b_ff2"]
    return {"y": layer_norm(norm1 + ff, p["ln2_gamma"], p["ln2_beta"])}


def cnn(x: np.ndarray, p: Weights) -> dict[str, np.ndarray]:
    def block(h: np.ndarray, n: int) -> np.ndarray:
        h = conv2d(h, p[f"conv{n}_w"], p[f"conv{n}_b"], 1)
        return np.maximum(batch_norm(h, *(p[f"bn{n}_{k}"] for k in ("gamma", "beta", "mean", "var"))), 0)

    h = pool2x2(block(x, 1), np.max)
    h = pool2x2(block(h, 2), np.mean)
    h = np.maximum(conv2d(h, p["conv3_w"], p["conv3_b"], 1), 0)
    features = h.mean(axis=(2, 3))
    return {"logits": features @ p["fc_w"] + p["fc_b"]}


def branchy(x: np.ndarray, p: Weights) -> dict[str, np.ndarray]:
    activations = (lambda h: np.maximum(h, 0), gelu, np.tanh, sigmoid)
    towers = [act(x @ p[f"t{i}_w1"] + p[f"t{i}_b1"]) @ p[f"t{i}_w2"] for i, act in enumerate(activations)]
    return {"logits": np.concatenate(towers, axis=1) @ p["head_w"] + p["head_b"]}


CASES: dict[str, tuple[Callable[[np.ndarray, Weights], dict[str, np.ndarray]], tuple[int, ...]]] = {
    "mlp": (mlp, (784,)),
    "transformer": (transformer, (16, 64)),
    "cnn": (cnn, (3, 16, 16)),
    "branchy": (branchy, (128,)),
}


# -- the YAML graphs ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(CASES))
def test_graph_runs_on_the_simulator_and_matches_numpy(name, device):
    reference, features = CASES[name]
    graph = aclpipe.load_graph(GRAPHS / f"{name}.yaml")
    assert graph.name == name
    assert [spec.shape[0] for spec in graph.inputs.values()] == ["batch"]  # a dynamic batch dim
    rng = np.random.default_rng(sum(map(ord, name)))
    batches = [{"x": rng.standard_normal((batch, *features)).astype(np.float32)} for batch in (3, 5, 3)]

    async def main() -> list[dict[str, np.ndarray]]:
        async with aclpipe.Pipeline(graph, device, streams=4, depth=2) as pipe:
            return [out async for out in pipe.stream(batches)]

    results = anyio.run(main)
    weights = {key: value.astype(np.float64) for key, value in graph.constants.items()}
    for batch, result in zip(batches, results):
        expected = reference(batch["x"].astype(np.float64), weights)
        assert set(result) == set(expected)
        for output, value in expected.items():
            assert result[output].shape == value.shape
            np.testing.assert_allclose(result[output], value, rtol=2e-4, atol=2e-5, err_msg=f"{name}.{output}")
        assert np.abs(next(iter(expected.values()))).max() > 0.05  # the graph computes something


def test_branchy_towers_run_on_four_streams():
    plan = aclpipe.load_graph(GRAPHS / "branchy.yaml").bind(x=(8, 128))
    assert aclpipe.make_plan(plan, streams=4).num_streams == 4


# -- the ONNX models ---------------------------------------------------------------------------------
def _make_onnx():
    pytest.importorskip("onnx")
    sys.path.insert(0, str(GRAPHS))
    try:
        import make_onnx
    finally:
        sys.path.remove(str(GRAPHS))
    return make_onnx


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_onnx_models_are_small_valid_and_what_make_onnx_writes(name):
    import onnx
    from onnx.reference import ReferenceEvaluator

    make_onnx = _make_onnx()
    path = GRAPHS / f"{name}.onnx"
    assert path.stat().st_size < 64 * 1024
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    assert model.graph == make_onnx.MODELS[name]().graph  # regenerated with the same seeds
    (batch_dim, *features) = model.graph.input[0].type.tensor_type.shape.dim
    assert batch_dim.dim_param == "batch"
    shape = tuple(d.dim_value for d in features)
    x = np.random.default_rng(0).standard_normal((2, *shape)).astype(np.float32)
    (y,) = ReferenceEvaluator(model).run(None, {"x": x})
    assert y.shape == (2, 10) and np.isfinite(y).all()


def test_make_onnx_check_mode_reports_stale_files(tmp_path, capsys):
    make_onnx = _make_onnx()
    assert make_onnx.main(["--out", str(tmp_path)]) == 0
    assert make_onnx.main(["--out", str(tmp_path), "--check"]) == 0
    (tmp_path / "cnn.onnx").write_bytes(b"stale")
    assert make_onnx.main(["--out", str(tmp_path), "--check"]) == 1
    assert "cnn.onnx" in capsys.readouterr().err
