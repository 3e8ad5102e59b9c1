"""The peer runtime (onnxruntime, else onnx's reference evaluator) and the error measure the
ONNX model tests use."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["peer_outputs", "relative_error"]


def peer_outputs(model: Any, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """The model's outputs from onnxruntime (or, without it, onnx's reference evaluator)."""
    try:
        import onnxruntime
    except ImportError:
        from onnx.reference import ReferenceEvaluator

        return [np.asarray(value) for value in ReferenceEvaluator(model).run(None, dict(feeds))]
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return [np.asarray(value) for value in session.run(None, dict(feeds))]


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    """``max |got - want| / max |want|``: the error relative to the output's scale (0 for exact)."""
    assert got.shape == want.shape, f"shape {got.shape}, expected {want.shape}"
    difference = np.abs(got.astype(np.float64) - want.astype(np.float64))
    if not difference.size:
        return 0.0
    return float(difference.max() / max(float(np.abs(want.astype(np.float64)).max()), 1e-30))
