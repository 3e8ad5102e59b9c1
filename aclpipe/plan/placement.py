"""Greedy offset placement over explicit conflict lists (graphs of moderate size).

Buffers are taken in some order and each goes to the lowest (first fit) or tightest (best
fit) gap that clears every conflicting buffer already placed, else on top of them.  Four
orders (largest first, first written first, longest lived first, largest size x lifetime
first) times the two fits are tried (TFLite's and MXNet's planners use the first two orders;
none wins on every graph); then a two-ended placement (bottom if free, else flush with the
top, else the lowest gap) is tried within the live-set bound plus 0, 1, 2, 5, 10 and 20 %.
Each buffer costs time in proportion to its conflicts, which is why :mod:`.memory` uses this
only when the conflict lists are small enough.
"""

from __future__ import annotations

from collections.abc import Sequence

from .arena import aligned

__all__ = ["best_greedy", "orders", "place_greedy", "place_two_ended"]

#: Arenas the two-ended placement aims at, as multiples of the live-set lower bound.
SLACKS = (1.0, 1.01, 1.02, 1.05, 1.1, 1.2)


def orders(writers: Sequence[int], lasts: Sequence[int], sizes: Sequence[int]) -> dict[str, list[int]]:
    """Placement orders worth trying: each wins on some graph shapes."""
    indices = range(len(sizes))
    length = [last - writer + 1 for writer, last in zip(writers, lasts)]
    return {
        "largest-first": sorted(indices, key=lambda i: (-sizes[i], writers[i], i)),
        "first-written-first": sorted(indices, key=lambda i: (writers[i], -sizes[i], i)),
        "longest-lived-first": sorted(indices, key=lambda i: (-length[i], -sizes[i], writers[i], i)),
        "largest-area-first": sorted(indices, key=lambda i: (-sizes[i] * length[i], writers[i], i)),
    }


def _busy(index: int, offsets: Sequence[int], sizes: Sequence[int], conflicts: Sequence[Sequence[int]]
          ) -> tuple[list[tuple[int, int]], list[int]]:
    """Intervals of the conflicting buffers already placed, by start, and the gap floors: gap
    ``k`` runs from ``floors[k]`` (the highest end before interval ``k``) to its start."""
    busy = sorted((offsets[other], offsets[other] + sizes[other]) for other in conflicts[index]
                  if offsets[other] >= 0 and sizes[other])
    floors = []
    top = 0
    for _, high in busy:
        floors.append(top)
        top = max(top, high)
    return busy, floors


def place_greedy(order: Sequence[int], sizes: Sequence[int], conflicts: Sequence[Sequence[int]],
                 best_fit: bool) -> list[int]:
    """Offsets placing buffers in ``order`` at the lowest (or tightest) gap, else on top."""
    offsets = [-1] * len(sizes)
    for index in order:
        size = sizes[index]
        busy, floors = _busy(index, offsets, sizes, conflicts)
        offset = 0
        if size and busy:
            chosen = -1
            for k, (low, _) in enumerate(busy):
                room = low - floors[k]
                if room >= size and (chosen < 0 or (best_fit and room < busy[chosen][0] - floors[chosen])):
                    chosen = k
                    if not best_fit:
                        break
            offset = floors[chosen] if chosen >= 0 else max(high for _, high in busy)
        offsets[index] = offset
    return offsets


def place_two_ended(order: Sequence[int], sizes: Sequence[int], conflicts: Sequence[Sequence[int]], limit: int
                    ) -> list[int] | None:
    """Offsets within ``limit`` bytes or None: each buffer goes to the bottom if free, else
    flush with the top if free, else to the lowest gap.  Alternating ends is what packs a
    chain (each value overlapping only its neighbours) into exactly the live-set bound."""
    offsets = [-1] * len(sizes)
    for index in order:
        size = sizes[index]
        busy, floors = _busy(index, offsets, sizes, conflicts)
        offset = 0
        if size and busy:
            top = max(high for _, high in busy)
            if busy[0][0] >= size:
                offset = 0
            elif top <= limit - size:
                offset = limit - size
            else:
                gap = next((floors[k] for k, (low, _) in enumerate(busy) if low - floors[k] >= size), None)
                offset = top if gap is None else gap
            if offset + size > limit:
                return None
        elif size > limit:
            return None
        offsets[index] = offset
    return offsets


def best_greedy(writers: Sequence[int], lasts: Sequence[int], sizes: Sequence[int],
                conflicts: Sequence[Sequence[int]], lower_bound: int, alignment: int) -> tuple[int, str, list[int]]:
    """The smallest arena of every greedy order and fit, then of the two-ended placement
    within growing multiples of ``lower_bound``: ``(arena, strategy, offsets)``."""
    candidates = orders(writers, lasts, sizes)
    best: tuple[int, str, list[int]] | None = None
    for name, order in candidates.items():
        for best_fit in (False, True):
            placed = place_greedy(order, sizes, conflicts, best_fit)
            arena = max((o + s for o, s in zip(placed, sizes)), default=0)
            if best is None or arena < best[0]:
                best = (arena, f"{name}, {'best' if best_fit else 'first'} fit", placed)
    assert best is not None
    for slack in SLACKS:
        limit = aligned(int(lower_bound * slack), alignment)
        if limit >= best[0]:
            break
        for name, order in candidates.items():
            found = place_two_ended(order, sizes, conflicts, limit)
            if found is not None:
                arena = max((o + s for o, s in zip(found, sizes)), default=0)
                best = (arena, f"two-ended, {name}, within {slack:.2f}x the bound", found)
                break
        if best[0] <= limit:
            break
    return best
