"""Simulated aclnn executors: phase one's result, launched by phase two.

An executor is single-use unless made repeatable right after phase one; repeatable ones
take new tensor addresses and must be destroyed.  Launch checks, before anything is
enqueued: the executor is alive and not used up, the workspace is there and big enough,
and every tensor lies in live device memory, 32-byte aligned (via ``launch_kernel``).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import InvalidArgumentError, error_from_code
from ...ops import OpPlan, get_op
from ...tensor import TensorDesc
from .engines import Cost
from .memory import Allocation

if TYPE_CHECKING:
    from .backend import SimBackend
    from .stream import SimStream

__all__ = ["ExecutorRegion", "SimExecutor", "prepare_executor"]

_REGIONS = itertools.count(1)


class ExecutorRegion(Allocation):
    """The executor's plan as the device sees it: its launches read it, destroying it writes it,
    so the sanitizer can tell a destroy from a launch that may still run."""

    def __init__(self, op: str):
        super().__init__(next(_REGIONS), 1, np.zeros(1, np.uint8), label=f"aclnn{op} executor")

    def describe(self) -> str:
        return f"the {self.label} #{self.start}"


def prepare_executor(op: str, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                     attrs: Mapping[str, Any]) -> SimExecutor:
    """Phase one on the simulator: the catalog op's checks, shape inference, workspace size
    and kernel, as a :class:`SimExecutor`."""
    spec = get_op(op)
    plan = spec.prepare(list(inputs), list(outputs), dict(attrs))
    return SimExecutor(op, plan, list(inputs), list(outputs))


class SimExecutor:
    """What the simulated phase one returns: the op's plan bound to its tensors, single-use
    until made repeatable, re-pointable and destroyable like an ``aclOpExecutor``."""
    def __init__(self, op: str, plan: OpPlan, inputs: list[TensorDesc | None], outputs: list[TensorDesc | None]):
        self.op = op
        self.plan = plan
        self.workspace_size = plan.workspace_size
        self.inputs = inputs
        self.outputs = outputs
        self.repeatable = False
        self.used = False
        self.destroyed = False
        self.region = ExecutorRegion(op)

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
        tensors[index] = replace(desc, address=address)

    def check_signature(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None]) -> None:
        """Refuse tensors whose shape, strides, dtype or format changed since phase one."""
        for kind, frozen, given in (("input", self.inputs, inputs), ("output", self.outputs, outputs)):
            for index, (old, new) in enumerate(zip(frozen, given)):
                if (old is None) != (new is None) or (old and new and old.signature() != new.signature()):
                    raise self._error(161002, f"{kind} {index} changed since phase one: prepared for {old}, "
                                              f"launched with {new}; run phase one again for the new shape")

    def destroy(self) -> None:
        self.destroyed = True
        self.region.alive = False  # a launch still queued now fails as a use after free

    def launch(self, backend: SimBackend, workspace: int, workspace_size: int, stream: SimStream,
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
        inputs, outputs, plan, memory = list(self.inputs), list(self.outputs), self.plan, backend.memory
        label = (context or {}).get("node") or f"aclnn{self.op}"

        def run() -> None:
            in_views = [memory.tensor(t, what=f"{label} input") if t is not None else None for t in inputs]
            out_views = [memory.tensor(t, what=f"{label} output") if t is not None else None for t in outputs]
            scratch = memory.bytes_at(workspace, need, what=f"{label} workspace") if need else None
            plan.kernel(in_views, out_views, scratch)

        reads = [(t.address, t.extent_bytes) for t in inputs if t is not None and t.numel]
        writes = [(t.address, t.extent_bytes) for t in outputs if t is not None and t.numel]
        if need:
            writes.append((workspace, need))
        full_context = {"op": self.op, **dict(context or {})}
        cost = Cost(flops=plan.flops, bytes=plan.bytes, cube=plan.cube)
        backend.launch_kernel(stream, f"aclnn{self.op}", run, reads=reads, writes=writes, cost=cost,
                              context=full_context, executor=self.region)
        self.used = True
