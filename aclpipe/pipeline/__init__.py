"""The pipeline: a graph prepared up front and run asynchronously on a device.

- :mod:`.pipeline`: the public :class:`Pipeline` (orchestration: accept, start, finish, close).
- :mod:`.engine`: those steps named once (:class:`~aclpipe.pipeline.engine.Engine`), for pipelines
  that drive pipelines.
- :mod:`.prepare`: bind -> plan -> upload constants -> :class:`Program` -> reserve -> capture.
- :mod:`.program`: prepared programs (per slot: arena, staging, events, bound executors).
- :mod:`.slots`: the slot queue, the FIFO enqueue lock, run tickets.
- :mod:`.faults`: fault windows and which runs raise :class:`~aclpipe.ExecutionError`.
- :mod:`.resources`: what the device touches, freed by ``aclose`` or once the device passed it.
- :mod:`.cache`: programs per input signature, least recently used evicted (``max_programs``).
- :mod:`.batches`: shape buckets (pad, run, slice) and batches with no rows.
- :mod:`.affinity`: one thread and event loop at a time; others get :class:`~aclpipe.EventLoopError`.
- :mod:`.oneshot`: :func:`run`, the blocking one-shot for scripts (``aclpipe.run(graph, x=batch)``).
- :mod:`.stats`: :class:`PipelineStats`.
- :mod:`.several`: several devices: :mod:`~.several.replicas` (one graph on each, runs to the least
  loaded: ``device=[...]``), :mod:`~.several.stages` and :mod:`~.several.stage_program` (one graph
  cut across devices: ``split="stages"``), :mod:`~.several.devices` (what both share).
"""

from .affinity import LoopAffinity
from .batches import ShapeBuckets, empty_result
from .cache import CacheEntry, LruDict, ProgramCache
from .faults import Fault, FaultLog
from .oneshot import load_model, run
from .pipeline import Pipeline
from .prepare import Preparer
from .program import Program, Slot, Step
from .resources import Resources
from .several import DeviceStats, ReplicaPipeline, ReplicaStats, StagePipeline, StageStats
from .slots import FifoLock, SlotQueue, Ticket
from .stats import PipelineStats

__all__ = ["CacheEntry", "DeviceStats", "Fault", "FaultLog", "FifoLock", "LoopAffinity", "LruDict", "Pipeline",
           "PipelineStats", "Preparer", "Program", "ProgramCache", "ReplicaPipeline", "ReplicaStats", "Resources",
           "ShapeBuckets", "Slot", "SlotQueue", "StagePipeline", "StageStats", "Step", "Ticket", "empty_result",
           "load_model", "run"]
