"""The task path: how a task enters a stream, meets a planted fault, and holds its engine.

These are :class:`~aclpipe.backends.sim.backend.SimBackend`'s methods ``submit_task``,
``submit_control``, ``run_faults`` and ``execute``, bound as they are (see :mod:`.core`): every
copy, kernel and event passes here, and a benchmark counts about 1 µs of the simulator's
machinery per kernel, so nothing wraps them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ...errors import error_from_code
from .callbacks import in_host_function
from .stream import CONTROL, KERNEL, MEMSET, Task, describe_task

if TYPE_CHECKING:
    from .core import SimCore, SimDevice
    from .engines import DeviceSpec
    from .memory import Region
    from .stream import SimStream

__all__ = ["OP_TIMEOUT_STEPS", "effective_op_timeout", "execute", "run_faults", "submit_control", "submit_task"]

#: The longest op timeout is ``interval * 254`` (12_execution_control.md, aclrtGetOpTimeOutInterval).
OP_TIMEOUT_STEPS = 254


def effective_op_timeout(spec: DeviceSpec, requested: float | None) -> float:
    """The op execute timeout in force, in seconds, as ``aclrtSetOpExecuteTimeOut`` sets it
    (12_execution_control.md): ``None`` keeps the product's default, 0 asks for the maximum,
    anything else is rounded up to a multiple of the hardware's interval (the maximum / 254),
    at most the maximum."""
    if requested is None:
        return spec.op_execute_timeout
    if requested < 0:
        raise ValueError(f"op_execute_timeout must be >= 0 seconds (0: the maximum), got {requested}")
    maximum = spec.op_execute_timeout_max
    if requested == 0:
        return maximum
    interval = maximum / OP_TIMEOUT_STEPS
    return min(math.ceil(requested / interval - 1e-9) * interval, maximum)


def submit_task(device: SimDevice, stream: SimStream, task: Task, reads: Sequence[Region] = (),
                writes: Sequence[Region] = (), padding: Sequence[Region] = ()) -> None:
    """Enqueue ``task`` on ``stream`` (or add it to the capture or task-group update the stream
    is in), its regions checked by the sanitizer first when it is on."""
    task.writes = writes
    if in_host_function():  # the message is made only when it is needed: every task passes here
        device.refuse_in_host_function(f"a launch ({describe_task(task)})")
    if stream.capture is not None:
        device.captures.add(stream, task, reads, writes, padding)
        return
    if stream.update is not None:
        device.captures.update_add(stream, task, reads, writes, padding)
        return
    stream.check_submittable()
    if device.sanitizer is not None:
        clock = device.sanitizer.enqueue(stream.name)
        task.snapshot = clock
        if reads or writes or padding:  # a record, wait or host function touches no memory
            regions = [(allocation, address, nbytes, False) for allocation, address, nbytes in reads]
            regions += [(allocation, address, nbytes, True) for allocation, address, nbytes in writes]
            device.sanitizer.access_all(regions, actor=stream.name, clock=clock, what=describe_task(task),
                                        padding=padding)
    stream.submit(task)


def submit_control(device: SimDevice, stream: SimStream, name: str, run: Callable[[], None]) -> None:
    """Enqueue bookkeeping the stream performs in order (an event reset, a task update)."""
    device.refuse_in_host_function(f"a launch ({name})")
    stream.check_submittable()
    if device.sanitizer is not None:
        task = Task(CONTROL, name, run, snapshot=device.sanitizer.enqueue(stream.name))
    else:
        task = Task(CONTROL, name, run)
    stream.submit(task)


def run_faults(device: SimDevice, task: Task, stream: SimStream) -> bool:
    """Apply a planted fault to ``task``; True when the task must not run."""
    context = task.context
    replay = stream.graph_context  # a model's task: its replay's run context too
    if replay:
        context = {**(context or {}), **replay}
    rule = device.faults.check(task.kind if task.kind != MEMSET else "copy", task.name, context)
    if rule is None:
        return False
    if rule.hang:
        # A hung kernel fails once it ran past the op execute timeout, as on the device
        # (aclrtSetOpExecuteTimeOut, 12_execution_control.md); copies hang until released.
        limit = device.op_execute_timeout * device.engines.time_scale if task.kind == KERNEL else math.inf
        deadline = time.monotonic() + limit
        while not rule.released.wait(0.02):  # polled: an abort stops a hung task
            if stream.interrupted():
                return True
            if time.monotonic() >= deadline:
                stream._fail(task, error_from_code(507014, f"kernel {task.name} ran past the op execute timeout "
                                                           f"of {device.op_execute_timeout:g} s "
                                                           "(aclrtSetOpExecuteTimeOut, 12_execution_control.md)"))
                return True
        return False
    detail = f"injected fault in {task.kind} {task.name}"
    stream._fail(task, error_from_code(rule.code or 507015, detail))
    return True


def execute(device: SimDevice, task: Task) -> None:
    """Run ``task`` on the stream's worker, holding its engine for the modelled time when the
    timing model is on."""
    assert task.run is not None
    engines = device.engines
    if not engines.timing:
        task.run()
        return
    if task.engine == "compute":
        engines.cores.acquire(task.cores)
        try:
            _mark_began(device, task)
            engines.hold("compute", task.seconds, task.run)
        finally:
            engines.cores.release(task.cores)
        return
    if task.engine.startswith("peer:"):
        lock = device.peers.link(int(task.engine[len("peer:"):]))
    else:
        lock = engines.h2d if task.engine == "h2d" else engines.d2h
    with lock:
        _mark_began(device, task)
        engines.hold(task.engine, task.seconds, task.run)


def _mark_began(device: SimCore, task: Task) -> None:
    # Only a trace needs to tell waiting for an engine from holding it.
    if device.recorder is not None:
        task.began = device.engines.now()
