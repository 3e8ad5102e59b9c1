"""Random DAGs for planner property tests, and plain reference answers to check against.

``dags()`` draws DAGs in topological numbering (every edge goes from a smaller to a larger
node), mixing short edges, long skips and, sometimes, one node with a wide fan-in.  The
references are the simplest correct code: closure by depth-first search from every node.
"""

from __future__ import annotations

from hypothesis import strategies as st

from aclpipe.plan import Dag


@st.composite
def dags(draw: st.DrawFn, max_size: int = 40) -> Dag:
    size = draw(st.integers(1, max_size))
    edges = set()
    for node in range(1, size):
        for _ in range(draw(st.integers(0, 3))):
            reach = draw(st.sampled_from([1, 2, 4, node]))
            edges.add((node - draw(st.integers(1, min(reach, node))), node))
    if size > 20 and draw(st.booleans()):  # a concatenation of many earlier values
        sink = size - 1
        edges.update((pred, sink) for pred in draw(st.lists(st.integers(0, sink - 1), min_size=17, unique=True)))
    return Dag.from_edges(size, sorted(edges))


def descendants(dag: Dag) -> list[set[int]]:
    """Per node, every node reachable by one or more edges."""
    result = []
    for start in range(len(dag)):
        seen: set[int] = set()
        stack = list(dag.succs[start])
        while stack:
            node = stack.pop()
            if node not in seen:
                seen.add(node)
                stack.extend(dag.succs[node])
        result.append(seen)
    return result
