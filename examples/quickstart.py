"""Quickstart: build a graph in code, run it on the simulated NPU, await the result.

A two-layer perceptron with a dynamic batch dimension.  The pipeline prepares the graph once
per input shape (plan, memory, phase one for every node), then each ``await pipe.run(...)``
copies the batch in, enqueues every node on its stream and awaits the copy out.

Run: ``python examples/quickstart.py [--batch 16]``
"""

from __future__ import annotations

import argparse
import asyncio

import numpy as np

import aclpipe


def build_graph(rng: np.random.Generator) -> tuple[aclpipe.Graph, dict[str, np.ndarray]]:
    """x[batch, 64] -> Matmul+Add -> Gelu -> Matmul+Add -> Softmax; returns the graph and its weights."""
    weights = {
        "w1": rng.standard_normal((64, 128)).astype(np.float32) * 0.1,
        "b1": np.zeros(128, np.float32),
        "w2": rng.standard_normal((128, 10)).astype(np.float32) * 0.1,
        "b2": np.zeros(10, np.float32),
    }
    g = aclpipe.Graph("quickstart")
    x = g.input("x", shape=("batch", 64), dtype="float32")  # "batch": fixed when a batch arrives
    w = {name: g.constant(name, array) for name, array in weights.items()}
    hidden = g.gelu(g.add(g.matmul(x, w["w1"]), w["b1"]))     # one builder method per catalog op
    logits = g.add(g.matmul(hidden, w["w2"]), w["b2"], name="logits")
    g.output("probs", g.softmax(logits, dim=-1))
    return g, weights


def numpy_reference(x: np.ndarray, weights: dict[str, np.ndarray]) -> np.ndarray:
    from math import erf, sqrt

    h = x @ weights["w1"] + weights["b1"]
    h = 0.5 * h * (1 + np.vectorize(erf)(h / sqrt(2)))
    logits = h @ weights["w2"] + weights["b2"]
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


async def main(batch: int) -> None:
    rng = np.random.default_rng(0)
    graph, weights = build_graph(rng)
    print(graph)
    x = rng.standard_normal((batch, 64)).astype(np.float32)
    async with aclpipe.Pipeline(graph, "sim", streams=2, depth=2) as pipe:
        out = await pipe.run(x=x)
        probs = out["probs"]
        print(f"probs: shape {probs.shape}, rows sum to {probs.sum(-1).min():.6f}..{probs.sum(-1).max():.6f}")
        print(f"predicted classes: {probs.argmax(-1)[:8].tolist()}{' ...' if batch > 8 else ''}")
        difference = np.abs(probs - numpy_reference(x.astype(np.float64), weights)).max()
        print(f"max |difference| from numpy: {difference:.2e}")
        assert difference < 1e-5
        stats = pipe.stats()
        print(f"pipeline: {stats.runs} run, {stats.executors} executors prepared, "
              f"{stats.events_per_run} events per run, arena {stats.arena_bytes} bytes")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    asyncio.run(main(parser.parse_args().batch))
