"""Control regions: a ``Loop`` node whose body is a graph of its own, run as control flow.

A graph may hold a node of the catalog op ``Loop`` (:class:`LoopSpec`): one node standing for a
whole loop, its body a separate :class:`~aclpipe.graph.Graph` held in the node's ``region``
attribute (a :class:`LoopRegion`).  The importer makes one for an ONNX ``Loop`` whose trip
count is too large to unroll (:mod:`aclpipe.onnx.convert_control`); the graph then grows with
the model, not with the trip count.  Planning treats the node as any other (its inputs are read,
its outputs written, at arena addresses); running it is the Pipeline's business
(:mod:`aclpipe.pipeline.loop`): the body is planned and prepared once per signature and
enqueued once per iteration.

The node's inputs are the loop-carried values' initial contents, then the *invariants*: outer
values the body reads, the same in every iteration, then the sequences an ONNX ``Scan`` slices
(one slice per iteration, along its axis, from either end).  Its outputs are the carried values
after the last iteration, then one stacked tensor per scan output (``[trips, *per-iteration
shape]``).

The body graph's inputs are the carried values (``carried_inputs``, in the node's order) and the
invariants (``invariant_inputs``); its outputs give each carried value's next contents
(``carried_outputs``, one-to-one) and each iteration's scan values (``scan_outputs``).  When the
exit is computed on the device, one carried value is the loop's *running* flag (a rank-0
bool, ``condition`` names its next value): the body then keeps its carried values once the
flag is false (``Where``), so iterations run past the exit change nothing, and the runner may
read the flag back once per block of iterations rather than after each.

A ``Loop`` node has no kernel: phase one refuses it (:meth:`LoopSpec.prepare`), so only the
Pipeline runs graphs that hold one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..ops.base import OpPlan, OpSpec, op_error
from ..ops.registry import get_op, register
from ..tensor import TensorDesc

if TYPE_CHECKING:
    from .graph import Graph

__all__ = ["LoopRegion", "LoopSpec"]


@dataclass(frozen=True, eq=False)
class LoopRegion:
    """A loop's body and how the node's inputs and outputs map onto it (see the module docs).

    Compared and hashed by identity: one region is one body, whatever its contents.
    """

    body: Graph
    carried_inputs: tuple[str, ...]
    carried_outputs: tuple[str, ...]
    invariant_inputs: tuple[str, ...]
    scan_outputs: tuple[str, ...]
    #: The most iterations the loop runs.
    trips: int
    #: The body output holding the next running flag (a carried output), when the exit is
    #: computed on the device; None: every one of ``trips`` iterations runs.
    condition: str | None = None
    #: Body inputs fed one slice per iteration (an ONNX ``Scan``'s scan inputs), the node's
    #: last inputs: the sequences, sliced along ``scan_input_axes`` (from the end where
    #: ``scan_input_reverse``).
    scan_inputs: tuple[str, ...] = ()
    scan_input_axes: tuple[int, ...] = ()
    scan_input_reverse: tuple[bool, ...] = ()

    def __post_init__(self) -> None:
        if len(self.carried_inputs) != len(self.carried_outputs):
            raise ValueError(f"a loop region needs one carried output per carried input, got "
                             f"{len(self.carried_inputs)} inputs and {len(self.carried_outputs)} outputs")
        if self.condition is not None and self.condition not in self.carried_outputs:
            raise ValueError(f"the loop condition {self.condition!r} must be a carried output")
        scans_in = len(self.scan_inputs)
        for field, count in (("scan_input_axes", scans_in), ("scan_input_reverse", scans_in)):
            given = getattr(self, field)
            if not given:
                object.__setattr__(self, field, (0 if field.endswith("axes") else False,) * count)
            elif len(given) != count:
                raise ValueError(f"a loop region with {count} such scans needs {count} {field}, got {len(given)}")

    @property
    def input_descs(self) -> list[TensorDesc]:
        """What the node's inputs must be: carried values, invariants, then scan sequences."""
        fixed = [self._desc(name) for name in (*self.carried_inputs, *self.invariant_inputs)]
        return fixed + [self._stacked(self._desc(name), axis) for name, axis in zip(self.scan_inputs,
                                                                                     self.scan_input_axes)]

    @property
    def output_descs(self) -> list[TensorDesc]:
        """What the node's outputs are: carried values, then scan outputs stacked on a new axis 0,
        first iteration first (each iteration's slice is written whole, after the one before: a
        kernel may write past its output's end, CANN 11-01, onto slices not written yet only)."""
        carried = [self._desc(name) for name in self.carried_outputs]
        return carried + [self._stacked(self._desc(name), 0) for name in self.scan_outputs]

    def _stacked(self, desc: TensorDesc, axis: int) -> TensorDesc:
        """``trips`` of ``desc`` stacked along a new ``axis``."""
        shape = list(desc.shape)
        return TensorDesc.contiguous((*shape[:axis], self.trips, *shape[axis:]), desc.dtype)

    def _desc(self, name: str) -> TensorDesc:
        value = self.body.value(self.body.outputs.get(name, name))
        assert value.desc is not None  # region bodies are built with concrete shapes
        return TensorDesc.contiguous(value.desc.shape, value.desc.dtype)

    def __repr__(self) -> str:
        return (f"LoopRegion({self.body.name!r}: {len(self.body.nodes)} body nodes, {self.trips} trips, "
                f"{len(self.carried_inputs)} carried, {len(self.invariant_inputs)} invariant, "
                f"{len(self.scan_inputs)} scan inputs, {len(self.scan_outputs)} scan outputs, "
                f"exit {'on the device' if self.condition else 'by count'})")


class LoopSpec(OpSpec):
    """The ``Loop`` control node: its body in the ``region`` attribute (a :class:`LoopRegion`)."""

    name = "Loop"
    inputs = ("tensors",)
    outputs = ("outs",)
    attrs: Mapping[str, Any] = {"region": None}

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        region = attrs.get("region")
        if not isinstance(region, LoopRegion):
            raise op_error(self.name, "region", "a LoopRegion (the loop's body)", type(region).__name__)
        wanted = region.input_descs
        if len(inputs) != len(wanted):
            raise op_error(self.name, "tensors", f"{len(wanted)} inputs (carried values, then invariants)",
                           len(inputs))
        for index, (given, want) in enumerate(zip(inputs, wanted)):
            if given is None or given.shape != want.shape or given.dtype != want.dtype:
                seen = "nothing" if given is None else f"{given.dtype.name}{list(given.shape)}"
                raise op_error(self.name, f"tensors[{index}]", f"{want.dtype.name}{list(want.shape)}", seen)
        return list(region.output_descs)

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        raise op_error(self.name, "region", "a kernel op: a Loop node is a control region that only a Pipeline runs "
                       "(it prepares the body and enqueues it per iteration)", "a Loop node")


def _register() -> None:
    try:
        get_op(LoopSpec.name)
    except Exception:  # noqa: BLE001 - not registered yet (UnsupportedOpError)
        register(LoopSpec())


_register()
