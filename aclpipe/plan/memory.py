"""Where each activation lives in the arena.

Every activation (the device copy of a graph input, every value a node writes, the device
copy of an output) is a :class:`Buffer` written by one node and touched by a set of nodes (the
writer, its readers, and the readers of every view of it: views take no bytes of their own).
Constants live in their own allocations and are not planned here.

Two buffers may share bytes only if every node touching the first *happens-before* the writer
of the second under the plan (same-stream order plus event waits, read off the vector clocks
of :class:`~aclpipe.plan.events.EventPlacement`; see :mod:`.conflicts`).  A node's inputs and
outputs never share.

Each buffer takes its footprint under an :class:`~aclpipe.plan.arena.ArenaRule` (by default
CANN's rule for carving up one allocation on the A2 series: ``ALIGN_UP(len, 32) + 32`` bytes,
starting 64-byte aligned; see :mod:`.arena`).  The offsets are the same for every in-flight
slot: each slot has its own arena.

Placement: the launch-order sweep of :mod:`.sweep` (best fit) runs on every graph, in time
that grows with the number of buffers (a binary search and a few recent holes each), never
with the number of conflicting pairs.  When the conflicting pairs number at most :data:`PAIR_BUDGET`, the greedy
orders and the two-ended placement of :mod:`.placement` run over explicit conflict lists as
well.  The smallest arena wins (the greedy result on a tie).

The *live-set lower bound*: run the plan's nodes one at a time in launch order; a buffer is
live from its writer's step through its last toucher's step (inclusive), or through the last
step when a device-to-host copy reads it (no stream waits for those copies, so no later write
is ordered after them); the bound is the largest sum of footprints live at one step.
Buffers live at the same step cannot share: for one to precede the other, its last toucher
would have to happen-before the other's writer, which launches no later than that step, while
happens-before implies launch order (and nothing is ordered after a device-to-host copy).  So
no valid placement uses fewer bytes.  With several compute streams the arena is usually
above the bound: branches that may run concurrently cannot share, though run one at a time
they would.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from .arena import A2_RULE, ArenaRule, aligned
from .conflicts import Lifetimes, conflict_lists, overlap_pairs
from .events import EventPlacement
from .placement import best_greedy
from .sweep import place_sweep

__all__ = [
    "A2_RULE",
    "ALIGNMENT",
    "PAIR_BUDGET",
    "ArenaRule",
    "Buffer",
    "MemoryPlan",
    "aligned",
    "live_set_lower_bound",
    "plan_memory",
]

#: Offset alignment of the default rule (bytes).
ALIGNMENT = A2_RULE.offset_alignment
#: Conflicting pairs up to which the greedy placements over conflict lists run too.
PAIR_BUDGET = 30_000


@dataclass(frozen=True)
class Buffer:
    """An arena request: ``nbytes`` written by node ``writer``, touched by ``accessors``
    (which include the writer).  ``held``: read by a node no stream ever waits for (a
    device-to-host copy), so its bytes are never provably free before the run ends."""

    name: str
    nbytes: int
    writer: int
    accessors: tuple[int, ...]
    held: bool = False

    def __post_init__(self) -> None:
        touched = tuple(sorted(set(self.accessors) | {self.writer}))
        object.__setattr__(self, "accessors", touched)
        if self.nbytes < 0:
            raise ValueError(f"buffer {self.name!r}: nbytes must be >= 0, got {self.nbytes}")
        if touched[0] < self.writer:
            raise ValueError(f"buffer {self.name!r}: node {touched[0]} touches it before its writer {self.writer}")


@dataclass(frozen=True)
class MemoryPlan:
    """Arena offsets and the numbers to judge them by (all in bytes).

    ``sizes`` are footprints under ``rule``; ``alignment`` is ``rule.offset_alignment``.
    """

    offsets: Mapping[str, int]
    sizes: Mapping[str, int]
    arena_size: int
    lower_bound: int
    naive_bytes: int  # one buffer per value
    alignment: int
    strategy: str
    rule: ArenaRule = field(default=A2_RULE)


def live_set_lower_bound(buffers: Sequence[Buffer], sizes: Sequence[int]) -> int:
    """Peak of simultaneously live bytes with the nodes run one at a time in launch order."""
    if not buffers:
        return 0
    last_step = max(b.accessors[-1] for b in buffers)
    delta = [0] * (last_step + 2)
    for buffer, size in zip(buffers, sizes):
        delta[buffer.writer] += size
        delta[(last_step if buffer.held else buffer.accessors[-1]) + 1] -= size
    peak = live = 0
    for change in delta:
        live += change
        peak = max(peak, live)
    return peak


def _rule(alignment: int | None, rule: ArenaRule | None) -> ArenaRule:
    if alignment is None:
        return rule if rule is not None else A2_RULE
    if rule is not None:
        raise ValueError("give either alignment (the old whole-piece rounding) or rule, not both")
    if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment < 1 or alignment & (alignment - 1):
        raise ValueError(f"alignment must be a power of two, got {alignment!r}")
    return ArenaRule(size_alignment=alignment, padding=0, offset_alignment=alignment)


def plan_memory(buffers: Sequence[Buffer], events: EventPlacement, alignment: int | None = None, *,
                rule: ArenaRule | None = None, pair_budget: int | None = None) -> MemoryPlan:
    """Offsets for ``buffers`` in one arena, sharing bytes only where ``events`` prove it safe.

    Parameters
    ----------
    buffers, events:
        What to place and the plan's ordering.
    alignment:
        The older form of ``rule``: every piece rounded up to, and aligned at, this power of
        two, without padding.
    rule:
        Piece sizes and alignment; default :data:`~aclpipe.plan.arena.A2_RULE`.
    pair_budget:
        Conflicting pairs up to which the greedy placements over conflict lists run as well
        (default :data:`PAIR_BUDGET`; 0: the launch-order sweep alone).
    """
    budget = PAIR_BUDGET if pair_budget is None else pair_budget
    arena_rule = _rule(alignment, rule)
    sizes = [arena_rule.footprint(b.nbytes) for b in buffers]
    lower_bound = live_set_lower_bound(buffers, sizes)
    lifetimes = Lifetimes.of(buffers, events)
    best: tuple[int, str, list[int]] | None = None
    conflicts = None
    if budget > 0 and overlap_pairs(lifetimes, sizes) <= budget:
        conflicts = conflict_lists(buffers, events, sizes, lifetimes, budget)
    if conflicts is not None:
        best = best_greedy(lifetimes.writer, lifetimes.last, sizes, conflicts, lower_bound,
                           arena_rule.offset_alignment)
    placed = place_sweep(lifetimes, sizes, [b.held for b in buffers], events.streams, events.clocks)
    arena = max((o + s for o, s in zip(placed, sizes)), default=0)
    if best is None or arena < best[0]:
        best = (arena, "launch-order sweep, best fit", placed)
    assert best is not None
    arena, strategy, offsets = best
    names = [b.name for b in buffers]
    return MemoryPlan(
        offsets=MappingProxyType(dict(zip(names, offsets))),
        sizes=MappingProxyType(dict(zip(names, sizes))),
        arena_size=arena,
        lower_bound=lower_bound,
        naive_bytes=sum(sizes),
        alignment=arena_rule.offset_alignment,
        strategy=strategy,
        rule=arena_rule,
    )
