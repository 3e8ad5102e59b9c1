"""Workspaces: where each launch's scratch memory comes from, and when it comes back.

Phase one says how many bytes of workspace a launch needs; the caller must keep them, and
nobody else may write them, until the stream has passed the launch (ARCHITECTURE.md 1).
One interface serves the single-op runner (:class:`~aclpipe.eager.OpRunner`) and the
pipeline:

1. ``try_acquire`` / ``acquire`` / ``await acquire_async`` a :class:`Workspace` for a launch
   on a stream;
2. after enqueueing the launch, ``release_after(workspace, stream)``: the block is tagged
   with the value the stream's next :class:`~aclpipe.runtime.completion.timeline.Timeline` host
   function publishes, and comes back once the timeline shows the stream passed it.  The
   same stream may take it again at once (stream order keeps the users apart); another
   stream only after it came back.  A caller that synchronized already uses
   ``release_now``.

Strategies:

``static`` (:class:`StaticWorkspace`)
    one region per stream, sized to the largest workspace seen on that stream: stream order
    serializes its users, so nothing is ever waited for or returned.  Addresses are fixed,
    so the pipeline can capture programs that use it.
``pool`` (:class:`WorkspacePool`)
    device regions bounded by ``limit`` bytes, carved first-fit.  The pipeline batches the
    host functions that return blocks (one per ``batch`` releases per stream, and one at the
    end of each run), so streams do not stall after every node.
``cached`` (:class:`CachedWorkspace`)
    one workspace per executor key, reused by later calls with the same key, at most
    ``max_per_key`` per key for launches in flight on different streams.
``per-call`` (:class:`PerCallWorkspace`)
    allocate, launch, wait until the stream passed the launch, free: the naive baseline.
    Its ``release_after`` waits (``release_after_async`` awaits) before it frees.
``stream-ordered`` (:class:`StreamOrderedWorkspace`)
    ``aclrtMemPoolMallocAsync`` on the launch's stream right before it and
    ``aclrtMemPoolFreeAsync`` right after: the stream maps and unmaps the block in its order, so
    no host function is needed; a full pool (64 MiB by default) is trimmed after the frees ran
    (Atlas A2 only; it does not pin, so programs using it are not captured).

Sizes.  Pieces carved out of one device allocation follow CANN's rule for user-managed
memory (``MemoryRules.piece_size``: ``ALIGN_UP(len, 32) + 32`` bytes on A2/A3/310P, 64-byte
aligned starts; docs/zh/api_ref/11-01_device_memory_malloc_and_free.md in hicann/runtime),
then round up to the strategy's ``granularity``.  Whole allocations need no padding:
``aclrtMalloc`` pads them itself.

Waiting never polls: a blocked ``acquire`` waits on the timeline (an event recorded behind
the host function that returns the block) or, when no block is on its way back, on a
condition that releases notify.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any

from .base import NO_WORKSPACE, Workspace, WorkspaceStats, WorkspaceStrategy
from .strategies import CachedWorkspace, PerCallWorkspace, StaticWorkspace, WorkspacePool
from .stream_ordered import StreamOrderedWorkspace

if TYPE_CHECKING:
    from ..device import Device

__all__ = [
    "NO_WORKSPACE",
    "STRATEGIES",
    "CachedWorkspace",
    "PerCallWorkspace",
    "StaticWorkspace",
    "StreamOrderedWorkspace",
    "Workspace",
    "WorkspacePool",
    "WorkspaceStats",
    "WorkspaceStrategy",
    "make_workspace_strategy",
    "pipeline_options",
    "workspace_strategy",
]

STRATEGIES = ("per-call", "cached", "pool", "static", "stream-ordered")


def make_workspace_strategy(device: Device, name: str, **options: Any) -> WorkspaceStrategy:
    """A new strategy by name: ``"per-call"``, ``"cached"``, ``"pool"``, ``"static"`` or
    ``"stream-ordered"`` (options go to it)."""
    classes: dict[str, type[WorkspaceStrategy]] = {
        "per-call": PerCallWorkspace, "cached": CachedWorkspace, "pool": WorkspacePool, "static": StaticWorkspace,
        "stream-ordered": StreamOrderedWorkspace}
    if name not in classes:
        raise ValueError(f"unknown workspace strategy {name!r}: expected one of {', '.join(STRATEGIES)}")
    return classes[name](device, **options)


def pipeline_options(name: str, pool_bytes: int, batch: int) -> dict[str, Any]:
    """The options a pipeline gives strategy ``name``: its ``pool_bytes`` bound the ``pool``
    (reporting ``batch`` releases per host function) and size the ``stream-ordered`` pool."""
    if name == "pool":
        return {"limit": pool_bytes or None, "batch": batch}
    if name == "stream-ordered":
        return {"max_size": pool_bytes}
    return {}


_SHARED: weakref.WeakKeyDictionary[Device, dict[str, WorkspaceStrategy]] = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def workspace_strategy(device: Device, name: str) -> WorkspaceStrategy:
    """The strategy ``name`` shared by every runner on ``device`` (created on first use)."""
    with _SHARED_LOCK:
        per_device = _SHARED.setdefault(device, {})
        strategy = per_device.get(name)
        if strategy is None:
            strategy = per_device[name] = make_workspace_strategy(device, name)
        return strategy
