"""The pipeline: a graph prepared up front and run asynchronously on a device.

- :mod:`.pipeline`: the public :class:`Pipeline` (orchestration: accept, start, finish, close).
- :mod:`.prepare`: bind -> plan -> upload constants -> :class:`Program` -> reserve -> capture.
- :mod:`.program`: prepared programs (per slot: arena, staging, events, bound executors).
- :mod:`.slots`: the slot queue, the FIFO enqueue lock, run tickets.
- :mod:`.faults`: fault windows and which runs raise :class:`~aclpipe.ExecutionError`.
"""

from .faults import Fault, FaultLog
from .pipeline import Pipeline, PipelineStats
from .prepare import Preparer
from .program import Program, Slot, Step
from .slots import FifoLock, SlotQueue, Ticket

__all__ = ["Fault", "FaultLog", "FifoLock", "Pipeline", "PipelineStats", "Preparer", "Program", "Slot",
           "SlotQueue", "Step", "Ticket"]
