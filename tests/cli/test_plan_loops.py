"""``aclpipe plan`` on a graph with a long ONNX Loop: the Loop is one node that runs as control
flow, described as such (not as a node whose phase one refuses), and the device budget printed
covers what a pipeline of it books."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import onnx

import aclpipe
from aclpipe import cli

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_sanitizer import loop_model  # the benchmarks' GRU-style loop, exit on the device


def test_plan_describes_a_loop_as_control_flow_and_counts_its_captures(tmp_path, capsys):
    path = tmp_path / "loop.onnx"
    onnx.save(loop_model(trips=40, batch=4, width=16), str(path))
    assert cli.main(["plan", str(path), "--streams", "2", "--depth", "2"]) == 0
    out = capsys.readouterr().out.replace("\n", " ")
    assert "phase one refused" not in out
    assert re.search(r"runs as control flow, LoopRegion\(.*40 trips.*exit on the device\)", out), out
    found = re.search(r"captured, 2 x \d+ = (\d+) model streams and 2 x \d+ = (\d+) events", out)
    assert found, out
    model_streams, events = (int(group) for group in found.groups())
    graph = aclpipe.load_onnx(str(path))
    feed = {name: np.zeros((4, 16), np.float32) for name in ("x", "h0")}
    with aclpipe.open_device("sim") as device, aclpipe.Pipeline(graph, device, streams=2, depth=2) as pipe:
        pipe.run_sync(**feed)
        stats = pipe.stats()
    own = len(pipe._res.streams)
    assert stats.captured == 1
    assert stats.streams - own <= model_streams  # at most: the plan counts every stream a slot may hold
    assert stats.events <= events
