"""Slots and the order runs take them in: a slot queue per program, a FIFO enqueue lock.

A slot is one of a program's ``depth`` sets of device memory (activation arena, pinned
staging, bound executors).  :class:`SlotQueue` hands a program's free slots to runs first
come first served, so a burst of callers gets backpressure instead of an error;
:class:`FifoLock` keeps runs' enqueueing in arrival order.  Neither belongs to one event
loop library: a pipeline may serve asyncio, then trio.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

import anyio

from ..errors import ClosedResourceError

if TYPE_CHECKING:
    from .cache import CacheEntry
    from .program import Program, Slot

__all__ = ["FifoLock", "SlotQueue", "Ticket"]

#: What a queue hands out: a program's slot (or, for stages, a slot on every stage's device).
SlotT = TypeVar("SlotT")


@dataclass
class Ticket:
    """One enqueued run: its number, program and slot, the D2H lane value that marks it
    complete, the cache entry it pins, and the real row count of a batch padded to a bucket."""

    run: int
    program: Program
    slot: Slot
    value: int
    entry: CacheEntry[Program, Slot] | None = None
    rows: int | None = None


class SlotQueue(Generic[SlotT]):
    """Slots of one program, handed to waiters first come first served."""

    def __init__(self, slots: list[SlotT]):
        self.free = collections.deque(slots)
        self.waiters: collections.deque[tuple[anyio.Event, list[SlotT]]] = collections.deque()
        self.closed: str | None = None  # why, once closed

    async def acquire(self) -> SlotT:
        if self.closed:
            raise ClosedResourceError(self.closed)
        if self.free and not self.waiters:
            return self.free.popleft()
        event = anyio.Event()
        box: list[SlotT] = []  # the slot handed over, if any
        self.waiters.append((event, box))
        try:
            await event.wait()
        except BaseException:
            if box:  # handed a slot while being cancelled: pass it on
                self.release(box[0])
            else:
                self.waiters.remove((event, box))
            raise
        if not box:  # woken by close()
            raise ClosedResourceError(self.closed or "the pipeline was closed while this run waited for a slot")
        return box[0]

    def close(self, reason: str = "the pipeline was closed while this run waited for a slot") -> None:
        """Wake every waiter with :class:`ClosedResourceError` saying ``reason``; slots still
        come back."""
        if not self.closed:
            self.closed = reason
        while self.waiters:
            event, _ = self.waiters.popleft()
            event.set()

    @property
    def ready(self) -> bool:
        """Whether :meth:`acquire` would return at once."""
        return bool(self.free) and not self.waiters

    def release(self, slot: SlotT) -> None:
        if self.waiters:
            event, box = self.waiters.popleft()
            box.append(slot)
            event.set()
        else:
            self.free.append(slot)


class FifoLock:
    """A first-come-first-served lock for the enqueue path.

    Not an ``anyio.Lock``: that belongs to the event loop library it was first used under
    (a pipeline may serve asyncio, then trio), and its ``acquire`` always checkpoints, which
    costs every run a whole loop iteration.  Waits here make their own events, and a free
    lock is taken without yielding.
    """

    def __init__(self) -> None:
        self.held = False
        self.waiters: collections.deque[anyio.Event] = collections.deque()

    async def acquire(self) -> None:
        if not self.held and not self.waiters:
            self.held = True
            return
        event = anyio.Event()
        self.waiters.append(event)
        try:
            await event.wait()
        except BaseException:
            if event.is_set():  # handed the lock while being cancelled: pass it on
                self.release()
            else:
                self.waiters.remove(event)
            raise

    def release(self) -> None:
        if self.waiters:
            self.waiters.popleft().set()  # ownership passes straight to the next waiter
        else:
            self.held = False
