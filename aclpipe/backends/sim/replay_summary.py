"""A sanitized replay of a captured model, checked in one step instead of task by task.

What a replay's accesses must be ordered after splits in two (issue 25):

- *inside the model*: its tasks, streams, records and waits never change between replays, and
  whether two of its accesses are ordered does not depend on what ran before (nothing outside
  knows ticks of a model stream's future).  The first sanitized replay checks every task as
  it is enqueued (``Captures._check_each``); once it passed, the model's own ordering holds for
  every replay after it;
- *outside it*: what happened before the replay, on other streams or the host, and the
  model's own previous replays.  Only each byte's *outside-facing* accesses meet that history:
  the reads of a byte up to the model's first write of it, and that write.  Later accesses are
  ordered after those (checked inside), so after whatever those are ordered after.

A :class:`ReplaySummary`, built once after the first sanitized replay passed, keeps per
allocation those outside-facing accesses (*probes*) and the history the model leaves behind
(its *final state*: per byte its last write and each model stream's last read since), and per
access the model streams whose start it is ordered after (its *entry set*).  A replay then:

1. merges the replaying stream's clock into every model stream, as the task-by-task path does
   (nothing to merge when the previous replay was this summary's on the same stream: it
   waited for every model stream's end, so its clock already holds theirs);
2. checks each probe against its allocation's history with the clock the task-by-task path
   would have given it: the merged clocks of its entry set.  An allocation nothing else touched
   since the model's previous replay holds exactly the final state that replay left, so its
   checks reduce to comparisons of clocks made once per replay (*self constraints*); an
   allocation the model only reads, and that nobody wrote since, needs none at all;
3. installs the final state where the history changed, and moves every model stream's clock to
   where its last task leaves it (handed back: the replay's end records take them, and the
   replaying stream learns their merge).

The accesses it installs are :class:`ReplayedAccess` objects made once: their tick (and the run
named in messages) is read from the summary's :class:`Stamp`, which each replay moves, so
where nothing changed a replay installs nothing.  Everything the task-by-task path catches is
caught: a race between a replay and other streams' work (step 2), a race inside the model (the
first replay), a free or an executor destruction unordered after a replay (its installed final
state, with the replay's ticks); a kernel touching freed memory still traps when it runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from .intervals import SegmentMap
from .sanitizer import _RETIRED, Access, Clock, Sanitizer, _check, _merge
from .stream import RECORD, WAIT, describe_task

if TYPE_CHECKING:
    from .capture import Captured
    from .event import SimEvent
    from .memory import Allocation
    from .stream import SimStream

__all__ = ["ReplaySummary", "ReplayedAccess", "Stamp"]


class Stamp:
    """Where the model's latest sanitized replay put its streams: each model stream's tick
    before the replay's first task (``base``), and the run it was (`` run=7`` or empty)."""

    __slots__ = ("base", "run")

    def __init__(self) -> None:
        self.base: dict[str, int] = {}
        self.run = ""


class ReplayedAccess(Access):
    """An access of a model's final state, made once and installed by every replay that needs
    it: its tick is the latest replay's (``stamp.base[actor] + local``)."""

    __slots__ = ("local", "stamp", "task")

    def __init__(self, start: int, end: int, write: bool, actor: str, local: int, task: str, stamp: Stamp,
                 padding: bool = False) -> None:
        super().__init__(start, end, write, actor, 0, task, padding)
        self.local = local
        self.stamp = stamp
        self.task = task

    @property
    def tick(self) -> int:
        return self.stamp.base.get(self.actor, 0) + self.local

    @tick.setter
    def tick(self, value: int) -> None:
        pass  # Access.__init__ sets it; the stamp decides

    @property
    def what(self) -> str:
        return self.task + self.stamp.run

    @what.setter
    def what(self, value: str) -> None:
        pass


#: A probe: ``(start, end, write, padding, actor, local tick, task, entry set)``.
Probe = tuple[int, int, bool, bool, str, int, str, int]


class _Plan:
    """One allocation's part of a summary (see the module docstring)."""

    __slots__ = ("allocation", "final", "garbage", "installed", "probes", "version", "writes", "written")

    def __init__(self, allocation: Allocation) -> None:
        self.allocation = allocation
        self.probes: list[Probe] = []
        #: ``(start, end, last write or None, ((actor, read), ...))`` per segment, address order.
        self.final: list[tuple[int, int, ReplayedAccess | None, tuple[tuple[str, ReplayedAccess], ...]]] = []
        self.written = False  # the model writes some of it
        self.garbage = False  # a probe reads padding the model itself leaves: never skipped
        #: The allocation's map and its counters right after this summary last installed there.
        self.installed: SegmentMap[Access] | None = None
        self.version = -1
        self.writes = -1

    def check(self, clock_of: _Clocks, base: dict[str, int], run: str) -> int:
        """Check every probe against the allocation's history (raises HazardError); the count."""
        state: SegmentMap[Access] | None = self.allocation.sanitizer_state
        if state is None:
            return 0
        for start, end, write, padding, actor, local, task, entry in self.probes:
            probe = Access(start, end, write, actor, base[actor] + local, task + run, padding)
            clock = clock_of(entry)
            for segment in state.overlapping(start, end):
                _check(segment, probe, clock, self.allocation)
        return len(self.probes)

    def install(self) -> None:
        """Put the model's final state into the allocation's history."""
        allocation = self.allocation
        state: SegmentMap[Access] | None = allocation.sanitizer_state
        if state is None:
            state = allocation.sanitizer_state = SegmentMap()
        for start, end, last_write, reads in self.final:
            if last_write is not None:
                state.write(start, end, last_write)
            for actor, read in reads:
                state.read(start, end, actor, read)
        self.installed, self.version, self.writes = state, state.version, state.writes


class _Clocks:
    """Each entry set's clock for one replay: the merge of its model streams' clocks, made when
    first asked for."""

    __slots__ = ("_entries", "_merged", "_sets")

    def __init__(self, sets: Sequence[tuple[str, ...]], entries: dict[str, Clock], every: Clock | None = None) -> None:
        self._sets = sets
        self._entries = entries
        # ``every``: the one clock of every entry set (see ``ReplaySummary._dominated``).
        self._merged: list[Clock | None] = [every] * len(sets)

    def __call__(self, entry: int) -> Clock:
        merged = self._merged[entry]
        if merged is None:
            names = self._sets[entry]
            merged = dict(self._entries[names[0]])
            for name in names[1:]:
                _merge(merged, self._entries[name])
            self._merged[entry] = merged
        return merged


class ReplaySummary:
    """A captured model's accesses, summarized for sanitized replays (see the module docstring)."""

    def __init__(self, streams: Sequence[str]) -> None:
        self.streams = tuple(streams)
        self.stamp = Stamp()
        self.sets: list[tuple[str, ...]] = []  # entry sets, each sorted
        self.plans: list[_Plan] = []
        #: ``(entry set, model stream u, local tick k)``: a replay skipping an unchanged
        #: allocation needs ``clock(entry set)[u] >= previous base[u] + k`` for each.
        self.constraints: list[tuple[int, str, int]] = []
        #: Per model stream: the entry set of its last task and what it knows of each model
        #: stream's ticks in this replay then.
        self.ends: dict[str, tuple[int, dict[str, int]]] = {}
        #: After a replay: the replaying stream and the clocks it left each model stream with.
        self._after: tuple[str, list[Clock]] | None = None
        self.updates = 0  # the device's task group updates when it was made (see ``Captures._sanitize``)

    @classmethod
    def of(cls, items: Iterable[Captured], inner: dict[SimStream, SimStream],
           shadows: dict[SimEvent, SimEvent]) -> ReplaySummary:
        """Summarize a model's captured ``items`` (capture order); ``inner`` maps each captured
        stream to the model's own, ``shadows`` each captured event to the model's own."""
        summary = cls([stream.name for stream in inner.values()])
        known: dict[str, dict[str, int]] = {name: {name: 0} for name in summary.streams}
        recorded: dict[SimEvent, dict[str, int]] = {}
        accesses: dict[int, tuple[Allocation, list[tuple[ReplayedAccess, int]]]] = {}
        set_numbers: dict[tuple[str, ...], int] = {}
        for item in items:
            name, task = inner[item.stream].name, item.task
            clock = known[name]
            if task.kind == RECORD:
                assert task.event is not None
                recorded[shadows[task.event]] = dict(clock)
                continue
            if task.kind == WAIT:
                assert task.event is not None
                _merge(clock, recorded.get(shadows[task.event], {}))
                continue
            clock[name] += 1
            entry = summary._set(tuple(sorted(clock)), set_numbers)
            what = describe_task(task)
            regions = [(region, False, False) for region in item.reads]
            regions += [(region, True, False) for region in item.writes]
            regions += [(region, True, True) for region in item.padding]
            for (allocation, address, nbytes), write, padding in regions:
                if nbytes <= 0:
                    continue
                access = ReplayedAccess(address, address + nbytes, write, name, clock[name], what, summary.stamp,
                                        padding)
                accesses.setdefault(id(allocation), (allocation, []))[1].append((access, entry))
        for name, clock in known.items():
            summary.ends[name] = (summary._set(tuple(sorted(clock)), set_numbers), dict(clock))
        best: dict[tuple[int, str], int] = {}
        for allocation, ordered in accesses.values():
            plan = _plan(allocation, ordered)
            summary.plans.append(plan)
            for key, local in _self_constraints(plan).items():
                best[key] = max(best.get(key, 0), local)
        summary.constraints = [(entry, actor, local) for (entry, actor), local in best.items()]
        return summary

    def _set(self, names: tuple[str, ...], numbers: dict[tuple[str, ...], int]) -> int:
        number = numbers.get(names)
        if number is None:
            number = numbers[names] = len(self.sets)
            self.sets.append(names)
        return number

    def replay(self, sanitizer: Sanitizer, start: Clock, run: str, replaying: str) -> tuple[dict[str, Clock], Clock]:
        """Check one replay on stream ``replaying``, started with its clock ``start``, and
        remember it (see the module docstring); raises HazardError, remembering nothing, on a race.

        Returns each model stream's clock at its end (copies: its end record's snapshot), and
        what the replaying stream learns by waiting for all of them (their merge)."""
        with sanitizer._lock:
            clocks = sanitizer._clocks
            entries: dict[str, Clock] = {}
            dominated = self._dominated(replaying, clocks)
            if dominated:
                # Every model stream's clock is inside the start's: each entry set's clock is the
                # start's, which knows each model stream's latest tick, so every constraint holds.
                base = {name: start.get(name, 0) for name in self.streams}
                clock_of, holds = _Clocks(self.sets, entries, start), True
            else:
                for name in self.streams:
                    clock = clocks[name]
                    _merge(clock, start)  # the model's streams start after the replaying stream's work
                    entries[name] = clock
                base = {name: entries[name].get(name, 0) for name in self.streams}
                clock_of, holds = _Clocks(self.sets, entries), self._constraints_hold(entries)
            changed = self._changed(holds)
            for plan in changed:
                sanitizer.checked += plan.check(clock_of, base, run)
            ends = {}
            for name, (entry, known) in self.ends.items():
                clock = dict(clock_of(entry))
                for actor, local in known.items():
                    clock[actor] = base[actor] + local
                ends[name] = clock
            self.stamp.base, self.stamp.run = base, run  # the installed accesses are this replay's now
            for plan in changed:
                plan.install()
            clocks.update(ends)
            self._after = (replaying, [ends[name] for name in self.streams])
            if dominated:  # each end is the start's clock and model streams' ticks: those are new
                joined = {name: clock[name] for name, clock in ends.items()}
            else:
                joined = {}
                for clock in ends.values():
                    _merge(joined, clock)
            return {name: dict(clock) for name, clock in ends.items()}, joined

    def _dominated(self, replaying: str, clocks: dict[str, Clock]) -> bool:
        """Whether the replaying stream's clock holds every model stream's, known without
        comparing them: the previous replay was this summary's, on the same stream, and left
        the model streams' clocks as they are (only ``snapshot`` merged the host's into them
        since, which the replaying stream's clock holds too).  The replaying stream waited for
        every model stream's end, and clocks only grow."""
        after = self._after
        if after is None or after[0] != replaying:
            return False
        return all(clocks.get(name) is clock for name, clock in zip(self.streams, after[1]))

    def _changed(self, constraints_hold: bool) -> list[_Plan]:
        """The plans whose allocation this replay checks and installs in.  The others hold what
        their allocation's history holds since this summary installed there: for an allocation
        the model writes, nothing touched it since and the self constraints hold; for one it
        only reads, nothing wrote it since (only a write could conflict, and its reads are in
        place).  A plan whose probes read padding the model leaves behind is always checked."""
        changed = []
        for plan in self.plans:
            state: SegmentMap[Access] | None = plan.allocation.sanitizer_state
            if state is None or state is not plan.installed:
                changed.append(plan)
            elif plan.written:
                if not constraints_hold or plan.garbage or state.version != plan.version:
                    changed.append(plan)
            elif state.writes != plan.writes:
                changed.append(plan)
        return changed

    def _constraints_hold(self, entries: dict[str, Clock]) -> bool:
        previous = self.stamp.base
        if not previous:
            return False  # never installed: every allocation is checked
        sets = self.sets
        for entry, actor, local in self.constraints:
            # One actor of the entry set's merged clock: no need to merge the whole clocks.
            known = max(entries[name].get(actor, 0) for name in sets[entry])
            if known < previous.get(actor, 0) + local and actor not in _RETIRED:
                return False
        return True


def _plan(allocation: Allocation, ordered: list[tuple[ReplayedAccess, int]]) -> _Plan:
    """One allocation's probes and final state, from the model's accesses to it in order."""
    plan = _Plan(allocation)
    model: SegmentMap[ReplayedAccess] = SegmentMap()
    for access, entry in ordered:
        for start, end in _unwritten(model, access.start, access.end):
            plan.probes.append((start, end, access.write, access.padding, access.actor, access.local, access.task,
                                entry))
        if access.write:
            plan.written = True
            model.write(access.start, access.end, access)
        else:
            model.read(access.start, access.end, access.actor, access)
    plan.final = [(start, end, segment.last_write, tuple(segment.reads.items()))
                  for start, end, segment in model.segments()]
    return plan


def _unwritten(model: SegmentMap[ReplayedAccess], start: int, end: int) -> list[tuple[int, int]]:
    """The pieces of ``[start, end)`` the model did not write yet: where an access meets the
    history from before the replay."""
    pieces: list[tuple[int, int]] = []
    cursor = start
    for low, high, segment in model.overlapping_ranges(start, end):
        if segment.last_write is None:
            continue
        if cursor < low:
            pieces.append((cursor, low))
        cursor = max(cursor, high)
    if cursor < end:
        pieces.append((cursor, end))
    return pieces


def _self_constraints(plan: _Plan) -> dict[tuple[int, str], int]:
    """What each probe needs of the clocks when the history is the model's own final state
    (its previous replay's): per (entry set, model stream), the latest local tick it must be
    ordered after.  A probe reading padding the model leaves behind marks the plan ``garbage``."""
    final: SegmentMap[ReplayedAccess] = SegmentMap()
    for start, end, last_write, reads in plan.final:
        if last_write is not None:
            final.write(start, end, last_write)
        for actor, read in reads:
            final.read(start, end, actor, read)
    needs: dict[tuple[int, str], int] = {}
    for start, end, write, _, actor, _, _, entry in plan.probes:
        for segment in final.overlapping(start, end):
            earlier = [segment.last_write] if segment.last_write is not None else []
            if write:
                earlier += segment.reads.values()
            elif segment.last_write is not None and segment.last_write.padding:
                plan.garbage = True
            for previous in earlier:
                if previous.actor != actor:
                    key = (entry, previous.actor)
                    needs[key] = max(needs.get(key, 0), previous.local)
    return needs
