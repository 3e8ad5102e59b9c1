"""What every operator provides: an :class:`OpSpec` (phase one) returning an :class:`OpPlan`.

``OpSpec.prepare`` is aclnn's ``GetWorkspaceSize``: it checks every argument (dtype, shape,
broadcast, format, attribute range, output shape), picks a kernel variant, and returns the
plan: the workspace size, the cost the timing model charges, and the numpy reference kernel
that phase two runs.  It raises :class:`InvalidArgumentError` with aclnn's codes (161001 for
a missing argument, 161002 for an invalid one) and a message naming the op, the argument,
what was expected and what was seen.

Kernels receive numpy views of device memory (strided, as the descriptors say), write their
outputs in place, and use ``workspace`` (a uint8 view of exactly ``workspace_size`` bytes)
for their scratch, so a short or shared workspace shows up as wrong results or an error.

A plan may also give ``bind(inputs, outputs, workspace)``: called once per bound launch (a
repeatable executor's node and slot, its views fixed), it does what depends only on the views
(reshapes, workspace slices, ``out=`` targets, the kernel variant) and returns the
zero-argument run the simulator then calls on every launch.  ``bind(...)()`` must do exactly
what ``kernel(...)`` does, bit for bit (``kernel`` stays the one-shot form: constant folding,
other backends).  A plan without ``bind`` has its ``kernel`` called on every launch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError
from ..tensor import TensorDesc

__all__ = ["Bind", "Kernel", "OpPlan", "OpSpec", "op_error"]

#: ``kernel(inputs, outputs, workspace)``: arrays are views of device memory.
Kernel = Callable[[Sequence[np.ndarray | None], Sequence[np.ndarray | None], np.ndarray | None], None]
#: ``bind(inputs, outputs, workspace)``: the run for these views, called once per bound launch.
Bind = Callable[[Sequence[np.ndarray | None], Sequence[np.ndarray | None], np.ndarray | None], Callable[[], None]]


@dataclass
class OpPlan:
    """The result of phase one for one call."""

    kernel: Kernel
    workspace_size: int = 0
    flops: float = 0.0
    bytes: float = 0.0
    cube: bool = False  # runs on the matrix unit
    variant: str = "default"
    notes: dict[str, Any] = field(default_factory=dict)
    #: Optional: the run for one set of views, prepared once per bound launch (module docstring).
    bind: Bind | None = None


class OpSpec:
    """Base class for an operator: subclasses set ``name`` and implement :meth:`prepare`."""

    name: str = ""
    #: Number of tensor inputs / outputs in aclnn argument order (None entries allowed for optionals).
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ("out",)
    #: Attribute names and defaults.
    attrs: Mapping[str, Any] = {}
    #: View operations change only shape/strides/offset and launch nothing (Reshape, Transpose, ...).
    is_view: bool = False

    def view(self, input: TensorDesc, attrs: Mapping[str, Any]) -> TensorDesc:
        """For view ops: the output descriptor over the *same storage* as ``input`` (same address,
        new shape/strides/offset).  Raises an op error when the result is not expressible as a
        view (the graph layer then inserts a contiguous copy first)."""
        raise NotImplementedError

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        """Output descriptors (shape, dtype, format; contiguous, address 0) for these inputs.

        Graph building uses this; it raises the same errors as :meth:`prepare` for bad inputs.
        Optional outputs that are not requested by ``attrs`` may be ``None``.
        """
        raise NotImplementedError

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        """Phase one: validate everything (outputs included) and return the plan."""
        raise NotImplementedError

    def unknown_attrs(self, names: Iterable[str]) -> str | None:
        """What is wrong with attribute ``names`` the op does not take (they, what it takes,
        the close matches), or None when it takes them all: the graph builder and
        :class:`~aclpipe.eager.OpRunner` put it in their errors."""
        unknown = sorted(set(names) - set(self.attrs))
        if not unknown:
            return None
        import difflib

        close = sorted({match for name in unknown for match in difflib.get_close_matches(name, self.attrs)})
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        return (f"unknown attribute(s) {', '.join(unknown)}; {self.name} takes "
                f"{', '.join(self.attrs) or 'no attributes'}{hint}")


def op_error(op: str, argument: str, expected: str, seen: Any, *, null: bool = False) -> InvalidArgumentError:
    """The phase-one error: ``aclnnXxx: argument: expected ..., got ...``."""
    code = 161001 if null else 161002
    return InvalidArgumentError(code, f"aclnn{op}: {argument}: expected {expected}, got {seen}",
                                {"op": op})
