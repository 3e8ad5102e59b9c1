"""Where each activation lives in the arena.

Every activation (the device copy of a graph input, every value a node writes, the device
copy of an output) is a :class:`Buffer` written by one node and touched by a set of nodes (the
writer, its readers, and the readers of every view of it: views take no bytes of their own).
Constants live in their own allocations and are not planned here.

Two buffers may share bytes only if every node touching the first *happens-before* the writer
of the second under the plan (same-stream order plus event waits, read off the vector clocks
of :class:`~aclpipe.plan.events.EventPlacement`): ordering is proven, never assumed
(ONNX Runtime's rule for cross-stream reuse).  A node's inputs and outputs never share.

Placement is greedy: buffers are taken in some order and each goes to the lowest (first fit)
or tightest (best fit) gap that clears every conflicting buffer already placed.  Four orders
(largest first, first written first, longest lived first, largest size x lifetime first) times
the two fits are tried (TFLite's and MXNet's planners use the first two orders; none wins on
every graph); then a two-ended placement (bottom if free, else flush with the top, else the
lowest gap) is tried within the live-set bound plus 0, 1, 2, 5, 10 and 20 %.  The smallest
arena wins.
Offsets are multiples of :data:`ALIGNMENT` (512 bytes: aclnn needs 32-byte aligned addresses,
and 512 is what CANN's and torch_npu's allocators hand out, so a slot's arena may sit at any
allocation).  The offsets are the same for every in-flight slot: each slot has its own arena.

The *live-set lower bound*: run the plan's nodes one at a time in launch order; a buffer is
live from its writer's step through its last toucher's step (inclusive), or through the last
step when a device-to-host copy reads it (no stream waits for those copies, so no later write
is ordered after them); the bound is the largest sum of aligned sizes live at one step.
Buffers live at the same step cannot share: for one to precede the other, its last toucher
would have to happen-before the other's writer, which launches no later than that step, while
happens-before implies launch order (and nothing is ordered after a device-to-host copy).  So
no valid placement uses fewer bytes.  With several compute streams the arena is usually
above the bound: branches that may run concurrently cannot share, though run one at a time
they would.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from .events import EventPlacement

__all__ = ["ALIGNMENT", "Buffer", "MemoryPlan", "aligned", "live_set_lower_bound", "plan_memory"]

ALIGNMENT = 512


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
    """Arena offsets and the numbers to judge them by (all in bytes)."""

    offsets: Mapping[str, int]
    sizes: Mapping[str, int]  # aligned sizes
    arena_size: int
    lower_bound: int
    naive_bytes: int  # one buffer per value
    alignment: int
    strategy: str


def aligned(nbytes: int, alignment: int = ALIGNMENT) -> int:
    """``nbytes`` rounded up to a multiple of ``alignment``."""
    return -(-nbytes // alignment) * alignment


def _piece(nbytes: int) -> int:
    """CANN's footprint of a piece carved from one allocation: ``ALIGN_UP(len, 32) + 32`` bytes
    (hicann/runtime 11-01, ``aclrtMalloc``): kernels may touch the 32 bytes past a tensor."""
    return aligned(nbytes, 32) + 32 if nbytes else 0


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


def _conflicts(buffers: Sequence[Buffer], events: EventPlacement) -> np.ndarray:
    """``[i, j]`` is True when buffers ``i`` and ``j`` may not share bytes."""
    width = max(len(c) for c in events.clocks) if events.clocks else 0
    done = np.zeros((len(buffers), width), dtype=np.int64)  # per stream: how far it must have run
    start = np.zeros((len(buffers), width), dtype=np.int64)  # what the writer knows when it starts
    for index, buffer in enumerate(buffers):
        for node in buffer.accessors:
            stream = events.streams[node]
            done[index, stream] = max(done[index, stream], events.positions[node] + 1)
        start[index] = events.clocks[buffer.writer]
    # precedes[i, j]: every toucher of i is complete before j's writer starts.
    precedes = np.all(start[None, :, :] >= done[:, None, :], axis=2)
    return np.asarray(~(precedes | precedes.T), dtype=bool)


def _busy(index: int, offsets: np.ndarray, placed: np.ndarray, sizes: np.ndarray, conflicts: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Intervals of the conflicting buffers already placed, by start, and the gap floors: gap
    ``k`` runs from ``floors[k]`` (the highest end before interval ``k``) to ``lows[k]``."""
    busy = np.flatnonzero(placed & conflicts[index] & (sizes > 0))
    by_low = busy[np.argsort(offsets[busy], kind="stable")]
    lows = offsets[by_low]
    highs = lows + sizes[by_low]
    floors = np.concatenate(([0], np.maximum.accumulate(highs)[:-1])) if highs.size else highs
    return lows, highs, floors


def _place(order: Sequence[int], sizes: np.ndarray, conflicts: np.ndarray, best_fit: bool) -> np.ndarray:
    """Offsets placing buffers in ``order``, each at the lowest gap (first fit) or the tightest
    gap (best fit) left by the conflicting buffers already placed, else on top of them."""
    offsets = np.zeros(len(sizes), dtype=np.int64)
    placed = np.zeros(len(sizes), dtype=bool)
    for index in order:
        lows, highs, floors = _busy(index, offsets, placed, sizes, conflicts)
        if sizes[index] and lows.size:
            room = lows - floors
            fits = np.flatnonzero(room >= sizes[index])
            if fits.size == 0:
                offsets[index] = highs.max()
            elif best_fit:
                offsets[index] = floors[fits[np.argmin(room[fits])]]
            else:
                offsets[index] = floors[fits[0]]
        placed[index] = True
    return offsets


def _place_two_ended(order: Sequence[int], sizes: np.ndarray, conflicts: np.ndarray, limit: int
                     ) -> np.ndarray | None:
    """Offsets within ``limit`` bytes or None: each buffer goes to the bottom if free, else
    flush with the top if free, else to the lowest gap.  Alternating ends is what packs a
    chain (each value overlapping only its neighbours) into exactly the live-set bound."""
    offsets = np.zeros(len(sizes), dtype=np.int64)
    placed = np.zeros(len(sizes), dtype=bool)
    for index in order:
        size = int(sizes[index])
        lows, highs, floors = _busy(index, offsets, placed, sizes, conflicts)
        if size and lows.size:
            fits = np.flatnonzero(lows - floors >= size)
            if lows[0] >= size:
                offsets[index] = 0
            elif highs.max() <= limit - size:
                offsets[index] = limit - size
            elif fits.size:
                offsets[index] = floors[fits[0]]
            else:
                offsets[index] = highs.max()
            if offsets[index] + size > limit:
                return None
        elif size > limit:
            return None
        placed[index] = True
    return offsets


def _orders(buffers: Sequence[Buffer], sizes: Sequence[int]) -> dict[str, list[int]]:
    """Placement orders worth trying: each wins on some graph shapes."""
    indices = range(len(buffers))
    first = [b.writer for b in buffers]
    length = [b.accessors[-1] - b.writer + 1 for b in buffers]
    return {
        "largest-first": sorted(indices, key=lambda i: (-sizes[i], first[i], i)),
        "first-written-first": sorted(indices, key=lambda i: (first[i], -sizes[i], i)),
        "longest-lived-first": sorted(indices, key=lambda i: (-length[i], -sizes[i], first[i], i)),
        "largest-area-first": sorted(indices, key=lambda i: (-sizes[i] * length[i], first[i], i)),
    }


def plan_memory(buffers: Sequence[Buffer], events: EventPlacement, alignment: int = ALIGNMENT) -> MemoryPlan:
    """Offsets for ``buffers`` in one arena, sharing bytes only where ``events`` prove it safe."""
    if alignment < 1 or alignment & (alignment - 1):
        raise ValueError(f"alignment must be a power of two, got {alignment}")
    sizes = [aligned(_piece(b.nbytes), alignment) for b in buffers]
    conflicts = _conflicts(buffers, events) if buffers else np.zeros((0, 0), dtype=bool)
    size_array = np.asarray(sizes, dtype=np.int64)
    best: tuple[int, str, list[int]] | None = None
    for name, order in _orders(buffers, sizes).items():
        for best_fit in (False, True):
            placed = _place(order, size_array, conflicts, best_fit)
            arena = int((placed + size_array).max(initial=0))
            if best is None or arena < best[0]:
                best = (arena, f"{name}, {'best' if best_fit else 'first'} fit", [int(o) for o in placed])
    assert best is not None
    lower_bound = live_set_lower_bound(buffers, sizes)
    for slack in (1.0, 1.01, 1.02, 1.05, 1.1, 1.2):
        limit = aligned(int(lower_bound * slack), alignment)
        if limit >= best[0]:
            break
        for name, order in _orders(buffers, sizes).items():
            found = _place_two_ended(order, size_array, conflicts, limit)
            if found is not None:
                best = (int((found + size_array).max(initial=0)), f"two-ended, {name}, within {slack:.2f}x the bound",
                        [int(o) for o in found])
                break
        if best[0] <= limit:
            break
    arena, strategy, offsets = best
    names = [b.name for b in buffers]
    return MemoryPlan(
        offsets=MappingProxyType(dict(zip(names, offsets))),
        sizes=MappingProxyType(dict(zip(names, sizes))),
        arena_size=arena,
        lower_bound=lower_bound,
        naive_bytes=sum(sizes),
        alignment=alignment,
        strategy=strategy,
    )
