"""Blocking calls for scripts: aclpipe.run, Pipeline.run_sync and the sync context manager."""

from __future__ import annotations

from pathlib import Path

import anyio
import numpy as np
import pytest
from pipeline_graphs import assert_outputs, mlp, reference

import aclpipe
from aclpipe import EventLoopError, GraphError, Pipeline

ROOT = Path(__file__).resolve().parents[2]


def batch(rows: int = 4, width: int = 32) -> np.ndarray:
    return np.random.default_rng(rows).standard_normal((rows, width)).astype(np.float32)


def test_run_sync_matches_the_async_run(device):
    graph = mlp()
    x = batch()
    with Pipeline(graph, device) as pipe:
        assert_outputs(pipe.run_sync(x=x), reference(graph, {"x": x}))
        assert_outputs(pipe.run_sync({"x": x}), reference(graph, {"x": x}))
        assert pipe.stats().runs == 2
    assert pipe.stats().closed and device.mem_info().used == 0


def test_aclpipe_run_takes_a_graph_or_a_file():
    graph = mlp()
    x = batch()
    assert_outputs(aclpipe.run(graph, x=x), reference(graph, {"x": x}))
    out = aclpipe.run(ROOT / "graphs" / "mlp.yaml", {"x": batch(3, 784)}, device="sim")
    assert out["probs"].shape == out["logits"].shape == (3, 10)
    np.testing.assert_allclose(out["probs"].sum(-1), 1.0, rtol=1e-5)  # softmax rows


def test_aclpipe_run_reads_onnx_models():
    pytest.importorskip("onnx")
    out = aclpipe.run(str(ROOT / "graphs" / "mlp.onnx"), x=batch(2, 64))
    assert out["y"].shape[0] == 2


@pytest.mark.parametrize("source, message", [("nope.yaml", "no such graph file"),
                                             ("graphs/mlp.txt", "unknown graph file type")])
def test_aclpipe_run_names_a_bad_file(source, message):
    with pytest.raises(GraphError, match=message):
        aclpipe.run(source, x=batch())


@pytest.mark.anyio
async def test_blocking_calls_refuse_a_running_event_loop(device, anyio_backend):
    pipe = Pipeline(mlp(), device)
    for call in (lambda: pipe.run_sync(x=batch()), pipe.close, lambda: aclpipe.run(mlp(), x=batch())):
        with pytest.raises(EventLoopError, match="inside a running event loop"):
            call()
    assert pipe.stats().runs == 0
    await pipe.aclose()


def test_run_sync_works_in_a_worker_thread_of_a_loop(device):
    graph = mlp()
    x = batch()

    async def main() -> dict[str, np.ndarray]:
        pipe = Pipeline(graph, device)  # blocking calls from a worker thread are fine: no loop runs there
        return await anyio.to_thread.run_sync(lambda: _run_and_close(pipe, x))

    assert_outputs(anyio.run(main), reference(graph, {"x": x}))


def _run_and_close(pipe: Pipeline, x: np.ndarray) -> dict[str, np.ndarray]:
    out = pipe.run_sync(x=x)
    pipe.close()
    return out
