"""The ONNX model tests need onnx, and import the zoo from ``graphs/onnx_zoo``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("onnx")

GRAPHS = Path(__file__).resolve().parents[2] / "graphs"
if str(GRAPHS) not in sys.path:
    sys.path.insert(0, str(GRAPHS))


@pytest.fixture(autouse=True)
def _collect_the_model_after_each_test():
    """A model test holds hundreds of MB (the onnx graph, an onnxruntime session, the device's
    copy of the weights) in objects that refer to each other, so they wait for a cycle
    collection: collect after each test here, or the run's peak grows by a model per test."""
    import gc

    yield
    gc.collect()
