"""Simulated aclnn executors: phase one's result, launched by phase two.

An executor is single-use unless made repeatable right after phase one; repeatable ones
take new tensor addresses and must be destroyed.  Launch checks, before anything is
enqueued: the executor is alive and not used up, the workspace is there and big enough,
and every tensor lies in live device memory, 32-byte aligned (via ``launch_kernel``).

The ``op_*`` functions are :class:`~aclpipe.backends.sim.backend.SimBackend`'s methods of the
same name, bound as they are (see :mod:`.core`).
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ...errors import InvalidArgumentError, error_from_code
from ...ops import OpPlan, get_op
from ...tensor import TensorDesc
from .engines import Cost
from .memory import Allocation, DeviceMemory

if TYPE_CHECKING:
    from .core import SimCore, SimDevice
    from .kernels import BoundKernel
    from .stream import SimStream

__all__ = ["ExecutorRegion", "KernelClock", "SimExecutor", "kernel_clock", "kernels_skipped", "op_destroy", "op_launch",
           "op_prepare", "op_set_repeatable", "op_set_tensor_address", "prepare_executor"]

_REGIONS = itertools.count(1)
#: The byte every executor region stands for: only ever read (launches) or written in the
#: sanitizer's books (destroy), never through numpy, so one read-only array serves them all
#: (a program makes one executor per node and slot).
_REGION_BYTE = np.zeros(1, np.uint8)
_REGION_BYTE.flags.writeable = False


class ExecutorRegion(Allocation):
    """The executor's plan as the device sees it: its launches read it, destroying it writes it,
    so the sanitizer can tell a destroy from a launch that may still run."""

    def __init__(self, op: str):
        super().__init__(next(_REGIONS), 1, _REGION_BYTE, label=f"aclnn{op} executor")

    def describe(self) -> str:
        return f"the {self.label} #{self.start}"


#: Phase one's result per call signature (op, every tensor's shape/strides/offset/dtype/format,
#: attributes): the catalog's checks and plans depend on nothing else (never on addresses), so
#: a program's second slot, and every node of the same shape, reuses the first's plan.
_PLANS: dict[Any, OpPlan] = {}
_PLANS_KEPT = 4096
#: A launch's modelled cost per (flops, bytes, cube), made once (at most ``_PLANS_KEPT`` kept).
_COSTS: dict[tuple[float, float, bool], Cost] = {}


_V = TypeVar("_V")


def _keep(cache: dict[Any, _V], key: Any, value: _V) -> _V:
    """Remember ``value`` under ``key``, dropping the oldest entry beyond ``_PLANS_KEPT``."""
    if len(cache) >= _PLANS_KEPT:
        cache.pop(next(iter(cache)))
    cache[key] = value
    return value


#: Types whose key is ``(type name, value)``, tested before the slower checks below.
_SCALARS = frozenset({int, float, str, bool, type(None)})
#: Mapping types recognized without the (slower) ``Mapping`` ABC check.
_MAPPINGS = frozenset({dict, MappingProxyType})


def _frozen(value: Any) -> Any:
    """``value`` as a hashable key (lists and tuples, dicts, arrays, scalars); TypeError otherwise."""
    kind = type(value)
    if kind in _SCALARS:
        return (kind.__name__, value)
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(item) for item in value)
    if kind in _MAPPINGS or isinstance(value, Mapping):
        if not value:
            return ()  # most nodes have no attributes: skip the sort
        return tuple(sorted((str(key), _frozen(item)) for key, item in value.items()))
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    hash(value)
    return (type(value).__name__, value)


def prepare_executor(op: str, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                     attrs: Mapping[str, Any]) -> SimExecutor:
    """Phase one on the simulator: the catalog op's checks, shape inference, workspace size
    and kernel, as a :class:`SimExecutor`.  A call whose signature passed before reuses its
    plan; one that fails is checked (and fails) again every time."""
    try:
        key: Any = (op, tuple([t.signature() if t is not None else None for t in inputs]),
                    tuple([t.signature() if t is not None else None for t in outputs]), _frozen(attrs))
        plan = _PLANS.get(key)
    except TypeError:  # an attribute that is not hashable: no reuse
        key, plan = None, None
    if plan is None:
        plan = get_op(op).prepare(list(inputs), list(outputs), dict(attrs))
        if key is not None:
            _keep(_PLANS, key, plan)
    return SimExecutor(op, plan, tuple(inputs), tuple(outputs))


class SimExecutor:
    """What the simulated phase one returns: the op's plan bound to its tensors, single-use
    until made repeatable, re-pointable and destroyable like an ``aclOpExecutor``."""

    # Slots: a prepared program holds one executor per node and slot.
    __slots__ = ("_bound", "destroyed", "inputs", "op", "outputs", "plan", "region", "repeatable", "used",
                 "workspace_size")

    def __init__(self, op: str, plan: OpPlan, inputs: tuple[TensorDesc | None, ...],
                 outputs: tuple[TensorDesc | None, ...]):
        self.op = op
        self.plan = plan
        self.workspace_size = plan.workspace_size
        #: Tuples, replaced whole when re-pointed: a bound kernel keeps the ones it was bound to.
        self.inputs = inputs
        self.outputs = outputs
        self.repeatable = False
        self.used = False
        self.destroyed = False
        self.region = ExecutorRegion(op)
        #: ((workspace, label), the kernel bound to them): what repeated launches reuse
        self._bound: tuple[tuple[int, str], BoundKernel] | None = None

    def _error(self, code: int, detail: str) -> InvalidArgumentError:
        error = error_from_code(code, f"aclnn{self.op}: {detail}", {"op": self.op})
        assert isinstance(error, InvalidArgumentError)
        return error

    def set_repeatable(self) -> None:
        if self.destroyed:
            raise self._error(561103, "the executor was destroyed")
        if self.used:
            raise self._error(561103, "aclSetAclOpExecutorRepeatable must be called right after phase one, "
                                      "before the executor is launched")
        self.repeatable = True

    def set_address(self, index: int, *, output: bool, address: int) -> None:
        if self.destroyed:
            raise self._error(561103, "the executor was destroyed")
        if not self.repeatable:
            raise error_from_code(561102, f"aclnn{self.op}: tensor addresses can only be re-pointed on a "
                                          "repeatable executor", {"op": self.op})
        tensors = self.outputs if output else self.inputs
        kind = "output" if output else "input"
        if not 0 <= index < len(tensors) or tensors[index] is None:
            raise self._error(161002, f"{kind} index {index} out of range (the op has {len(tensors)} {kind}s)")
        if address % 32:
            raise self._error(161002, f"{kind} {index} address {address:#x} is not 32-byte aligned")
        desc = tensors[index]
        assert desc is not None
        changed = (*tensors[:index], replace(desc, address=address), *tensors[index + 1:])
        if output:
            self.outputs = changed
        else:
            self.inputs = changed
        self._bound = None

    def check_signature(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None]) -> None:
        """Refuse tensors whose shape, strides, dtype or format changed since phase one."""
        for kind, frozen, given in (("input", self.inputs, inputs), ("output", self.outputs, outputs)):
            for index, (old, new) in enumerate(zip(frozen, given)):
                if (old is None) != (new is None) or (old and new and old.signature() != new.signature()):
                    raise self._error(161002, f"{kind} {index} changed since phase one: prepared for {old}, "
                                              f"launched with {new}; run phase one again for the new shape")

    def _bind(self, backend: SimCore, workspace: int, label: str) -> BoundKernel:
        """Check the tensors and workspace and build their numpy views: once per address set
        (views of device memory stay valid while it is live; addresses are never reused)."""
        inputs, outputs, plan = self.inputs, self.outputs, self.plan
        need = plan.workspace_size
        reads = [(t.address, t.extent_bytes) for t in inputs if t is not None and t.numel]
        writes = [(t.address, t.extent_bytes) for t in outputs if t is not None and t.numel]
        if need:
            writes.append((workspace, need))
        key = (plan.flops, plan.bytes, plan.cube)
        cost = _COSTS.get(key)
        if cost is None:  # one per op and shapes, not per node and slot
            cost = _keep(_COSTS, key, Cost(flops=plan.flops, bytes=plan.bytes, cube=plan.cube))
        run = _KernelRun(plan, backend.memory, inputs, outputs, workspace, label)
        return backend.bind_kernel(run, reads=reads, writes=writes, cost=cost, label=label, executor=self.region)

    @staticmethod
    def _views(memory: DeviceMemory, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
               workspace: int, need: int, label: str) -> list[Any]:
        """The numpy views a kernel gets: inputs, outputs and the workspace's bytes."""
        return [[memory.tensor(t, what=f"{label} input") if t is not None else None for t in inputs],
                [memory.tensor(t, what=f"{label} output") if t is not None else None for t in outputs],
                memory.bytes_at(workspace, need, what=f"{label} workspace") if need else None]

    def destroy(self) -> None:
        self._bound = None
        self.destroyed = True
        self.region.alive = False  # a launch still queued now fails as a use after free

    def launch(self, backend: SimCore, workspace: int, workspace_size: int, stream: SimStream,
               context: Mapping[str, Any] | None) -> None:
        if self.destroyed:
            raise self._error(561103, "the executor was destroyed")
        if self.used and not self.repeatable:
            raise self._error(561103, "this single-use executor was already launched; run phase one "
                                      "again, or make it repeatable right after phase one")
        need = self.plan.workspace_size
        if need > 0 and not workspace:
            raise self._error(161001, f"workspace is NULL but phase one asked for {need} bytes")
        if need > 0 and workspace_size < need:
            raise self._error(161002, f"workspace of {workspace_size} bytes is smaller than the {need} bytes "
                                      "phase one asked for")
        label = (context or {}).get("node") or f"aclnn{self.op}"
        bound = self._bound
        if bound is None or bound[0] != (workspace, label) or not bound[1].alive():
            bound = self._bound = ((workspace, label), self._bind(backend, workspace, label))
        backend.submit_kernel(stream, f"aclnn{self.op}", bound[1], {"op": self.op, **(context or {})})
        self.used = True


# -- the Backend protocol's op_* calls (SimBackend's methods, bound as they are: see .core) --
def op_prepare(device: SimDevice, op: str, inputs: Sequence[TensorDesc | None],
               outputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> SimExecutor:
    """``aclnnXxxGetWorkspaceSize``: phase one, an executor for ``op`` on these tensors."""
    device._check_open()
    return prepare_executor(op, inputs, outputs, attrs)


def op_set_repeatable(device: SimDevice, executor: SimExecutor) -> None:
    """``aclSetAclOpExecutorRepeatable``: right after phase one, before any launch."""
    executor.set_repeatable()


def op_set_tensor_address(device: SimDevice, executor: SimExecutor, index: int, *, output: bool,
                          address: int) -> None:
    """``aclSetInputTensorAddr`` / ``aclSetOutputTensorAddr`` on a repeatable executor."""
    executor.set_address(index, output=output, address=address)


def op_destroy(device: SimDevice, executor: SimExecutor) -> None:
    """``aclDestroyAclOpExecutor``.  Destroying an executor whose launch may still run is a
    use-after-free on the device (acl_meta.h): the sanitizer refuses it (the host has not
    learned the launch finished); without the sanitizer the launch fails when it runs."""
    if device.sanitizer is not None and not executor.destroyed:
        region = executor.region
        device.sanitizer.host_access(region, region.start, 1, write=True,
                                     what=f"aclDestroyAclOpExecutor of aclnn{executor.op}")
    executor.destroy()


def op_launch(device: SimDevice, executor: SimExecutor, workspace: int, workspace_size: int, stream: SimStream,
              context: Mapping[str, Any] | None = None) -> None:
    """``aclnnXxx``: phase two, the executor's kernel enqueued on ``stream``."""
    executor.launch(device, workspace, workspace_size, stream, context)


class _KernelRun:
    """One bound launch's kernel: its numpy views are built by the first run, on the stream's
    worker (preparing stays cheap), then reused, bound by the plan's ``bind`` when it has one
    (what depends only on the views, prepared once per node and slot).  A class rather than a
    closure for the reason :class:`~aclpipe.backends.sim.kernels._Guarded` gives (one object
    per node and slot)."""

    __slots__ = ("inputs", "label", "memory", "outputs", "plan", "run", "workspace")

    def __init__(self, plan: OpPlan, memory: DeviceMemory, inputs: tuple[TensorDesc | None, ...],
                 outputs: tuple[TensorDesc | None, ...], workspace: int, label: str):
        self.plan = plan
        self.memory = memory
        self.inputs = inputs
        self.outputs = outputs
        self.workspace = workspace
        self.label = label
        self.run: Callable[[], None] | None = None

    def __call__(self) -> None:
        run = self.run
        if run is None:
            run = self.run = self._bind()
        run()

    def _bind(self) -> Callable[[], None]:
        """The views, and the run over them: the plan's ``bind`` or its kernel on them."""
        plan = self.plan
        views = SimExecutor._views(self.memory, self.inputs, self.outputs, self.workspace, plan.workspace_size,
                                   self.label)
        if plan.bind is not None:
            return plan.bind(*views)
        return functools.partial(plan.kernel, *views)


class KernelClock:
    """What :func:`kernel_clock` measured: the wall time of each kernel run, in seconds, and
    which kernel it was (``kernels``, in the order they ran)."""

    def __init__(self) -> None:
        self.spans: list[float] = []  # list.append is atomic: workers of several streams add to it
        self.kernels: list[object] = []  # the kernel of each span (the same object at each launch of it)

    def fastest(self, kernels: Sequence[object]) -> float:
        """``kernels`` (some of :attr:`kernels`: one run's) at their fastest: the sum of each
        one's smallest span over every run clocked."""
        best: dict[int, float] = {}
        for kernel, span in zip(self.kernels, self.spans):
            best[id(kernel)] = min(best.get(id(kernel), span), span)
        return sum(best[id(kernel)] for kernel in kernels)


    @property
    def seconds(self) -> float:
        """The kernels' summed time (spans of concurrent streams may overlap)."""
        return sum(self.spans)

    @property
    def count(self) -> int:
        return len(self.spans)


@contextmanager
def kernel_clock() -> Iterator[KernelClock]:
    """Time every simulated kernel run (the op's numpy kernel, views included) while the block
    runs, on every device of the process: benchmarks split a launch's cost into the kernel's
    own time and the simulator's machinery around it.  Not reentrant; outside the block
    kernels run untimed, at no cost."""
    clock = KernelClock()
    untimed = _KernelRun.__call__

    def timed(run: _KernelRun) -> None:
        start = time.perf_counter()
        try:
            untimed(run)
        finally:
            clock.spans.append(time.perf_counter() - start)
            clock.kernels.append(run)

    with _kernel_body(timed):
        yield clock


@contextmanager
def kernels_skipped() -> Iterator[None]:
    """Skip every simulated kernel's body (the op's numpy kernel) while the block runs, on every
    device of the process: what is left of a run is the simulator's machinery around the
    kernels (streams, guards, events, copies, the host side), which benchmarks measure alone.
    Outputs are garbage meanwhile.  Not reentrant, and not together with :func:`kernel_clock`."""
    def skipped(run: _KernelRun) -> None:
        return None

    with _kernel_body(skipped):
        yield


@contextmanager
def _kernel_body(body: Callable[[_KernelRun], None]) -> Iterator[None]:
    """Every kernel run calls ``body`` instead of the op's kernel while the block runs."""
    usual = _KernelRun.__call__
    _KernelRun.__call__ = body  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        _KernelRun.__call__ = usual  # type: ignore[method-assign]
