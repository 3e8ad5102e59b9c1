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

__all__ = ["assign_streams", "chains", "transitive_reduction"]


def transitive_reduction(dag: Dag) -> Dag:
    """The DAG without edges implied by longer paths (ancestor sets as integer bitsets)."""
    ancestors = [0] * len(dag)
    kept: list[tuple[int, ...]] = [()] * len(dag)
    for node in _any_order(dag):
        preds = dag.preds[node]
        covered = 0
        for pred in preds:
            covered |= ancestors[pred]
        kept[node] = tuple(p for p in preds if not covered >> p & 1)
        mask = covered
        for pred in preds:
            mask |= 1 << pred
        ancestors[node] = mask
    return Dag(tuple(kept), dag.costs)


def _augment(root: int, succs: Sequence[Sequence[int]], match_left: dict[int, int],
             match_right: dict[int, int]) -> bool:
    """One Kuhn augmenting-path search from producer ``root`` (iterative: graphs may be deep)."""
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
        if right in visited:
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
    return False


def chains(dag: Dag) -> list[list[int]]:
    """The fewest vertex-disjoint chains along edges of the transitive reduction covering
    every node, each in dependency order; sorted by first node."""
    reduced = transitive_reduction(dag)
    levels = bottom_levels(dag)
    succs = [sorted(s, key=lambda n: (-levels[n], n)) for s in reduced.succs]
    match_left: dict[int, int] = {}
    match_right: dict[int, int] = {}
    for node in range(len(dag)):
        if succs[node]:
            _augment(node, succs, match_left, match_right)
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
