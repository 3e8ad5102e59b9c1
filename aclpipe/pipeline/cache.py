"""The program cache: prepared programs per input signature, least recently used evicted first.

Every input signature a pipeline sees gets its own :class:`~aclpipe.pipeline.program.Program`
(``depth`` activation arenas, pinned staging, an executor per node per slot), so a server
fed every batch size from 1 to 400 would otherwise hold 400 of them.  The cache keeps at most
``capacity``: when a new program would exceed it, the least recently used programs that have
*nothing in flight* are closed (every slot back, no run pinning it between taking its program
and finishing).  A program whose run is still in flight is never evicted, so the cache may
hold more than ``capacity`` for as long as the runs that need them last; it shrinks again as
they finish.

:class:`LruDict` is the same policy for plain values (the preparer's plans).
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from .slots import SlotQueue

__all__ = ["CacheEntry", "LruDict", "ProgramCache", "check_capacity"]

K = TypeVar("K", bound=Hashable)
_USES = itertools.count()  # see CacheEntry.used
V = TypeVar("V")


class _Prepared(Protocol):
    """What the cache holds: a program with slots (one device's, or one per stage)."""

    @property
    def slots(self) -> Sequence[Any]: ...


P = TypeVar("P", bound=_Prepared)
S = TypeVar("S")


def check_capacity(value: object, label: str = "max_programs") -> int:
    """``value`` as a cache capacity (an int >= 1), or a ValueError saying what was expected."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{label} must be a positive int (programs kept prepared at once), got {value!r}")
    return value


class LruDict(Generic[K, V]):
    """A dict of at most ``capacity`` items; reading or writing a key makes it the newest."""

    def __init__(self, capacity: int):
        self.capacity = check_capacity(capacity, "capacity")
        self._items: collections.OrderedDict[K, V] = collections.OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def __setitem__(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def clear(self) -> None:
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


@dataclass(eq=False)
class CacheEntry(Generic[P, S]):
    """One prepared program, the queue its slots are handed out from, and its users."""

    key: Hashable
    program: P
    queue: SlotQueue[S]
    pins: int = 0  # runs between taking this program and finishing (or abandoning) it
    checked: set[int] = field(default_factory=set)  # bucket sizes whose outputs were checked
    #: When it was last used, on a clock shared by every cache of the process, so programs of
    #: different pipelines can be compared (the device's stream budget frees the oldest).
    used: int = field(default_factory=lambda: next(_USES))

    @property
    def idle(self) -> bool:
        """Nothing in flight: no run pins it, every slot is back (a lost slot never is)."""
        return not self.pins and not self.queue.waiters and len(self.queue.free) == len(self.program.slots)


class ProgramCache(Generic[P, S]):
    """Prepared programs by input signature, at most ``capacity`` idle ones kept.

    Parameters
    ----------
    capacity:
        Programs kept prepared at once (more only while their runs are in flight).
    """

    def __init__(self, capacity: int):
        self.capacity = check_capacity(capacity)
        self._entries: collections.OrderedDict[Hashable, CacheEntry[P, S]] = collections.OrderedDict()
        self._by_program: dict[int, CacheEntry[P, S]] = {}
        self.prepared = 0  # programs ever added
        self.evicted = 0  # programs closed to stay within capacity

    def get(self, key: Hashable) -> CacheEntry[P, S] | None:
        """The entry for ``key``, now the most recently used; None when not prepared."""
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            entry.used = next(_USES)
        return entry

    def add(self, key: Hashable, program: P) -> CacheEntry[P, S]:
        """Cache a newly prepared program (the most recently used)."""
        entry: CacheEntry[P, S] = CacheEntry(key, program, SlotQueue(list(program.slots)))
        self._entries[key] = entry
        self._by_program[id(program)] = entry
        self.prepared += 1
        return entry

    def entry_of(self, program: P) -> CacheEntry[P, S]:
        return self._by_program[id(program)]

    def pin(self, entry: CacheEntry[P, S]) -> None:
        entry.pins += 1

    def unpin(self, entry: CacheEntry[P, S]) -> None:
        entry.pins -= 1

    def trim(self) -> list[P]:
        """Take the least recently used idle programs out while over capacity; returns them for
        the caller to close (the device has passed all their work: every slot is back)."""
        evicted: list[P] = []
        if len(self._entries) <= self.capacity:
            return evicted
        for entry in list(self._entries.values()):
            if len(self._entries) <= self.capacity:
                break
            if entry.idle:
                del self._entries[entry.key]
                del self._by_program[id(entry.program)]
                evicted.append(entry.program)
        self.evicted += len(evicted)
        return evicted

    def oldest_idle(self, worth: Callable[[P], bool] | None = None) -> CacheEntry[P, S] | None:
        """The least recently used idle entry among those ``worth`` freeing (default: any)."""
        for entry in self._entries.values():
            if entry.idle and (worth is None or worth(entry.program)):
                return entry
        return None

    def evict_one(self, worth: Callable[[P], bool] | None = None) -> P | None:
        """Take the least recently used idle program out, whatever the capacity (the device's
        event limit asks for room), among those ``worth`` freeing (default: any); None when
        every such program is busy."""
        for entry in self._entries.values():
            if entry.idle and (worth is None or worth(entry.program)):
                del self._entries[entry.key]
                del self._by_program[id(entry.program)]
                self.evicted += 1
                return entry.program
        return None

    def close_queues(self, reason: str) -> None:
        """Wake every run waiting for a slot with :class:`ClosedResourceError` (``reason``)."""
        for entry in self._entries.values():
            entry.queue.close(reason)

    def clear(self) -> list[P]:
        """Take every program out; returns them for the caller to close."""
        programs = [entry.program for entry in self._entries.values()]
        self._entries.clear()
        self._by_program.clear()
        return programs

    def __iter__(self) -> Iterator[CacheEntry[P, S]]:
        return iter(list(self._entries.values()))

    def __len__(self) -> int:
        return len(self._entries)
