"""What the decoder's step programs need from the device, against what it has.

A decoder meets one input signature per (kind, batch bucket, length bucket): prefills of
``batch x seq`` prompts with an empty past, decode steps of ``batch x 1`` tokens over a past
of a cache bucket.  Each becomes a prepared program of the pipeline; where the device
captures, a captured program holds *model streams* (one per stream its run uses plus its
replay stream: ``15_model_running_instance__management.md``), events (one per recording node,
a tail per stream, the run's own: ``07_event_management.md``) and its activation arena.  A
capture that finds no stream left fails (vllm-ascend's budget of 1,800-1,920 graphs and its
capture failures come from there), so the decoder counts first: it adds up what each
signature's program would hold (:func:`bucket_use`) and sets how many programs may be held at
once so that any of them together fit the stream, event and memory budget left on the device
(:func:`capture_plan`; at construction from the largest prefill and decode signatures, which
bound the others; :meth:`Decoder.capture_plan <aclpipe.decode.Decoder.capture_plan>` plans
every one).  Beyond that number the pipeline frees the least recently used idle program before preparing another, so
a capture never fails for lack of streams; shapes outside the buckets never occur (every step
is padded to one).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..pipeline.budget import StreamBudget
from ..pipeline.program import events_per_slot
from ..plan import Plan
from ..runtime import Device

__all__ = ["BucketUse", "CapturePlan", "bucket_use", "capture_plan"]

#: Share of the device's free memory the decoder's programs may take (the rest: the cache,
#: workspaces, other pipelines).
MEMORY_SHARE = 0.5


@dataclass(frozen=True)
class BucketUse:
    """What one step program holds (one slot: the decoder runs one step at a time)."""

    kind: str  # "prefill" or "decode"
    batch: int
    seq: int
    past: int
    model_streams: int  # held while the program is captured
    events: int
    arena_bytes: int

    def describe(self) -> str:
        return (f"{self.kind:7} batch {self.batch:3} x seq {self.seq:4} past {self.past:5}: "
                f"{self.model_streams} streams, {self.events} events, {self.arena_bytes / 2**10:.0f} KiB arena")


@dataclass(frozen=True)
class CapturePlan:
    """Every bucket's use, the device's budget left, and the programs that fit it at once."""

    uses: tuple[BucketUse, ...]
    streams_left: int
    events_left: int
    memory_left: int
    max_programs: int

    def describe(self) -> str:
        """The budget and what each bucket uses, one line each (what ``aclpipe generate`` prints)."""
        lines = [f"device budget left: {self.streams_left} streams, {self.events_left} events, "
                 f"{self.memory_left / 2**20:.0f} MiB for programs; {len(self.uses)} bucket programs, "
                 f"at most {self.max_programs} held at once"]
        lines += [f"  {use.describe()}" for use in self.uses]
        return "\n".join(lines)


def bucket_use(kind: str, batch: int, seq: int, past: int, plan: Plan, *, event_errors: bool) -> BucketUse:
    """What a program of ``plan`` holds with one slot, captured."""
    used = {node.stream for node in plan.nodes} - {plan.d2h_stream}
    return BucketUse(kind, batch, seq, past, model_streams=2 + len(used),
                     events=events_per_slot(plan, plan.stream_count, done_joins=event_errors),
                     arena_bytes=plan.arena_size)


def capture_plan(uses: tuple[BucketUse, ...], device: Device, reserved_streams: int = 0) -> CapturePlan:
    """``uses`` against the device's budget left (less ``reserved_streams`` not booked yet:
    the streams of a pipeline about to be made)."""
    streams_left = StreamBudget.of(device).left - reserved_streams
    events_left = device.capabilities.max_events - device.live_events
    memory_left = int(device.mem_info().free * MEMORY_SHARE)
    return CapturePlan(uses, streams_left, events_left, memory_left,
                       fitting(uses, streams_left, events_left, memory_left))


def fitting(uses: tuple[BucketUse, ...], streams: int, events: int, memory: int) -> int:
    """How many programs fit at once whichever they are: the most demanding ones, added up
    until a budget is exceeded (at least 1: a lone program the device cannot capture runs
    uncaptured, from launch tables)."""
    counts = []
    for key, limit in (("model_streams", streams), ("events", events), ("arena_bytes", memory)):
        total, fits = 0, 0
        for need in sorted((getattr(use, key) for use in uses), reverse=True):
            if total + need > limit:
                break
            total, fits = total + need, fits + 1
        counts.append(fits)
    return max(1, min(counts))
