"""The pipeline: a graph prepared up front and run asynchronously on a device.

- :mod:`.pipeline`: the public :class:`Pipeline` (orchestration: accept, start, finish, close).
- :mod:`.prepare`: bind -> plan -> upload constants -> :class:`Program` -> reserve -> capture.
- :mod:`.program`: prepared programs (per slot: arena, staging, events, bound executors).
- :mod:`.slots`: the slot queue, the FIFO enqueue lock, run tickets.
- :mod:`.faults`: fault windows and which runs raise :class:`~aclpipe.ExecutionError`.
- :mod:`.replicas`: one graph on several devices, runs to the least loaded (``device=[...]``).
- :mod:`.devices`: what pipelines over several devices share (opening them, adding up counters).
- :mod:`.stages`, :mod:`.stage_program`: one graph cut across devices (``split="stages"``).
"""

from .faults import Fault, FaultLog
from .pipeline import Pipeline, PipelineStats
from .prepare import Preparer
from .program import Program, Slot, Step
from .replicas import DeviceStats, ReplicaPipeline, ReplicaStats
from .slots import FifoLock, SlotQueue, Ticket
from .stages import StagePipeline, StageStats

__all__ = ["DeviceStats", "Fault", "FaultLog", "FifoLock", "Pipeline", "PipelineStats", "Preparer", "Program",
           "ReplicaPipeline", "ReplicaStats", "Slot", "SlotQueue", "StagePipeline", "StageStats", "Step", "Ticket"]
