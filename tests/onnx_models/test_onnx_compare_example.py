"""examples/onnx_compare.py: a zoo model and a model file, compared with the peer runtime."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx_zoo import MODELS

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "onnx_compare.py"


def _run(*args: str) -> str:
    done = subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.slow  # a fresh interpreter loading onnx and onnxruntime, then two models on two stream counts
def test_a_zoo_model_matches_on_one_and_four_streams():
    out = _run("--zoo", "ocr_opset13")
    assert "simulator, 1 stream(s)" in out and "simulator, 4 stream(s)" in out
    assert "37 ONNX nodes -> 22 catalog nodes" in out
    assert "all outputs match" in out and "MISMATCH" not in out


@pytest.mark.slow  # three fresh interpreters running BERT on the simulator and onnxruntime: 7 to 14 s
def test_a_model_file_with_named_dims_and_shapes(tmp_path):
    path = tmp_path / "bert.onnx"
    onnx.save(MODELS["bert_opset17"].model, str(path))
    out = _run(str(path), "--dim", "batch=2", "--dim", "seq=9", "--streams", "2")
    assert "input_ids[2, 9], attention_mask[2, 9]" in out and "all outputs match" in out
    out = _run(str(path), "--shape", "input_ids=1,4", "--shape", "input_ids=3,6", "--shape", "attention_mask=1,4",
               "--shape", "attention_mask=3,6", "--streams", "1")
    assert "input_ids[3, 6], attention_mask[3, 6]" in out and "all outputs match" in out
