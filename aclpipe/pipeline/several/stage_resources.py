"""Everything a stage pipeline holds on its devices, and the one way it is let go.

The several-device counterpart of :class:`~aclpipe.pipeline.resources.Resources`, with the
same two exits: :meth:`StageResources.release` frees it all now (``aclose`` after every
device passed every run); :meth:`StageResources.park` hands it over to be freed once every
device has passed what is enqueued (a dropped pipeline's ``weakref.finalize``, a cancelled
``aclose``), on whichever thread sees the last device get there, never blocking the event
loop.  Stages are freed together, not device by device: a later stage's streams wait on
events the earlier stages' programs own, so nothing goes before every device has passed it.
A device that never gets there keeps the whole bundle, never freed under it.

Reading a result and releasing take :attr:`StageResources.lock`, as on one device.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...errors import AclpipeError
from ..budget import close_streams

if TYPE_CHECKING:
    from ...runtime import Device, DeviceBuffer, Stream
    from ...runtime.completion.timeline import Timeline
    from ...runtime.workspaces import WorkspaceStrategy
    from ..cache import ProgramCache
    from .stage_program import StageProgram, StageSlot

__all__ = ["StageResources"]


class StageResources:
    """Per device: streams, a completion timeline, workspaces and constants; the stage programs
    of every signature; the devices the pipeline opened (closed last)."""

    def __init__(self, devices: Sequence[Device], opened: Sequence[Device], streams: Sequence[list[Stream]],
                 timelines: Sequence[Timeline], workspaces: Sequence[WorkspaceStrategy],
                 constants: Sequence[dict[str, DeviceBuffer]], cache: ProgramCache[StageProgram, StageSlot]):
        self.devices = list(devices)
        self.opened = list(opened)
        self.streams = list(streams)
        self.timelines = list(timelines)
        self.workspaces = list(workspaces)
        self.constants = list(constants)
        self.cache = cache
        self.lock = threading.Lock()  # reading a result versus freeing (release may run on a watcher thread)
        self.released = False
        self.parked = False
        self._waiting = 0  # parked: timelines not yet passed by their device

    @property
    def gone(self) -> bool:
        """Released or parked: results can no longer be read."""
        return self.released or self.parked

    def all_streams(self) -> list[Stream]:
        return [stream for per_device in self.streams for stream in per_device]

    def release(self) -> None:
        """Free everything now; every device has passed every run (or is closed).  Idempotent."""
        with self.lock:
            if self.released:
                return
            self.released = True
            try:
                for program in self.cache.clear():
                    program.close()
                for workspaces in self.workspaces:
                    workspaces.close()
                for per_device in self.constants:
                    for buffer in per_device.values():
                        buffer.close()
                    per_device.clear()
                for device, owned in zip(self.devices, self.streams):
                    close_streams(device, owned)  # booked when they were made
            finally:
                for timeline in self.timelines:
                    if not timeline.closed:
                        timeline.close()
                for device in self.opened:
                    device.close()

    def park(self) -> None:
        """Free everything once every device has passed what is enqueued, without waiting here."""
        if self.released or self.parked:
            return
        self.parked = True
        for device, workspaces in zip(self.devices, self.workspaces):
            if not device.closed:
                try:
                    workspaces.publish()  # batched releases must reach the device before its timeline closes
                except AclpipeError:
                    pass  # the device is going away: nothing it runs any more needs them
        open_timelines = [timeline for timeline in self.timelines if not timeline.closed]
        if not open_timelines:
            self.release()
            return
        with self.lock:
            self._waiting = len(open_timelines)
        for timeline in open_timelines:
            timeline.close(on_release=self._one_passed)

    def _one_passed(self) -> None:
        """A device has passed everything of this pipeline; the last one frees the bundle."""
        with self.lock:
            self._waiting -= 1
            last = not self._waiting
        if last:
            self.release()
