"""Everything a pipeline holds on the device, and the one way it is let go.

A run in flight reads and writes its slot's arena and staging, the constants, workspaces and
events, on streams whose completion host functions write into the timeline's counters and
pipe.  All of that must live until the device has passed it, whatever happens to the
:class:`~aclpipe.pipeline.Pipeline` object: closed, dropped without ``aclose()``, or with
its ``aclose()`` cancelled on a hung device.  So it lives here, in one bundle that holds no
reference back to the pipeline, and leaves in one of two ways:

- :meth:`Resources.release` frees it all now (``aclose`` after the device passed every run);
- :meth:`Resources.park` hands it to the timeline (:meth:`Timeline.close` with a release
  callback): freed once the device has passed every host function enqueued, by whichever
  thread sees that first (a watcher thread waits on the device meanwhile).  The pipeline's
  ``weakref.finalize`` parks (never ``__del__``), and so does a cancelled ``aclose``; neither
  blocks the event loop, and on a device that never gets there the bundle is kept, never
  freed under it.

Reading a result and releasing take :attr:`Resources.lock`, so a caller that wakes as the
device passes its run either reads the staging before it is freed or gets
:class:`ClosedResourceError`, never freed memory.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ..errors import AclpipeError
from .budget import close_streams

if TYPE_CHECKING:
    from ..runtime import Device, Stream
    from ..runtime.completion.timeline import Timeline
    from ..runtime.workspaces import WorkspaceStrategy
    from .cache import ProgramCache
    from .prepare import Preparer
    from .program import Program, Slot

__all__ = ["Resources"]


class Resources:
    """A pipeline's device-side state: streams, timeline, workspaces, constants and programs."""

    def __init__(self, device: Device, owns_device: bool, streams: list[Stream], timeline: Timeline,
                 workspaces: WorkspaceStrategy, preparer: Preparer, cache: ProgramCache[Program, Slot]):
        self.device = device
        self.owns_device = owns_device
        self.streams = streams
        self.timeline = timeline
        self.workspaces = workspaces
        self.preparer = preparer
        self.cache = cache
        self.lock = threading.Lock()  # reading a result versus freeing (release may run on a watcher thread)
        self.released = False  # set as release() starts; it holds `lock` until everything is freed
        self.parked = False

    def release(self) -> None:
        """Free everything now; the device has passed every run (or is closed).  Idempotent."""
        with self.lock:
            if self.released:
                return
            self.released = True
            try:
                for program in self.cache.clear():
                    program.close()
                self.workspaces.close()
                self.preparer.close()
                close_streams(self.device, self.streams)  # booked in the device's budget when made
            finally:
                if not self.timeline.closed:
                    self.timeline.close()
                if self.owns_device:
                    self.device.close()

    def park(self) -> None:
        """Free everything once the device has passed what is enqueued, without waiting here."""
        if self.released or self.parked:
            return
        self.parked = True
        if not self.device.closed:
            try:
                self.workspaces.publish()  # batched releases must reach the device before the timeline closes
            except AclpipeError:
                pass  # the device is going away: nothing it runs any more needs them
        if self.timeline.closed:  # closed by an earlier release attempt: nothing left to wait for
            self.release()
        else:
            self.timeline.close(on_release=self.release)
