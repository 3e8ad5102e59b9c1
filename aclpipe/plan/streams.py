"""Which compute stream each node runs on.

Nimble's observation (Kwon et al., NeurIPS 2020): after a transitive reduction, a maximum
matching of producer -> consumer edges in the bipartite graph (producers on one side,
consumers on the other) splits the DAG into the fewest chains, and a chain on one stream
needs no events inside it.  Independent chains are the concurrency the graph offers.

:func:`assign_streams` does that, then packs the chains onto at most ``max_streams`` streams
(more streams cost memory and synchronization, and the device has a fixed number of AI
cores): chains are taken by earliest possible start (their top level), each goes to a stream
that is free by then, preferring one that already holds a producer of the chain's first node
(that edge then needs no event), then one already in use (the latest freed), then a new one.
When every stream is busy the chain goes where it waits least.

The matching prefers, among a producer's consumers, the one with the longest remaining
critical path, so the critical path tends to stay on one stream.
"""

from __future__ import annotations

from collections.abc import Sequence

from .order import Dag, _any_order, bottom_levels, top_levels
from .reach import Reachability

__all__ = ["assign_streams", "chains", "transitive_reduction"]

#: Up to this many predecessors a node asks the index about each pair; above, it searches.
_PAIRWISE_FAN_IN = 16


def transitive_reduction(dag: Dag) -> Dag:
    """The DAG without edges implied by longer paths.

    An edge ``p -> n`` is implied when ``p`` reaches another predecessor of ``n``.  Each such
    question goes to a :class:`~aclpipe.plan.reach.Reachability` index (``O(n + e)``), so no
    closure is built; a node with many predecessors searches their ancestors once instead
    of asking about every pair.
    """
    index = Reachability(dag.succs, _any_order(dag))
    kept: list[tuple[int, ...]] = []
    for preds in dag.preds:
        if len(preds) < 2:
            kept.append(preds)
            continue
        ranked = sorted(preds, key=index.rank.__getitem__)
        if len(ranked) <= _PAIRWISE_FAN_IN:
            implied = {p for i, p in enumerate(ranked[:-1]) if any(index.reaches(p, q) for q in ranked[i + 1:])}
        else:
            implied = _ancestors_among(dag, ranked, index.rank)
        kept.append(tuple(p for p in preds if p not in implied))
    return Dag._trusted(tuple(kept), dag.costs)  # subsets of checked, sorted tuples


def _ancestors_among(dag: Dag, preds: Sequence[int], rank: Sequence[int]) -> set[int]:
    """The members of ``preds`` that are ancestors of other members (one backward search,
    entering only nodes no earlier in the order than the first of ``preds``)."""
    members = set(preds)
    floor = rank[preds[0]]
    seen: set[int] = set()
    stack = [pred for node in preds for pred in dag.preds[node]]
    while stack:
        node = stack.pop()
        if node in seen or rank[node] < floor:
            continue
        seen.add(node)
        stack.extend(dag.preds[node])
    return members & seen


def _augment(root: int, succs: Sequence[Sequence[int]], match_left: dict[int, int],
             match_right: dict[int, int], dead: set[int]) -> bool:
    """One Kuhn augmenting-path search from producer ``root`` (iterative: graphs may be deep).

    ``dead`` holds consumers from which an earlier search, under the same matching, found no
    augmenting path: entering them again cannot succeed, so they are skipped (Kuhn's
    algorithm stays exact; failed searches no longer repeat each other's work).  A failed
    search adds what it visited; the caller empties ``dead`` after a success.
    """
    visited: set[int] = set()
    parent: dict[int, int] = {}
    cursor = {root: 0}
    stack = [root]
    while stack:
        left = stack[-1]
        if cursor[left] == len(succs[left]):
            stack.pop()
            continue
        right = succs[left][cursor[left]]
        cursor[left] += 1
        if right in visited or right in dead:
            continue
        visited.add(right)
        parent[right] = left
        owner = match_right.get(right)
        if owner is None:
            while True:  # flip the path: each producer on it takes the consumer it reached
                left = parent[right]
                previous = match_left.get(left)
                match_left[left], match_right[right] = right, left
                if left == root:
                    return True
                assert previous is not None
                right = previous
        if owner not in cursor:
            cursor[owner] = 0
            stack.append(owner)
    dead |= visited
    return False


def chains(dag: Dag) -> list[list[int]]:
    """The fewest vertex-disjoint chains along edges of the transitive reduction covering
    every node, each in dependency order; sorted by first node."""
    reduced = transitive_reduction(dag)
    levels = bottom_levels(dag)
    # Successors by bottom level, highest first (ties by index): one rank per node, sorted once.
    rank = [0] * len(dag)
    for position, node in enumerate(sorted(range(len(dag)), key=lambda n: (-levels[n], n))):
        rank[node] = position
    succs = [sorted(s, key=rank.__getitem__) if len(s) > 1 else list(s) for s in reduced.succs]
    match_left: dict[int, int] = {}
    match_right: dict[int, int] = {}
    dead: set[int] = set()
    for node in range(len(dag)):
        if succs[node] and _augment(node, succs, match_left, match_right, dead):
            dead.clear()
    result = []
    for head in range(len(dag)):
        if head in match_right:
            continue
        chain = [head]
        while chain[-1] in match_left:
            chain.append(match_left[chain[-1]])
        result.append(chain)
    return result


def assign_streams(dag: Dag, max_streams: int) -> tuple[int, ...]:
    """Stream per node, ``0..k-1`` with ``k <= max_streams`` numbered by first node.

    Every assignment is valid (a plan orders each stream by the global launch order and
    synchronizes across streams with events); this one aims at concurrency with few events.
    """
    if max_streams < 1:
        raise ValueError(f"max_streams must be >= 1, got {max_streams}")
    if not len(dag):
        return ()
    tops = top_levels(dag)
    found = chains(dag)
    stream_of = [-1] * len(dag)
    free_at = [0.0] * max_streams
    used = [False] * max_streams

    def start(chain: list[int]) -> float:
        return tops[chain[0]]

    for chain in sorted(found, key=lambda c: (start(c), -sum(dag.costs[n] for n in c), c[0])):
        begin = start(chain)
        producers = {stream_of[p] for p in dag.preds[chain[0]]}
        stream = min(range(max_streams), key=lambda s: _preference(s, begin, producers, free_at, used))
        for node in chain:
            stream_of[node] = stream
        used[stream] = True
        finish = tops[chain[-1]] + dag.costs[chain[-1]]
        free_at[stream] = max(finish, max(free_at[stream], begin) + sum(dag.costs[n] for n in chain))
    return _renumber(stream_of)


def _preference(stream: int, begin: float, producers: set[int], free_at: Sequence[float],
                used: Sequence[bool]) -> tuple[float, bool, bool, float, int]:
    """Sort key of ``stream`` for a chain that could start at ``begin``.

    Least delay first; then a stream holding a producer of the chain's head (no event); then a
    stream already in use (a free one costs no concurrency and keeps streams, memory and events
    down; the latest freed is the likeliest to hold the chain's ancestors); then a new one.
    """
    delay = max(0.0, free_at[stream] - begin)
    return delay, stream not in producers, not used[stream], -free_at[stream], stream


def _renumber(stream_of: Sequence[int]) -> tuple[int, ...]:
    names: dict[int, int] = {}
    for stream in stream_of:
        names.setdefault(stream, len(names))
    return tuple(names[s] for s in stream_of)
