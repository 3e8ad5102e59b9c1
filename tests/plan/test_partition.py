"""The stage cut, on hand-made graphs and no device: contiguous stages, least bottleneck, memory
within budgets, and stage graphs that send every value where it is read."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aclpipe.errors import PlanError
from aclpipe.graph import BoundGraph, Graph
from aclpipe.plan import make_plan
from aclpipe.plan.partition import boundary_key, partition_graph, stage_graph

BIG = 1 << 40  # a budget nothing reaches


def chain(count: int, width: int = 8, weights: bool = False) -> BoundGraph:
    """x -> count nodes in a row (Add of a constant when ``weights``, else Relu) -> y."""
    g = Graph("chain")
    h = g.input("x", shape=(4, width))
    for index in range(count):
        if weights:
            h = g.add(h, g.constant(f"w{index}", np.full((4, width), index, np.float32)), name=f"n{index}")
        else:
            h = g.relu(h, name=f"n{index}")
    g.output("y", h)
    return g.bind(x=(4, width))


def brute_force(costs: list[float], stages: int) -> float:
    best = float("inf")
    for cuts in itertools.combinations(range(1, len(costs)), stages - 1):
        bounds = [0, *cuts, len(costs)]
        best = min(best, max(sum(costs[a:b]) for a, b in itertools.pairwise(bounds)))
    return best


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 20), min_size=1, max_size=9), st.integers(1, 4))
def test_the_cut_is_contiguous_complete_and_has_the_least_bottleneck(costs, stages):
    stages = min(stages, len(costs))
    graph = chain(len(costs))
    partition = partition_graph(graph, [BIG] * stages, costs={f"n{i}": c for i, c in enumerate(costs)})
    assert len(partition.stages) == stages and all(stage.nodes for stage in partition.stages)
    assert [name for stage in partition.stages for name in stage.nodes] == [f"n{i}" for i in range(len(costs))]
    assert partition.bottleneck == pytest.approx(brute_force([float(c) for c in costs], stages), rel=1e-6)
    assert partition.bottleneck == max(stage.cost for stage in partition.stages)


def test_each_stage_fits_its_device_with_the_slots_it_keeps():
    graph = chain(8, width=64, weights=True)  # every constant and every activation: 1 KiB
    # Four nodes a stage: four constants, and per slot the value coming in plus four written.
    budget = 4 * 1024 + 3 * 5 * 1024
    tight = partition_graph(graph, [budget] * 2, slots=3)
    assert [len(stage.nodes) for stage in tight.stages] == [4, 4]
    assert all(stage.memory(3) <= budget for stage in tight.stages)
    assert sum(stage.constant_bytes for stage in tight.stages) == 8 * 1024
    with pytest.raises(PlanError, match="does not fit"):
        partition_graph(graph, [budget - 1024] * 2, slots=3)
    assert len(partition_graph(graph, [budget - 1024] * 2, slots=2).stages) == 2  # fewer slots fit


def test_a_graph_too_big_for_the_devices_or_too_short_for_the_stages_is_a_plan_error():
    with pytest.raises(PlanError, match="does not fit 2 devices"):
        partition_graph(chain(4, weights=True), [64, 64])
    with pytest.raises(PlanError, match="cannot be cut into 5 stages"):
        partition_graph(chain(3), [BIG] * 5)
    with pytest.raises(ValueError, match="at least one budget"):
        partition_graph(chain(3), [])


def test_values_go_from_their_writer_to_every_later_stage_that_reads_them():
    g = Graph("skip")
    x = g.input("x", shape=(4, 8))
    a = g.relu(x, name="a")
    b = g.neg(a, name="b")
    c = g.abs(b, name="c")
    d = g.add(c, a, name="d")  # a is read two stages later too
    g.output("y", d)
    g.output("early", b)
    graph = g.bind(x=(4, 8))
    partition = partition_graph(graph, [BIG] * 3, costs={"a": 1, "b": 1, "c": 1, "d": 1})
    assert [stage.nodes for stage in partition.stages] == [("a", "b"), ("c",), ("d",)]
    assert partition.stages[0].sends == (("a", 2), ("b", 1))
    assert partition.stages[2].receives == (("a", 0), ("c", 1))
    first, last = stage_graph(graph, partition, 0), stage_graph(graph, partition, 2)
    assert dict(first.outputs) == {"early": "b", boundary_key("a", 2): "a", boundary_key("b", 1): "b"}
    assert set(last.inputs) == {"a", "c"} and dict(last.outputs) == {"y": "d"}
    for index in range(3):
        make_plan(stage_graph(graph, partition, index))  # every stage graph is a valid bound graph


def test_a_view_of_a_value_from_an_earlier_stage_is_made_again_where_it_is_read():
    g = Graph("views")
    x = g.input("x", shape=(4, 8))
    a = g.relu(x, name="a")
    t = g.transpose(a, dim0=0, dim1=1, name="t")  # a view: launches nothing
    g.output("y", g.neg(t, name="b"))
    graph = g.bind(x=(4, 8))
    partition = partition_graph(graph, [BIG] * 2)
    assert partition.stages[1].receives == (("a", 0),)  # the storage travels, not the view
    second = stage_graph(graph, partition, 1)
    assert [node.name for node in second.nodes] == ["t", "b"] and second.values["t"].kind == "view"
    assert partition.boundary_bytes == 4 * 8 * 4


def test_constants_live_only_on_the_stages_that_read_them():
    graph = chain(4, weights=True)
    partition = partition_graph(graph, [BIG] * 2)
    held = [set(stage_graph(graph, partition, k).constants) for k in range(2)]
    assert held[0].isdisjoint(held[1]) and held[0] | held[1] == {"w0", "w1", "w2", "w3"}
