"""The ONNX model tests need onnx, and import the zoo from ``graphs/onnx_zoo``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("onnx")

GRAPHS = Path(__file__).resolve().parents[2] / "graphs"
if str(GRAPHS) not in sys.path:
    sys.path.insert(0, str(GRAPHS))
