"""``aclpipe plan`` says what a pipeline and each captured program hold of the device's
streams and events, and the figures are what a real pipeline books (issue 29)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

import aclpipe
from aclpipe import cli
from aclpipe.graph import load_graph

MLP = str(Path(__file__).resolve().parents[2] / "graphs" / "mlp.yaml")


def test_plan_counts_the_streams_and_events_a_pipeline_holds(capsys):
    assert cli.main(["plan", MLP, "--batch", "4", "--streams", "2", "--depth", "3"]) == 0
    out = capsys.readouterr().out
    found = re.search(r"device budget at depth 3: the pipeline holds (\d+) streams of its own .*?captured, "
                      r"3 x \d+ = (\d+) model streams and 3 x \d+ = (\d+) events", out.replace("\n", " "))
    assert found, out
    own, model, events = (int(group) for group in found.groups())
    with aclpipe.open_device("sim") as device, \
            aclpipe.Pipeline(load_graph(MLP), device, streams=2, depth=3) as pipe:
        pipe.run_sync(x=np.zeros((4, 784), np.float32))
        stats = pipe.stats()
    assert stats.captured == 1
    assert (own, model) == (len(pipe._res.streams), stats.streams - len(pipe._res.streams))
    assert stats.events <= events  # at most: the plan counts every event a slot may hold
