"""Run an ONNX model from graphs/ on the simulated NPU and compare with a reference runtime.

The model is imported into an aclpipe graph (``aclpipe.load_onnx``; needs ``pip install
'aclpipe[onnx]'``), run through a Pipeline with its symbolic batch dimension bound at the
first run, and compared with onnxruntime when it is installed, else with onnx's own numpy
reference evaluator (``onnx.reference``).

Run: ``python examples/onnx_model.py [graphs/cnn.onnx] [--batch 4]``
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

import numpy as np

import aclpipe
from aclpipe.cli.common import find_load_onnx

GRAPHS = Path(__file__).resolve().parent.parent / "graphs"


def reference_runner(path: Path) -> tuple[str, Any]:
    """A function feeds -> outputs from onnxruntime if installed, else onnx.reference."""
    try:
        import onnxruntime  # type: ignore[import-untyped]

        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return "onnxruntime", lambda feeds: session.run(None, feeds)
    except ImportError:
        import onnx
        from onnx.reference import ReferenceEvaluator

        evaluator = ReferenceEvaluator(onnx.load(path))
        return "onnx.reference (numpy)", lambda feeds: evaluator.run(None, feeds)


async def main(path: Path, batch: int) -> int:
    load_onnx = find_load_onnx()
    if load_onnx is None:
        print("skipped: this aclpipe has no ONNX importer (aclpipe.load_onnx); install the onnx extra "
              "(pip install 'aclpipe[onnx]') with a version that provides it")
        return 0
    graph = load_onnx(path)
    print(f"{path.name}: {graph}")
    print("inputs: " + ", ".join(f"{name}{list(spec.shape)} {spec.dtype.name}" for name, spec in graph.inputs.items()))
    rng = np.random.default_rng(0)
    feeds = {name: rng.standard_normal([batch if not isinstance(d, int) else d for d in spec.shape])
             .astype(spec.dtype.numpy) for name, spec in graph.inputs.items()}
    async with aclpipe.Pipeline(graph, "sim", streams=2, depth=2) as pipe:
        outputs = await pipe.run(**feeds)
        plan = pipe.plan_for(**{name: array.shape for name, array in feeds.items()})
    print(f"plan: {len(plan.nodes)} launches on {plan.num_streams} compute stream(s), {plan.num_events} events")
    name, reference = reference_runner(path)
    expected = reference(feeds)
    worst = 0.0
    for (output, value), want in zip(outputs.items(), expected):
        difference = float(np.abs(value.astype(np.float64) - np.asarray(want, np.float64)).max())
        worst = max(worst, difference)
        print(f"output {output}: shape {list(value.shape)}, max |difference| from {name}: {difference:.2e}")
    if worst > 1e-4:
        print("FAILED: outputs differ from the reference")
        return 1
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", type=Path, default=GRAPHS / "mlp.onnx")
    parser.add_argument("--batch", type=int, default=4)
    arguments = parser.parse_args()
    sys.exit(asyncio.run(main(arguments.model, arguments.batch)))
