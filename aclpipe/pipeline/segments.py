"""A slot of a program holding Loop nodes, captured around its loops.

Such a run cannot be one captured model: each loop reads its exit back on the host between
iterations (:mod:`~aclpipe.pipeline.loop`).  The launches between loops are captured instead,
one model per *segment*, each from the slot's replay stream like a whole run
(:mod:`~aclpipe.pipeline.program`: a fork event every stream the segment uses waits on, each
such stream's tail waited on by the replay stream).  A run then replays the segments on the
replay stream in order, and hands over to each loop and back through two events: the loop's
stream waits for the replay stream's position (everything before the loop), and the replay
stream waits for the loop's end before the next segment.  The replay stream is thus where
every part of the run passes in order, so a segment's waits on events recorded in an earlier
segment, or by a loop, are dropped from its model: that order already holds them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..backends.protocol import LaunchKind, LaunchRecord
from ..runtime.capture import Capture, CapturedRun
from ..runtime.launches import enqueue_records

if TYPE_CHECKING:
    from ..runtime import Device, Event, Stream
    from ..runtime.completion.timeline import Timeline
    from .program import Step

__all__ = ["Segments", "loop_events", "segment_streams", "split_steps"]


def split_steps(steps: Sequence[Step]) -> list[list[Step] | Step]:
    """The steps cut around the Loop steps: runs of other steps, and each Loop step alone."""
    parts: list[list[Step] | Step] = []
    current: list[Step] = []
    for step in steps:
        if step.region is None:
            current.append(step)
            continue
        if current:
            parts.append(current)
            current = []
        parts.append(step)
    if current:
        parts.append(current)
    return parts


def segment_streams(steps: Sequence[Step]) -> int:
    """Streams the captured models of a slot's segments hold: each segment's replay stream and
    every stream it uses."""
    return sum(1 + len({step.lane for step in part}) for part in split_steps(steps) if isinstance(part, list))


def loop_events(loops: int, streams: int) -> int:
    """Events a slot with ``loops`` Loop nodes on ``streams`` pipeline streams holds at most for
    its capture around them: per segment a fork and a tail per stream, two per loop, a join."""
    return (loops + 1) * (1 + streams) + 2 * loops + 1


@dataclass(eq=False)
class Segments:
    """One slot's segments, captured; :meth:`enqueue` runs them and the loops between them."""

    device: Device
    replay: Stream
    #: captured segments and, between them, (loop step, into, back)
    items: list[CapturedRun | tuple[Step, Event, Event]] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)

    @classmethod
    def capture(cls, device: Device, streams: Sequence[Stream], replay_lane: int, steps: Sequence[Step],
                records_of: Callable[[Step], list[LaunchRecord]]) -> Segments:
        """Capture ``steps`` around their Loop steps from ``streams[replay_lane]``; ``records_of``
        gives a step's launch records (its waits, launch or copy, record).  A failure frees
        what was made."""
        made = cls(device, streams[replay_lane])
        try:
            for part in split_steps(steps):
                if isinstance(part, list):
                    made.items.append(made._capture(streams, part, records_of))
                else:
                    into, back = device.create_event(), device.create_event()
                    made.events.extend((into, back))
                    made.items.append((part, into, back))
        except BaseException:
            made.close()
            raise
        return made

    def _capture(self, streams: Sequence[Stream], steps: list[Step],
                 records_of: Callable[[Step], list[LaunchRecord]]) -> CapturedRun:
        backend, origin = self.device.backend, self.replay.handle
        recorded = {step.record for step in steps if step.record is not None}
        records = [record for step in steps for record in records_of(step)
                   if record.kind != LaunchKind.WAIT or record.event in recorded]
        lanes = sorted({step.lane for step in steps})
        fork = self.device.create_event()
        tails = [self.device.create_event() for _ in lanes]
        self.events.extend((fork, *tails))
        with Capture(self.replay) as capture:
            backend.event_record(fork.handle, origin)
            for lane in lanes:
                backend.stream_wait_event(streams[lane].handle, fork.handle)
            enqueue_records(backend, records, None)
            for lane, tail in zip(lanes, tails):
                backend.event_record(tail.handle, streams[lane].handle)
                backend.stream_wait_event(origin, tail.handle)
        assert capture.run is not None
        return capture.run

    async def enqueue(self, run: int, timeline: Timeline | None) -> None:
        """Replay each segment on the replay stream, running each loop in between."""
        backend, replay = self.device.backend, self.replay.handle
        context: dict[str, Any] = {"run": run}
        for item in self.items:
            if not isinstance(item, tuple):
                item.replay(self.replay, context)
                continue
            step, into, back = item
            assert step.region is not None
            backend.event_record(into.handle, replay)
            backend.stream_wait_event(step.stream, into.handle)
            await step.region.run(run, timeline)
            backend.event_record(back.handle, step.stream)
            backend.stream_wait_event(replay, back.handle)

    def close(self) -> None:
        """Destroy the models and free the events; the caller synchronized the streams."""
        for item in self.items:
            if not isinstance(item, tuple):
                item.close()
        self.items.clear()
        for event in self.events:
            event.close()
        self.events.clear()
