"""Several devices: one graph replicated on each, or cut into one stage per device.

- :mod:`.replicas`: :class:`ReplicaPipeline`, the whole graph on each device, each run sent to
  the least loaded (``device=[...]``); it drives one single-device
  :class:`~aclpipe.pipeline.Pipeline` per device through the
  :class:`~aclpipe.pipeline.engine.Engine` steps.
- :mod:`.stages`, :mod:`.stage_program`, :mod:`.stage_resources`: :class:`StagePipeline`, one
  graph cut across devices (``split="stages"``), its programs wired by peer copies, and what it
  holds on the devices.
- :mod:`.devices`: what both share (opening the devices, adding up counters).

This wing stands above :mod:`aclpipe.pipeline.pipeline`, which imports none of it: each
pipeline here registers itself under its ``split`` by its class statement, and
``Pipeline(graph, device=[...])`` makes the registered one.
"""

from .replicas import DeviceStats, ReplicaPipeline, ReplicaStats
from .stages import StagePipeline, StageStats

__all__ = ["DeviceStats", "ReplicaPipeline", "ReplicaStats", "StagePipeline", "StageStats"]
