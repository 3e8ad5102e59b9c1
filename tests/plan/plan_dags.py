"""Hand-made bound graphs for planner tests: no operator catalog needed.

A DAG is given as ``{node: [values it reads]}`` in a topological order; each node writes one
value named after it.  Graph inputs are the names read that no node writes.  Every value is a
float32 vector of ``sizes[name]`` bytes (default 4096).  ``views`` maps a view value to the
value it aliases (its node launches nothing).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from aclpipe.graph.bound import BoundGraph, BoundNode, BoundValue
from aclpipe.plan import Plan
from aclpipe.tensor import TensorDesc

DEFAULT_BYTES = 4096


def _desc(nbytes: int) -> TensorDesc:
    return TensorDesc.contiguous((nbytes // 4,), "float32")


def make_bound(nodes: Mapping[str, Sequence[str]], *, sizes: Mapping[str, int] | None = None,
               outputs: Sequence[str] | None = None, views: Mapping[str, str] | None = None,
               name: str = "dag") -> BoundGraph:
    sizes = dict(sizes or {})
    views = dict(views or {})
    written = set(nodes) | set(views)
    inputs = tuple(dict.fromkeys(v for reads in nodes.values() for v in reads if v not in written))
    values: dict[str, BoundValue] = {}
    for value in inputs:
        values[value] = BoundValue(value, _desc(sizes.get(value, DEFAULT_BYTES)), "input")
    bound_nodes = []
    order = list(nodes)
    for node in order:
        for read in nodes[node]:
            if read in views and read not in values:
                base = values[views[read]]
                values[read] = BoundValue(read, base.desc, "view", f"view_{read}", base.storage)
                bound_nodes.append(BoundNode(f"view_{read}", "Reshape", (views[read],), (read,), {}, True))
        values[node] = BoundValue(node, _desc(sizes.get(node, DEFAULT_BYTES)), "node", node)
        bound_nodes.append(BoundNode(node, "Op", tuple(nodes[node]), (node,)))
    if outputs is None:
        read = {v for reads in nodes.values() for v in reads}
        read |= {views[v] for v in read if v in views}
        outputs = [n for n in order if n not in read]
    return BoundGraph(name, tuple(bound_nodes), MappingProxyType(values), inputs,
                      MappingProxyType({f"out_{v}": v for v in outputs}))


def chain(length: int, **kwargs: object) -> BoundGraph:
    nodes = {f"n{i}": [f"n{i - 1}" if i else "x"] for i in range(length)}
    return make_bound(nodes, **kwargs)  # type: ignore[arg-type]


def diamond() -> BoundGraph:
    return make_bound({"a": ["x"], "b": ["a"], "c": ["a"], "d": ["b", "c"]})


def towers(count: int = 4, depth: int = 3) -> BoundGraph:
    """One input feeding ``count`` independent towers of ``depth`` nodes, joined at the end."""
    nodes: dict[str, list[str]] = {}
    for tower in range(count):
        for level in range(depth):
            nodes[f"t{tower}_{level}"] = [f"t{tower}_{level - 1}" if level else "x"]
    nodes["join"] = [f"t{tower}_{depth - 1}" for tower in range(count)]
    return make_bound(nodes)


def fan(width: int = 6) -> BoundGraph:
    """Fan-out from one node to ``width`` nodes and fan-in back to one."""
    nodes: dict[str, list[str]] = {"root": ["x"]}
    for i in range(width):
        nodes[f"f{i}"] = ["root"]
    nodes["sink"] = [f"f{i}" for i in range(width)]
    return make_bound(nodes)


def tree(branching: Sequence[int], sizes: Mapping[str, int] | None = None) -> BoundGraph:
    """An out-tree from input ``x``: level ``k`` nodes each get ``branching[k]`` children."""
    nodes: dict[str, list[str]] = {"r": ["x"]}
    frontier = ["r"]
    for fanout in branching:
        following = []
        for parent in frontier:
            for child in range(fanout):
                name = f"{parent}.{child}"
                nodes[name] = [parent]
                following.append(name)
        frontier = following
    return make_bound(nodes, sizes=sizes)


# -- independent checks over a finished Plan (deliberately not the planner's own code) ----------
def dependencies(plan: Plan) -> set[tuple[int, int]]:
    """(producer, consumer) pairs: the writer of the storage behind every value a node reads."""
    writer = {v: node.index for node in plan.nodes for v in node.outputs if v is not None}
    pairs = set()
    for node in plan.nodes:
        for value in node.inputs:
            if value is None:
                continue
            storage = plan.values[value].base or value
            if storage in writer:
                pairs.add((writer[storage], node.index))
    return pairs


def ordering_edges(plan: Plan, skip: tuple[int, int] | None = None) -> list[set[int]]:
    """Per node, the nodes that must finish right before it: the previous node on its stream
    and every node it waits on (``skip`` drops one (producer, consumer) wait)."""
    before: list[set[int]] = [set() for _ in plan.nodes]
    last: dict[int, int] = {}
    for node in plan.nodes:
        if node.stream in last:
            before[node.index].add(last[node.stream])
        last[node.stream] = node.index
        for producer in node.waits:
            if (producer, node.index) != skip:
                before[node.index].add(producer)
    return before


def happens_before(plan: Plan, skip: tuple[int, int] | None = None) -> list[set[int]]:
    """Per node, every node that completes before it starts (transitive closure by search)."""
    before = ordering_edges(plan, skip)
    closure: list[set[int]] = []
    for node in range(len(plan.nodes)):
        seen: set[int] = set()
        stack = list(before[node])
        while stack:
            current = stack.pop()
            if current not in seen:
                seen.add(current)
                stack.extend(before[current])
        closure.append(seen)
    return closure


def touchers(plan: Plan, storage: str) -> set[int]:
    """Every node that writes or reads ``storage``, directly or through a view of it."""
    nodes = set()
    for node in plan.nodes:
        for value in (*node.inputs, *node.outputs):
            if value is not None and (value == storage or plan.values[value].base == storage):
                nodes.add(node.index)
    return nodes
