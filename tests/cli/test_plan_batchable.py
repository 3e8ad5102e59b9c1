"""``aclpipe plan`` says whether requests may share a run, and which node forbids it."""

from __future__ import annotations

from pathlib import Path

import aclpipe
from aclpipe import cli

GRAPHS = Path(__file__).resolve().parents[2] / "graphs"


def plan_output(capsys, *argv: str) -> str:
    status = cli.main(["plan", *argv])
    out = capsys.readouterr().out
    assert status == 0, out
    return out


def test_plan_says_a_per_sample_graph_is_batchable(capsys):
    assert "batchable: yes" in plan_output(capsys, str(GRAPHS / "mlp.yaml")).splitlines()


def test_plan_names_the_node_that_mixes_the_rows(capsys, tmp_path):
    g = aclpipe.Graph("running_total")
    g.output("y", g.cumsum(g.relu(g.input("x", shape=(None, 8))), dim=0, name="cs"))
    g.save(tmp_path / "running_total.yaml")
    out = plan_output(capsys, str(tmp_path / "running_total.yaml"), "--batch", "4")
    assert "batchable: no (node 'cs': Cumsum accumulates along dim 0, the batch axis)" in out.splitlines()
