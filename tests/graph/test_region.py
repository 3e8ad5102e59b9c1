"""The Loop control node (aclpipe.graph.region): its outputs inferred from the region, its
inputs checked against the body, and phase one refused (only a Pipeline runs it)."""

from __future__ import annotations

import pytest

import aclpipe
from aclpipe.errors import GraphError, InvalidArgumentError
from aclpipe.graph.region import LoopRegion, LoopSpec
from aclpipe.tensor import TensorDesc


def _region(trips=5):
    body = aclpipe.Graph("body")
    h = body.input("h", (2, 3))
    x = body.input("x", (2, 3))
    body.output("h_next", body.op("Add", h, x))
    body.output("seen", body.op("Relu", h))
    return LoopRegion(body, ("h",), ("h_next",), ("x",), ("seen",), trips)


def test_a_loop_node_gives_the_carried_values_then_the_stacked_scan_outputs():
    graph = aclpipe.Graph("outer")
    h0, x = graph.input("h0", (2, 3)), graph.input("x", (2, 3))
    final, seen = graph.op("Loop", h0, x, region=_region(), outputs=["final", "seen"])
    assert final.shape == (2, 3) and seen.shape == (5, 2, 3)
    graph.output("final", final)
    assert [node.op for node in graph.bind(h0=(2, 3), x=(2, 3)).nodes] == ["Loop"]


def test_a_loop_node_checks_its_inputs_against_the_body():
    graph = aclpipe.Graph("outer")
    h0, x = graph.input("h0", (2, 4)), graph.input("x", (2, 3))
    with pytest.raises(GraphError, match=r"tensors\[0\]: expected float32\[2, 3\], got float32\[2, 4\]"):
        graph.op("Loop", h0, x, region=_region(), outputs=["final", "seen"])


def test_phase_one_refuses_a_loop_node():
    desc = TensorDesc.contiguous((2, 3), "float32")
    with pytest.raises(InvalidArgumentError, match="control region that only a Pipeline runs"):
        LoopSpec().prepare([desc, desc], [desc, TensorDesc.contiguous((5, 2, 3), "float32")],
                           {"region": _region()})


def test_a_region_needs_one_carried_output_per_input():
    body = aclpipe.Graph("body")
    body.output("y", body.op("Relu", body.input("h", (2,))))
    with pytest.raises(ValueError, match="one carried output per carried input"):
        LoopRegion(body, ("h",), (), (), ("y",), 3)
