"""What the simulator's parts see of the device: two small interfaces, so no part imports the facade.

:class:`~aclpipe.backends.sim.backend.SimBackend` is a facade: it owns the device's state (its
memory, engines, sanitizer, faults, streams and events) and its methods are the functions of
the modules by concept (:mod:`.memory_ops`, :mod:`.stream_ops`, :mod:`.kernels`,
:mod:`.host_ops`, :mod:`.tasks`, :mod:`.optional`), bound as they are (no call layer is added
on the task path, which a benchmark counts at about 1 µs per kernel).  Those modules and the
satellites (:mod:`.stream`, :mod:`.capture`, :mod:`.executor`, :mod:`.peer`) type against the
protocols here instead of importing ``backend.py``, which imports them all: the circle it
closed with four of them (ARCHITECTURE.md 3.1) stays open, and a test keeps it so.

- :class:`SimCore` is what the satellites use: the device's parts and the task path.
- :class:`SimDevice` adds what the facade's own modules use: the registries' checks, the
  capture and peer bookkeeping, and the hooks the conformance kit's broken backends override
  (the names with an underscore: ``tests/testing/test_conformance.py`` subclasses
  :class:`SimBackend` and replaces them, so the modules call them through the device).

Nothing here runs: the imports are for the type checker only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..protocol import Capabilities, MemcpyKind
    from .callbacks import CallbackThread
    from .capture import Captures
    from .conditional import Conditionals
    from .engines import Cost, DeviceSpec, Engines
    from .event import SimEvent
    from .faults import FaultInjector
    from .kernels import BoundKernel
    from .memory import Access, Allocation, DeviceMemory, Region
    from .mempool import MemPools
    from .peer import PeerLinks
    from .recorder import TraceRecorder
    from .sanitizer import Sanitizer
    from .stream import SimStream, Task

__all__ = ["SimCore", "SimDevice"]


class SimCore(Protocol):
    """The device as its satellites see it: its parts, and the task path they submit to."""

    index: int
    spec: DeviceSpec
    closed: bool
    memory: DeviceMemory
    engines: Engines
    sanitizer: Sanitizer | None
    faults: FaultInjector
    #: Installed by ``trace_begin``; stream workers record every task while it is set.
    recorder: TraceRecorder | None
    #: Once a stream is set to ACL_STOP_ON_FAILURE, every stream of the context stops on failure.
    stop_on_failure: bool

    @staticmethod
    def device_count() -> int: ...

    def host_thread(self) -> CallbackThread: ...

    def model_stream(self, name: str) -> SimStream: ...

    def stream_destroy(self, stream: SimStream) -> None: ...

    def bind_kernel(self, run: Callable[[], None], *, reads: Sequence[Access] = (), writes: Sequence[Access] = (),
                    cost: Cost = ..., label: str = "kernel", executor: Allocation | None = None) -> BoundKernel: ...

    def submit_kernel(self, stream: SimStream, name: str, bound: BoundKernel, context: dict[str, Any]) -> None: ...

    def submit_task(self, stream: SimStream, task: Task, reads: Sequence[Region] = (),
                    writes: Sequence[Region] = (), padding: Sequence[Region] = ()) -> None: ...

    def submit_control(self, stream: SimStream, name: str, run: Callable[[], None]) -> None: ...

    def run_faults(self, task: Task, stream: SimStream) -> bool: ...

    def execute(self, task: Task) -> None: ...

    def _live_bytes(self, allocation: Allocation, offset: int, nbytes: int, what: str) -> Any: ...


class SimDevice(SimCore, Protocol):
    """The device as the facade's own modules see it: :class:`SimCore`, the registries' checks,
    the capture and peer bookkeeping, and the hooks the conformance kit overrides."""

    capabilities: Capabilities
    #: Seconds of device time a kernel may run before it fails with 507014.
    op_execute_timeout: float
    #: Seconds an event wait may block before it fails with 107020 (0: never).
    op_wait_timeout: float
    captures: Captures
    peers: PeerLinks
    #: Cost -> (modelled seconds, cores) on this device's spec.
    kernel_timings: dict[Cost, tuple[float, int]]
    #: The stream-ordered allocator's pools (:mod:`.mempool`).
    mempools: MemPools
    #: Conditional tasks' handles and sub-models (:mod:`.conditional`).
    conditionals: Conditionals

    def host_func(self, stream: SimStream, fn: Callable[[], None], name: str = "") -> None: ...

    def all_streams(self) -> list[SimStream]: ...

    def stream_sync(self, stream: SimStream, timeout_ms: int = -1) -> None: ...

    def _check_open(self) -> None: ...

    def _check_stream(self, stream: SimStream) -> None: ...

    def _check_event(self, event: SimEvent) -> None: ...

    def refuse_in_host_function(self, what: str) -> None: ...

    def _check_copy_rules(self, dst: int, src: int, kind: MemcpyKind, what: str) -> None: ...

    def _padding(self, writes: Sequence[Region]) -> tuple[Region, ...]: ...
