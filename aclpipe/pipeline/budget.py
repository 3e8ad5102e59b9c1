"""Streams are a budget of the device, like its memory and events.

A device allows a fixed number of streams (``06_stream_management.md``, ``aclrtCreateStream``:
1984 on Atlas A2/A3, 1024 on inference cards, 512 on 200I/500 A2), and a captured model holds
streams of its own besides the ones it was captured from ("captured streams consume stream
resources", ``15_model_running_instance__management.md``): each captured slot one per stream
its run uses, plus its replay stream.  A pipeline that keeps many programs (a server meeting
many shapes, several pipelines on one device, many buckets) runs out of streams long before
memory, which is where CANN users meet capture failing (vllm-ascend hand-tunes a budget of
1,800-1,920 captured graphs).

So every pipeline on a device books what it holds in that device's :class:`StreamBudget`:
its own streams, and each captured program's model streams.  Before capturing, a program asks
for its model streams; when they do not fit, the budget asks the pipelines on the device to
free idle programs, least recently used first (their runs all done); when nothing idle is
left, the program is prepared uncaptured (it runs from launch tables, just as right and
overlapped, at a little more host cost per run) instead of failing.  A capture that fails for
lack of streams all the same (streams made outside any pipeline) takes the same way out.

The budget is the device's, not a pipeline's: one per :class:`~aclpipe.runtime.Device`
object, shared by every pipeline given that object.  Where the backend counts the streams it
has (``live_streams``: the simulator, captured models' own included), that count is taken
when it is the larger, so streams made outside pipelines count too; elsewhere they are not
seen here, and the fallback covers them.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from ..errors import BackendError

if TYPE_CHECKING:
    from ..runtime import Device, Stream

#: ACL_ERROR_RT_NO_STREAM_RESOURCE: the device has no stream left.
_NO_STREAM_RESOURCE = 207008

__all__ = ["StreamBudget", "StreamBudgetWarning", "StreamHolder", "close_streams", "make_streams"]


class StreamHolder(Protocol):
    """What the budget asks of a pipeline on the device."""

    def oldest_idle_capture(self) -> int | None:
        """When its least recently used idle captured program was last used (None: none)."""

    def evict_oldest_capture(self) -> bool:
        """Free that program; False when it cannot now (in use by another thread)."""


class StreamBudgetWarning(RuntimeWarning):
    """A program was prepared uncaptured: the device had no streams left for its capture and
    no idle program to free (issued once per pipeline; ``stats().starved`` counts them)."""

_BUDGETS: weakref.WeakKeyDictionary[Device, StreamBudget] = weakref.WeakKeyDictionary()
_BUDGETS_LOCK = threading.Lock()


class StreamBudget:
    """The streams pipelines hold on one device, against the device's limit.

    Attributes
    ----------
    limit:
        Streams the device allows (``capabilities.max_streams``).
    held:
        Streams booked by pipelines: their own and their captured programs' model streams.
    """

    def __init__(self, limit: int, live: Callable[[], int] | None = None):
        self.limit = limit
        self.held = 0
        self._live = live  # the backend's own count of live streams, where it has one
        self._lock = threading.Lock()
        self._holders: list[weakref.ref[StreamHolder]] = []  # the pipelines on the device

    @classmethod
    def of(cls, device: Device) -> StreamBudget:
        """The budget of ``device`` (made on first use)."""
        with _BUDGETS_LOCK:
            budget = _BUDGETS.get(device)
            if budget is None:
                backend = device.backend
                live = (lambda: int(backend.live_streams)) if hasattr(backend, "live_streams") else None
                budget = _BUDGETS[device] = cls(device.capabilities.max_streams, live)
            return budget

    @property
    def in_use(self) -> int:
        """Streams in use on the device: those booked, or the backend's count when larger."""
        return max(self.held, self._live()) if self._live is not None else self.held

    @property
    def left(self) -> int:
        return self.limit - self.in_use

    def book(self, count: int) -> None:
        """Book ``count`` streams made already (a pipeline's own)."""
        with self._lock:
            self.held += count

    def release(self, count: int) -> None:
        with self._lock:
            self.held = max(0, self.held - count)

    def register(self, holder: StreamHolder) -> None:
        """Let the budget free idle programs of ``holder`` (a pipeline; held weakly: a dropped
        pipeline leaves the budget by itself)."""
        with self._lock:
            self._holders.append(weakref.ref(holder))

    def reserve(self, count: int) -> bool:
        """Book ``count`` more streams if they fit, freeing idle programs that hold streams, the
        least recently used on the device first, until they do.  False, booking nothing, when
        they cannot fit."""
        while True:
            with self._lock:
                if self.in_use + count <= self.limit:
                    self.held += count
                    return True
            if not self._evict_oldest():
                return False

    def _evict_oldest(self) -> bool:
        """Free the least recently used idle program holding streams, of any pipeline here."""
        with self._lock:
            holders = [holder for holder in (reference() for reference in self._holders) if holder is not None]
            self._holders = [weakref.ref(holder) for holder in holders]
        while holders:
            ages = [(holder.oldest_idle_capture(), index) for index, holder in enumerate(holders)]
            found = [(age, index) for age, index in ages if age is not None]
            if not found:
                return False
            _, index = min(found)
            if holders[index].evict_oldest_capture():
                return True
            del holders[index]  # busy meanwhile (another thread): ask the others
        return False

    def __repr__(self) -> str:
        return f"<StreamBudget {self.held} of {self.limit} streams held>"


def make_streams(device: Device, count: int, *, optional: bool = False) -> list[Stream]:
    """``count`` new streams on ``device``, booked in its budget until :func:`close_streams`;
    room is made first, freeing idle captured programs of the pipelines on the device.

    When they do not fit, the device's own refusal (207008) is raised, or, with ``optional``
    (streams a pipeline can do without, such as replay streams), none are made (``[]``).
    All or nothing either way."""
    budget = StreamBudget.of(device)
    reserved = budget.reserve(count)
    if optional and not reserved:
        return []
    made: list[Stream] = []
    try:
        for _ in range(count):
            made.append(device.create_stream())
            if not reserved:  # the device says how many it allows: book them as they come
                budget.book(1)
    except BaseException as error:
        for stream in made:
            stream.close()
        budget.release(count if reserved else len(made))
        if optional and isinstance(error, BackendError) and error.code == _NO_STREAM_RESOURCE:
            return []  # streams made outside any pipeline took the room
        raise
    return made


def close_streams(device: Device, streams: list[Stream]) -> None:
    """Close streams :func:`make_streams` made, and give them back to the budget."""
    for stream in streams:
        stream.close()
    StreamBudget.of(device).release(len(streams))
