"""Whether requests may share a run: the batch axis, followed through every node.

A server joins requests by stacking their inputs along dim 0 and cutting every output back
along dim 0.  That is right only when the graph keeps the rows apart: row ``i`` of every
output is computed from row ``i`` of the inputs (and from weights) alone.  Outputs that
merely *lead with* the batch dim prove nothing: a ``Cumsum`` or ``Softmax`` over dim 0 keeps
the shape and hands one client another client's numbers.

This pass proves it instead.  Every input starts with the batch on axis 0; each node's rule
(:mod:`.batch_rules`) says on which axis of each output the batch lands, or why the node
reduces, moves or mixes it (the *break*: a reduction, scan or normalization over the batch
axis, a contraction of it, a reshape folding it into other dims, an op no rule covers).  The
graph is batchable when no node breaks and every output carries the batch on axis 0.

The pass runs on bound graphs (concrete shapes: the ranks, normalized dims and reshape
targets are known).  :func:`batchable` binds the graph at two batch sizes and asks both, so a
reshape that keeps the rows only at one size (``[B, 6] -> [2, -1]`` at ``B = 2``) is refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Integral
from typing import TYPE_CHECKING, Any

from ..errors import AclpipeError
from .batch_rules import BatchBreak, Site, apply, rule_for

if TYPE_CHECKING:
    from ..graph import Graph
    from ..graph.bound import BoundGraph, BoundNode

__all__ = ["PROBE_ROWS", "BatchVerdict", "batch_verdict", "batchable"]

#: The two batch sizes :func:`batchable` binds at: small (cheap to bind), odd and coprime, so that
#: neither equals a typical power-of-two trailing dim nor a multiple of the other.
PROBE_ROWS = (3, 5)


@dataclass(frozen=True)
class BatchVerdict:
    """Whether requests stacked along dim 0 may share one run.

    ``ok`` is the verdict; when it is False, ``node`` names the node that reduces, moves or
    mixes the batch (None when the graph's inputs or outputs are the reason) and ``reason``
    says how.  ``str(verdict)`` is ``"yes"`` or ``"no (node 'cs': Cumsum accumulates along dim 0,
    the batch axis)"``.
    """

    ok: bool
    node: str | None = None
    op: str | None = None
    reason: str = ""

    def __str__(self) -> str:
        if self.ok:
            return "yes"
        where = f"node {self.node!r}: " if self.node is not None else ""
        return f"no ({where}{self.reason})"


YES = BatchVerdict(True)


def batch_verdict(bound: BoundGraph, rows: int) -> BatchVerdict:
    """The verdict for ``bound``, whose inputs all carry a batch of ``rows`` rows on axis 0.

    Pure: it reads shapes and attributes only.  ``rows`` must be at least 2, so that the batch
    dim cannot pass for a broadcast dim of size 1.
    """
    if rows < 2:
        raise ValueError(f"rows must be at least 2 (a batch dim of 1 looks like a broadcast dim), got {rows}")
    for name in bound.inputs:
        shape = bound.values[name].desc.shape
        if not shape or shape[0] != rows:
            return BatchVerdict(False, reason=f"input {name!r} has shape {list(shape)}: its first dim is not "
                                              f"the batch of {rows} rows")
    axes: dict[str, int | None] = dict.fromkeys(bound.inputs, 0)
    for name in bound.constants:
        axes[name] = None
    movers: dict[str, BoundNode] = {}  # value -> the node that took its batch off axis 0
    for node in bound.nodes:
        broken = _visit(bound, node, axes, rows)
        if broken is not None:
            return broken
        _track_movers(node, axes, movers)
    for output, value in bound.outputs.items():
        axis = axes[value]
        if axis is None:
            return BatchVerdict(False, reason=f"output {output!r} does not depend on the batch, so it cannot be "
                                              "cut into one part per request")
        if axis != 0:
            mover = movers[value]
            return BatchVerdict(False, mover.name, mover.op, f"{mover.op} moves the batch to axis {axis} of "
                                f"output {output!r}, which is cut into one part per request along axis 0")
    return YES


def _track_movers(node: BoundNode, axes: Mapping[str, int | None], movers: dict[str, BoundNode]) -> None:
    inherited = next((movers[v] for v in node.inputs if v is not None and v in movers), node)
    for value in node.outputs:
        if value is not None and axes[value] not in (0, None):
            movers[value] = inherited


def _visit(bound: BoundGraph, node: BoundNode, axes: dict[str, int | None], rows: int) -> BatchVerdict | None:
    """Set ``axes`` for ``node``'s outputs; the verdict when it breaks the batch."""
    values = bound.values
    site = Site(node.op, tuple(None if v is None else values[v].desc for v in node.inputs),
                tuple(None if v is None else axes[v] for v in node.inputs),
                tuple(None if v is None else values[v].desc for v in node.outputs), node.attrs, rows)
    rule = rule_for(node.op)
    if rule is None and site.batched():
        return BatchVerdict(False, node.name, node.op, f"no rule says {node.op} keeps rows apart, so requests "
                                                       "are not joined through it")
    try:
        placed = apply(rule, site) if rule is not None else tuple(None for _ in node.outputs)
    except BatchBreak as error:
        return BatchVerdict(False, node.name, node.op, str(error))
    except (KeyError, TypeError, ValueError, IndexError) as error:  # attributes a rule cannot read
        return BatchVerdict(False, node.name, node.op, f"its attributes could not be analysed ({error!r})")
    for value, axis in zip(node.outputs, placed):
        if value is None:
            continue
        if axis is not None and values[value].desc.shape[axis:axis + 1] != (rows,):
            return BatchVerdict(False, node.name, node.op, f"output {value!r} has shape "
                                f"{list(values[value].desc.shape)}: the batch of {rows} is not on axis {axis}")
        axes[value] = axis
    return None


def batchable(graph: Graph, **shapes: Any) -> BatchVerdict:
    """Whether requests to ``graph`` may be stacked along dim 0 and share one run.

    Parameters
    ----------
    graph:
        The graph; every input carries the batch on dim 0.
    **shapes:
        The shape (or an array) of one request's input, by name, for inputs with dynamic dims
        besides the first; the first dim is ignored.  Inputs not given use their declared
        shape.

    Returns
    -------
    BatchVerdict
        Batchable when, bound at :data:`PROBE_ROWS` rows, no node mixes the rows and every
        output carries the batch on dim 0; otherwise the first node that breaks it, and why.
    """
    if graph.host_inputs:
        return BatchVerdict(False, reason=f"inputs {sorted(graph.host_inputs)} are host values: their contents "
                                          "decide the graph, so requests cannot share them")
    trailing = _trailing(graph, shapes)
    if isinstance(trailing, BatchVerdict):
        return trailing
    for rows in PROBE_ROWS:
        try:
            bound = graph.bind(**{name: (rows, *rest) for name, rest in trailing.items()})
        except (AclpipeError, ValueError, TypeError) as error:
            return BatchVerdict(False, reason=f"the graph does not bind at {rows} rows: {error}")
        verdict = batch_verdict(bound, rows)
        if not verdict.ok:
            return verdict
    return YES


def _trailing(graph: Graph, shapes: Mapping[str, Any]) -> dict[str, Sequence[int]] | BatchVerdict:
    """Each input's dims after the first: given, else declared; a verdict when one cannot be."""
    unknown = sorted(set(shapes) - set(graph.inputs))
    if unknown:
        raise ValueError(f"graph {graph.name!r} has no input(s) {unknown}; its inputs are {list(graph.inputs)}")
    trailing: dict[str, Sequence[int]] = {}
    for name, spec in graph.inputs.items():
        if not spec.shape:
            return BatchVerdict(False, reason=f"input {name!r} is a scalar: it has no rows to stack")
        if isinstance(spec.shape[0], int):
            return BatchVerdict(False, reason=f"input {name!r} has a fixed first dim {spec.shape[0]}: stacked "
                                              "requests would not fit it")
        trailing[name] = _rest(name, shapes.get(name), spec.shape)
    return trailing


def _rest(name: str, given: Any, declared: Sequence[Any]) -> tuple[int, ...]:
    """The dims after the first of one request's shape (or array), else of the declared shape."""
    dims: tuple[Any, ...] = tuple(getattr(given, "shape", given))[1:] if given is not None else tuple(declared[1:])
    sizes = tuple(int(dim) for dim in dims if isinstance(dim, Integral) and not isinstance(dim, bool))
    if len(sizes) != len(dims):
        source = f"is given shape {given!r}" if given is not None else f"has dynamic dims {list(declared)}"
        raise ValueError(f"input {name!r} {source} besides the batch: pass the shape of one request, e.g. "
                         f"batchable(graph, {name}=(1, ...))")
    return sizes
