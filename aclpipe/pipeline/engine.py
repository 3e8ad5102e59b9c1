"""The engine interface: how a pipeline runs one batch, in four steps, named once.

A run is *accepted* (inputs padded to a bucket, the program for their signature found or
prepared and pinned; nothing enqueued), *started* (a slot taken, awaiting one when all are
busy, and the run enqueued with its completion), then *finished* (its completion awaited
and its outputs read) or, when its caller is cancelled or leaves a stream early,
*abandoned* (its slot given back once the device has passed its work).  An accepted batch
that will not start is *unpinned*.

:class:`~aclpipe.pipeline.Pipeline` (one device) and
:class:`~aclpipe.pipeline.several.stages.StagePipeline` (one graph cut across devices)
implement :class:`Engine`; :class:`~aclpipe.pipeline.several.replicas.ReplicaPipeline`
drives one single-device engine per device through it and through nothing else.  Users call
``run``/``stream``; the engine steps are for pipelines that drive other pipelines.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar

import anyio
import numpy as np

from .cache import CacheEntry

__all__ = ["POOL_BATCH", "Accepted", "Admitted", "Closable", "Engine", "close_once", "each_batch", "settle_or_park",
           "stream_in_order"]

#: Host functions that return pool blocks: one per this many releases per stream (and one at
#: the end of each run), so streams do not stall after every node.
POOL_BATCH = 8

EntryT = TypeVar("EntryT", bound=CacheEntry[Any, Any])
TicketT = TypeVar("TicketT")

#: An accepted batch: its cache entry (pinned), the arrays to write, the real row count when
#: the batch was padded to a bucket (else None).
Accepted = tuple[EntryT, dict[str, np.ndarray], int | None]


class Engine(Protocol[EntryT, TicketT]):
    """What a pipeline does with one batch (see the module docstring): accept, start, then
    finish or abandon; ``unpin`` an accepted batch that will not start."""

    def accept(self, arrays: dict[str, np.ndarray]) -> Accepted[EntryT]:
        """Pad checked ``arrays`` to a bucket and find (or prepare) their program, pinned;
        nothing is enqueued."""
        ...

    def unpin(self, entry: EntryT) -> None:
        """Let an accepted entry go without starting a run on it."""
        ...

    async def start(self, entry: EntryT, arrays: Mapping[str, np.ndarray], rows: int | None = None) -> TicketT:
        """Take a slot (awaiting one: backpressure) and enqueue a run on it; the entry's pin
        passes to the ticket."""
        ...

    async def finish(self, ticket: TicketT) -> dict[str, np.ndarray]:
        """Await the run's completion and return its outputs."""
        ...

    async def abandon(self, ticket: TicketT) -> None:
        """Give the run's slot back once the device has passed its work (a shielded caller)."""
        ...


#: What a stream makes of one checked batch: an accepted run, or (a batch with nothing to
#: compute, a zero-size dim) its result at once.
Admitted = tuple[Accepted[Any] | None, dict[str, np.ndarray] | None]


Batches = Iterable[Mapping[str, Any]] | AsyncIterable[Mapping[str, Any]]


async def stream_in_order(engine: Engine[Any, Any], batches: Batches, depth: int,
                          admit: Callable[[Mapping[str, Any]], Admitted]) -> AsyncGenerator[dict[str, np.ndarray]]:
    """Run every batch through ``engine``, ``depth`` in flight, yielding results in order: the
    one loop behind every pipeline's ``stream()`` (one device and stages alike).

    ``admit(batch)`` checks a batch and accepts it (or returns its result when there is nothing
    to compute).  A bad batch (or the iterator failing) raises in order: the runs ahead of it
    are delivered first, as a loop of ``run()`` calls would.  Leaving early abandons the runs
    in flight, shielded, once the generator is closed.
    """
    pending: collections.deque[Any] = collections.deque()
    try:
        async for batch in each_batch(batches):
            try:
                if isinstance(batch, Exception):
                    raise batch
                accepted, empty = admit(batch)
            except Exception:
                while pending:
                    yield await engine.finish(pending.popleft())
                raise
            if empty is not None:  # nothing to enqueue: in order after the runs ahead of it
                while pending:
                    yield await engine.finish(pending.popleft())
                yield empty
                continue
            assert accepted is not None
            # Never wait for a slot while holding runs this generator could finish itself: two
            # streams (or a stream and a caller that holds slots) would each keep some and wait
            # for the other's.
            try:
                while pending and not accepted[0].queue.ready:
                    yield await engine.finish(pending.popleft())
            except BaseException:
                engine.unpin(accepted[0])
                raise
            pending.append(await engine.start(*accepted))
            if len(pending) >= depth:
                yield await engine.finish(pending.popleft())
        while pending:
            yield await engine.finish(pending.popleft())
    finally:
        with anyio.CancelScope(shield=True):
            while pending:
                await engine.abandon(pending.popleft())


class Closable(Protocol):
    """What :func:`close_once` keeps on a pipeline: whether closing began, and the event set
    once it settled."""

    _closed: bool
    _closing: anyio.Event | None


async def close_once(owner: Closable, shut: Callable[[], Awaitable[None]]) -> None:
    """``aclose``'s shape, for every pipeline: the first caller marks ``owner`` closed and runs
    ``shut``; a caller meanwhile waits (cancellably) until that settled; later ones return."""
    if owner._closed:
        if owner._closing is not None:  # another task is closing: wait for it (cancellable)
            await owner._closing.wait()
        return
    owner._closed = True
    owner._closing = closing = anyio.Event()
    try:
        await shut()
    finally:
        closing.set()


async def settle_or_park(settle: Callable[[], Awaitable[None]], park: Callable[[], object],
                         release: Callable[[], object]) -> None:
    """Wait (cancellably) until the device passed every run (``settle``), then free everything
    (``release``); cancelled or failed meanwhile, hand what the device may still touch over to
    be freed once it passed it (``park``), never waiting for it here."""
    try:
        await settle()
    except BaseException:
        park()
        raise
    release()


async def each_batch(batches: Iterable[Any] | AsyncIterable[Any]) -> AsyncIterator[dict[str, Any] | Exception]:
    """``stream()``'s batches, each as a dict, or last the exception that ended them (the
    iterator's own, or a ``TypeError`` for an item that is not a dict): a stream delivers the
    runs ahead of that point before raising it, as a loop of ``run()`` calls would."""
    source = batches if isinstance(batches, AsyncIterable) else _async(batches)
    try:
        async for batch in source:
            if not isinstance(batch, Mapping):
                yield TypeError(f"stream() takes dicts of inputs, got {type(batch).__name__}")
                return
            yield dict(batch)
    except Exception as error:  # noqa: BLE001 - handed to the stream, which raises it in order
        yield error


async def _async(batches: Iterable[Any]) -> AsyncIterator[Any]:
    for batch in batches:
        yield batch
