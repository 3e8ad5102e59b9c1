"""Kernels: a kernel's regions bound once, its guarded body, and its submission.

These are :class:`~aclpipe.backends.sim.backend.SimBackend`'s kernel methods, bound as they
are (see :mod:`.core`); the aclnn executor that launches them is :mod:`.executor`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import error_from_code
from .engines import Cost
from .memory import POISON_BYTE, Access, Allocation, Region
from .stream import kernel_task

if TYPE_CHECKING:
    from .core import SimDevice
    from .stream import SimStream

__all__ = ["BoundKernel", "bind_kernel", "launch_kernel", "padding_of", "submit_kernel"]

_NO_COST = Cost()


@dataclass(eq=False, slots=True)
class BoundKernel:
    """A kernel whose regions were checked once (:meth:`SimBackend.bind_kernel`): its guarded
    body, the regions the sanitizer and failures need, and its modelled time."""

    run: Callable[[], None]
    reads: tuple[Region, ...]
    writes: tuple[Region, ...]
    padding: tuple[Region, ...]
    seconds: float
    cores: int
    allocations: tuple[Allocation, ...]

    def alive(self) -> bool:
        """Whether every region still lies in a live allocation (addresses are never reused,
        so a live allocation still holds what was checked)."""
        return all(allocation.alive for allocation in self.allocations)


# -- kernels ----------------------------------------------------------------------------------
def launch_kernel(device: SimDevice, stream: SimStream, name: str, run: Callable[[], None], *,
                  reads: Sequence[Access] = (), writes: Sequence[Access] = (),
                  cost: Cost = _NO_COST, context: Mapping[str, Any] | None = None,
                  executor: Allocation | None = None) -> None:
    """Enqueue a kernel: ``run`` executes on the stream's worker after the declared regions
    are checked (live, in bounds, 32-byte aligned) and, with the sanitizer on, ordered.

    As on the device, the kernel may touch the bytes after each region it writes, up to
    ``ALIGN_UP(len, 32) + 32`` (11-01, ``aclrtMalloc``): they are overwritten with poison
    after it ran, so a neighbour placed without that padding is clobbered (and the
    sanitizer reports the read that would see it)."""
    device._check_stream(stream)
    label = (context or {}).get("node") or name
    bound = device.bind_kernel(run, reads=reads, writes=writes, cost=cost, label=label, executor=executor)
    device.submit_kernel(stream, name, bound, dict(context) if context else {})


def bind_kernel(device: SimDevice, run: Callable[[], None], *, reads: Sequence[Access] = (),
                writes: Sequence[Access] = (), cost: Cost = _NO_COST, label: str = "kernel",
                executor: Allocation | None = None) -> BoundKernel:
    """Check a kernel's regions (live, in bounds, 32-byte aligned) once; the result may be
    submitted again and again while :meth:`BoundKernel.alive` (a repeatable executor's
    launches), which checks each region in constant time."""
    # Tuples, not lists: a program keeps one bound kernel per node and slot, and a capture
    # stores these as they are (``tuple()`` of a tuple makes no copy).
    resolved_writes = device.memory.kernel_regions(writes, label, "write")
    resolved_reads = device.memory.kernel_regions(reads, label, "read")
    if executor is not None:
        resolved_reads += ((executor, executor.start, 1),)
    padding = device._padding(resolved_writes)
    timing = device.kernel_timings.get(cost)
    if timing is None:  # per cost: the same op and shapes cost the same on every launch
        cores = cost.tiling(device.spec)
        timing = device.kernel_timings[cost] = (cost.seconds(device.spec, cores), cores)
    # Each allocation once (a kernel's regions mostly share a few): checked before every run.
    allocations = tuple({id(a): a for a, _, _ in resolved_reads + resolved_writes}.values())
    return BoundKernel(_Guarded(run, resolved_reads, resolved_writes, padding, label, allocations),
                       resolved_reads, resolved_writes, padding, timing[0], timing[1], allocations)


def submit_kernel(device: SimDevice, stream: SimStream, name: str, bound: BoundKernel,
                  context: dict[str, Any]) -> None:
    """Enqueue a kernel bound by :meth:`bind_kernel` (the caller checked it is still alive);
    the task keeps ``context`` as it is (the callers make a new one per launch)."""
    device._check_stream(stream)
    task = kernel_task(name, bound.run, bound.seconds, bound.cores, context)
    device.submit_task(stream, task, reads=bound.reads, writes=bound.writes, padding=bound.padding)


def padding_of(writes: Sequence[Region]) -> tuple[Region, ...]:
    """The bytes past each region a kernel writes that it may touch: up to
    ``ALIGN_UP(len, 32) + 32`` (11-01, ``aclrtMalloc`` constraints), within the allocation."""
    padding = []
    for allocation, address, nbytes in writes:
        # align_up(max(nbytes, 1), 32) + 32, inline: this runs for every output of every kernel bound
        end = min(address + ((nbytes if nbytes > 1 else 1) + 31) // 32 * 32 + 32,
                  allocation.start + allocation.data.nbytes)
        if end > address + nbytes:
            padding.append((allocation, address + nbytes, end - address - nbytes))
    return tuple(padding)


# -- the guarded body -----------------------------------------------------------------------------
_POISON = bytes([POISON_BYTE])


def _bytes_of(allocation: Allocation, address: int, nbytes: int) -> memoryview:
    """The bytes ``[address, address + nbytes)`` of ``allocation``, writable in place."""
    offset = address - allocation.start
    return allocation.data.data[offset:offset + nbytes]


class _Guarded:
    """A kernel body refusing freed memory (AI-core read/write traps, 25-01_aclError.md) and
    scribbling over the padding it may touch once it ran.

    A class rather than a closure: a prepared program holds one per node and slot, and one
    object with slots is what the cyclic collector then traverses instead of a function, its
    cells and the lists they hold."""

    __slots__ = ("_allocations", "_scribbles", "label", "padding", "reads", "run", "writes")

    def __init__(self, run: Callable[[], None], reads: tuple[Region, ...], writes: tuple[Region, ...],
                 padding: tuple[Region, ...], label: str, allocations: tuple[Allocation, ...]):
        self.run = run
        self.reads = reads
        self.writes = writes
        self.padding = padding
        self.label = label
        self._allocations = allocations  # those of ``reads`` and ``writes``, each once
        # The padding's bytes and their poison, made at first run.  A memoryview slice assigned a
        # bytes object of its length: 0.25 µs where ndarray.fill took 0.33 (run after every kernel).
        self._scribbles: list[tuple[Allocation, memoryview, bytes]] | None = None

    def __call__(self) -> None:
        for allocation in self._allocations:
            if not allocation.alive:
                self._trap()
        self.run()
        scribbles = self._scribbles
        if scribbles is None:
            scribbles = self._scribbles = [(allocation, _bytes_of(allocation, address, nbytes), _POISON * nbytes)
                                           for allocation, address, nbytes in self.padding]
        for allocation, scribble, poison in scribbles:
            if allocation.alive:
                scribble[:] = poison

    def _trap(self) -> None:
        """Raise the trap for the first region (reads first) in freed memory."""
        for regions, code, kind in ((self.reads, 507042, "reads"), (self.writes, 507043, "writes")):
            for allocation, _, _ in regions:
                if not allocation.alive:
                    raise error_from_code(code, f"{self.label} {kind} {allocation.describe()}, freed while the "
                                                "kernel was queued (use after free)")
