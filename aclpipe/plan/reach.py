"""Reachability queries on a DAG without its transitive closure.

The closure of an ``n``-node DAG takes ``n**2`` bits; the planner only asks whether one
predecessor of a node reaches another, so it keeps an ``O(n)`` index instead and answers most
questions from it at once (the interval labels of GRAIL, Yildirim, Chaoji and Zaki, VLDB 2010):

- *rank*: a node reaches only nodes later in a topological order;
- *label*: each depth-first traversal numbers the nodes in post-order and labels a node with
  the lowest number among its descendants and its own; a descendant's label lies inside its
  ancestor's, so a label outside another's proves "no path" (two traversals, children in
  opposite orders, catch more);
- *tree*: a node the first traversal reached through ``p``'s call is a descendant of ``p``
  (its number lies in ``p``'s spanning-tree interval), which proves "a path".

What none of them settles is searched depth first from the source, entering only nodes that
the three tests leave possible, so the answer is always exact.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["Reachability"]


class Reachability:
    """Answers ``reaches(p, q)`` (a path of one or more edges from ``p`` to ``q``) on a DAG.

    Parameters
    ----------
    succs:
        Per node, its successors.
    order:
        A topological order of every node.
    """

    def __init__(self, succs: Sequence[Sequence[int]], order: Sequence[int]):
        self.succs = succs
        self.rank = [0] * len(order)
        for position, node in enumerate(order):
            self.rank[node] = position
        has_pred = [False] * len(order)
        for children in succs:
            for child in children:
                has_pred[child] = True
        sources = [node for node in order if not has_pred[node]]
        self.low, self.post, self.tree_low = _traverse(succs, sources, reverse=False)
        self.low2, self.post2, _ = _traverse(succs, sources[::-1], reverse=True)

    def may_reach(self, source: int, target: int) -> bool:
        """False when the index proves there is no path from ``source`` to ``target``."""
        return (self.rank[source] < self.rank[target]
                and self.low[source] <= self.low[target] and self.post[target] <= self.post[source]
                and self.low2[source] <= self.low2[target] and self.post2[target] <= self.post2[source])

    def tree_reaches(self, source: int, target: int) -> bool:
        """True when ``target`` lies in ``source``'s spanning subtree (a path exists)."""
        return source != target and self.tree_low[source] <= self.post[target] < self.post[source]

    def reaches(self, source: int, target: int) -> bool:
        """Whether a path of one or more edges leads from ``source`` to ``target``."""
        if not self.may_reach(source, target):
            return False
        if self.tree_reaches(source, target):
            return True
        seen = {source}
        stack = [source]
        while stack:
            node = stack.pop()
            for succ in self.succs[node]:
                if succ == target or self.tree_reaches(succ, target):
                    return True
                if succ not in seen and self.may_reach(succ, target):
                    seen.add(succ)
                    stack.append(succ)
        return False


def _traverse(succs: Sequence[Sequence[int]], roots: Sequence[int], reverse: bool
              ) -> tuple[list[int], list[int], list[int]]:
    """One depth-first traversal from ``roots`` in turn: per node its post-order number, the
    lowest post-order number among its descendants (its label), and the lowest among the nodes
    its own call finished (its spanning subtree)."""
    size = len(succs)
    post = [-1] * size
    low = [0] * size
    tree_low = [0] * size
    counter = 0
    for root in roots:
        if post[root] >= 0:
            continue
        post[root] = -2  # on the stack
        tree_low[root] = counter
        stack = [(root, iter(reversed(succs[root]) if reverse else succs[root]))]
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                post[node] = counter
                counter += 1
                label = post[node]
                for succ in succs[node]:
                    label = min(label, low[succ])
                low[node] = label
                continue
            if post[child] == -1:
                post[child] = -2
                tree_low[child] = counter
                stack.append((child, iter(reversed(succs[child]) if reverse else succs[child])))
    return low, post, tree_low
