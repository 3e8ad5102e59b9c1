"""Launch order and critical path on hand-written DAGs."""

from __future__ import annotations

import pytest

from aclpipe.errors import PlanError
from aclpipe.plan import Dag, critical_path, estimate_cost, topological_order
from aclpipe.plan.order import bottom_levels, top_levels
from aclpipe.tensor import TensorDesc


def test_chain_order_is_the_chain() -> None:
    dag = Dag.from_edges(4, [(0, 1), (1, 2), (2, 3)])
    assert topological_order(dag) == (0, 1, 2, 3)


def test_ready_nodes_go_by_critical_path_then_index() -> None:
    # 0 -> 1 -> 2 (long branch) and 0 -> 3 (short): the long branch goes first, all of it.
    dag = Dag.from_edges(4, [(0, 3), (0, 1), (1, 2)], costs=[1, 5, 5, 1])
    assert topological_order(dag) == (0, 1, 2, 3)
    # Equal critical paths: insertion order decides.
    twins = Dag.from_edges(3, [(0, 1), (0, 2)])
    assert topological_order(twins) == (0, 1, 2)


def test_order_is_deterministic_and_topological() -> None:
    edges = [(0, 2), (1, 2), (2, 3), (1, 4), (4, 5), (3, 5)]
    dag = Dag.from_edges(6, edges, costs=[3, 1, 4, 1, 5, 9])
    order = topological_order(dag)
    assert order == topological_order(Dag.from_edges(6, edges, costs=[3, 1, 4, 1, 5, 9]))
    position = {node: k for k, node in enumerate(order)}
    assert all(position[a] < position[b] for a, b in edges)


def test_cycle_is_a_plan_error_naming_the_nodes() -> None:
    dag = Dag.from_edges(3, [(0, 1), (1, 2), (2, 1)])
    with pytest.raises(PlanError, match=r"cycle through nodes \[1, 2\]"):
        topological_order(dag)


def test_levels_and_critical_path() -> None:
    dag = Dag.from_edges(4, [(0, 1), (0, 2), (1, 3), (2, 3)], costs=[1, 10, 2, 1])
    assert bottom_levels(dag) == (12.0, 11.0, 3.0, 1.0)
    assert top_levels(dag) == (0.0, 1.0, 1.0, 11.0)
    assert critical_path(dag) == (12.0, (0, 1, 3))


def test_dag_rejects_bad_data() -> None:
    with pytest.raises(ValueError, match="not another node"):
        Dag(((0,),))
    with pytest.raises(ValueError, match="costs"):
        Dag(((), ()), (1.0,))
    with pytest.raises(ValueError, match="finite"):
        Dag(((),), (float("nan"),))
    for preds in (((-1,), ()), ((2,), ()), ((), (0, 1))):  # below range, above it, a node on itself
        with pytest.raises(ValueError, match="not another node"):
            Dag(preds)


def test_renumbered_keeps_edges_and_refuses_an_order_that_is_no_permutation() -> None:
    dag = Dag.from_edges(4, [(0, 2), (1, 2), (2, 3), (0, 3)], costs=[1, 2, 3, 4])
    moved = dag.renumbered((1, 0, 2, 3))
    assert moved.preds == ((), (), (0, 1), (1, 2)) and moved.costs == (2.0, 1.0, 3.0, 4.0)
    position = {node: k for k, node in enumerate(moved.any_order)}
    assert sorted(position) == [0, 1, 2, 3]
    assert all(position[p] < position[n] for n, preds in enumerate(moved.preds) for p in preds)
    for bad in ((0, 1, 2), (0, 0, 1, 2), (0, 1, 2, 4)):
        with pytest.raises(ValueError, match="each of the 4 nodes once"):
            dag.renumbered(bad)


def test_estimated_cost_follows_the_roofline() -> None:
    small = TensorDesc.contiguous((16,), "float32")
    big = TensorDesc.contiguous((1 << 20,), "float32")
    assert estimate_cost("Relu", [big], [big]) > estimate_cost("Relu", [small], [small])
    a = TensorDesc.contiguous((512, 4096), "float16")
    b = TensorDesc.contiguous((4096, 512), "float16")
    out = TensorDesc.contiguous((512, 512), "float16")
    # A matmul with a long reduction costs more than an elementwise op on the same output.
    assert estimate_cost("Matmul", [a, b], [out]) > estimate_cost("Add", [out, out], [out])
    # Host copies go over PCIe: far slower per byte than HBM.
    assert estimate_cost("H2D", [], [big]) > 10 * estimate_cost("Relu", [big], [big])
