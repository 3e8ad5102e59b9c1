"""Every script in examples/ runs (small sizes) and prints what it promises."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name: str, *args: str, timeout: float = 120) -> str:
    done = subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert done.returncode == 0, f"{name} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout


def test_every_example_is_tested():
    tested = {"generate.py", "quickstart.py", "streaming.py", "server.py", "op_runner.py", "onnx_model.py",
              "onnx_compare.py", "ray_serve.py"}
    assert {path.name for path in EXAMPLES.glob("*.py")} == tested


def test_quickstart():
    out = run_example("quickstart.py", "--batch", "4")
    assert "probs: shape (4, 10)" in out
    difference = float(re.search(r"max \|difference\| from numpy: (\S+)", out).group(1))
    assert difference < 1e-5


def test_streaming_reports_overlap_from_the_trace():
    """Depth 3 keeps the engines busy together: near the engine bound, well ahead of depth 1
    (which adds every engine's time up: about 2.2x the bound on this graph)."""
    out = run_example("streaming.py", "--batches", "6", "--time-scale", "2000")
    bound = {}
    for depth in (1, 3):
        line = next(line for line in out.splitlines() if line.startswith(f"depth {depth}:"))
        found = re.search(r"overlap (\d+)% of the time; copies hidden under compute \d+%; ([\d.]+)x the engine bound",
                          line)
        assert found and "samples/s" in line and "busy h2d" in line, line
        bound[depth] = float(found.group(2))
        assert (int(found.group(1)) > 20) == (depth == 3), line
    assert bound[3] <= 1.10 < 1.5 <= bound[1], bound
    speedup = float(re.search(r"depth 3 vs depth 1: ([\d.]+)x", out).group(1))
    assert speedup >= 1.4, out


def test_server_selftest_answers_concurrent_requests():
    out = run_example("server.py", "--selftest", "24", "--connections", "4", "--depth", "3")
    assert "24 requests over 4 connections" in out
    assert "all 24 answers match numpy" in out
    # Requests of 1 to 12 rows (seven sizes here) padded to the buckets 1, 2, 4, 8 and 16.
    assert "runs of 7 batch sizes on 5 input signatures" in out


def test_op_runner():
    out = run_example("op_runner.py")
    assert "Add(alpha=2): max |error| 0.0e+00" in out
    assert "executor cache +9 hits, +1 miss (phase one ran 1 time)" in out
    assert "4 x Gelu with run_async on 4 streams" in out
    assert "a bad call fails before anything is launched: InvalidArgumentError" in out


@pytest.mark.parametrize("model", ["mlp.onnx", "cnn.onnx"])
def test_onnx_model_runs_or_skips_clearly(model):
    out = run_example("onnx_model.py", str(EXAMPLES.parent / "graphs" / model), "--batch", "2")
    if out.startswith("skipped:"):
        assert "aclpipe.load_onnx" in out
        return
    difference = float(re.search(r"max \|difference\| from .*?: (\S+)", out).group(1))
    assert difference < 1e-4


@pytest.mark.slow
def test_ray_serve_selftest_answers_through_two_replicas():
    pytest.importorskip("ray.serve", reason="needs the ray extra")
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = run_example("ray_serve.py", "--selftest", "16", "--port", str(port), timeout=300)
    assert "16 requests answered by 2 replicas" in out
    assert "all 16 answers match the local pipeline" in out


def test_generate_matches_onnxruntime():
    out = run_example("generate.py", "--requests", "4", "--max-new-tokens", "6")
    assert "all 4 requests match onnxruntime's greedy decoding" in out
