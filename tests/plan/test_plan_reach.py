"""The reachability index answers exactly what a depth-first search answers."""

from __future__ import annotations

from dag_strategies import dags, descendants
from hypothesis import given, settings

from aclpipe.plan import Dag
from aclpipe.plan.order import topological_order
from aclpipe.plan.reach import Reachability


@settings(deadline=None, max_examples=100)
@given(dags())
def test_reaches_agrees_with_search(dag: Dag) -> None:
    index = Reachability(dag.succs, topological_order(dag))
    truth = descendants(dag)
    for source in range(len(dag)):
        for target in range(len(dag)):
            assert index.reaches(source, target) == (target in truth[source])
            if not index.may_reach(source, target):
                assert target not in truth[source]  # "no" from the labels is always right
            if index.tree_reaches(source, target):
                assert target in truth[source]  # and so is "yes" from the spanning tree


def test_a_diamond() -> None:
    dag = Dag.from_edges(4, [(0, 1), (0, 2), (1, 3), (2, 3)])
    index = Reachability(dag.succs, topological_order(dag))
    assert index.reaches(0, 3) and index.reaches(2, 3)
    assert not index.reaches(1, 2) and not index.reaches(3, 0) and not index.reaches(1, 1)
