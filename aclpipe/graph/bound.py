"""A graph specialized to concrete input shapes: every value has a descriptor (address 0).

:func:`bind_graph` (what :meth:`Graph.bind` calls) checks the input shapes against the
declared ones (same rank, fixed dims equal, a named dim the same size everywhere), runs each
op's ``infer`` in node order and wraps any refusal in a :class:`GraphError` naming the node.

Views launch nothing: a view op's output is a ``"view"`` value whose ``base`` is the value
that owns the storage (never itself a view) and whose descriptor is ``spec.view`` over that
storage.  Two places get a contiguous ``InplaceCopy`` node inserted:

- a ``Reshape``/``Flatten`` whose input cannot be viewed with the new shape (a transposed
  tensor, say) reshapes a fresh contiguous copy (``"<node>.copy"`` writes ``"<node>.contiguous"``);
- a graph output that is a non-contiguous view is copied (``"<value>.out_copy"``) so that the
  device-to-host transfer is one contiguous block.

A :class:`BoundGraph` is plain frozen data; the planner's tests build them by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import GraphError
from ..tensor import TensorDesc
from .builder import infer_descs, resolve_op, view_or_copy_desc

if TYPE_CHECKING:
    from .graph import Graph, Node

__all__ = ["VALUE_KINDS", "BoundGraph", "BoundNode", "BoundValue", "bind_graph", "normalize_shapes"]

VALUE_KINDS = ("input", "constant", "node", "view")


@dataclass(frozen=True)
class BoundValue:
    """A value with its concrete descriptor.

    ``kind`` is ``"input"``, ``"constant"``, ``"node"`` (written by ``producer``) or
    ``"view"`` (an alias of ``base``'s storage, made by the view node ``producer``).
    """

    name: str
    desc: TensorDesc
    kind: str
    producer: str | None = None
    base: str | None = None

    @property
    def storage(self) -> str:
        """The value that owns the bytes this value lives in."""
        return self.base or self.name


@dataclass(frozen=True)
class BoundNode:
    """A node with value names in the op's argument order; ``is_view`` nodes launch nothing."""

    name: str
    op: str
    inputs: tuple[str | None, ...]
    outputs: tuple[str | None, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict, hash=False)
    is_view: bool = False


@dataclass(frozen=True)
class BoundGraph:
    """A validated graph with concrete shapes: nodes in a topological order.

    ``outputs`` maps output names to value names; ``constants`` holds the weights;
    ``input_shapes`` the bound shapes and ``dims`` the size of every named dimension;
    ``host_values`` the contents of the host-value inputs the graph was specialized for (not
    inputs of this graph: see :mod:`aclpipe.graph.signature`).
    """

    name: str
    nodes: tuple[BoundNode, ...]
    values: Mapping[str, BoundValue]
    inputs: tuple[str, ...]
    outputs: Mapping[str, str]
    constants: Mapping[str, np.ndarray] = field(default_factory=dict, compare=False)
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    dims: Mapping[str, int] = field(default_factory=dict)
    host_values: Mapping[str, np.ndarray] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        _validate(self)


def _validate(graph: BoundGraph) -> None:
    """Every name resolves, every value is written once before it is read, views sit on storage."""
    defined = set(graph.inputs) | set(graph.constants)
    for declared in defined:
        if declared not in graph.values:
            raise GraphError(f"bound graph {graph.name!r}: {declared!r} has no value entry")
    for node in graph.nodes:
        for read in node.inputs:
            if read is not None and read not in defined:
                raise GraphError(f"bound graph {graph.name!r}: node {node.name!r} reads {read!r} "
                                 "before any node writes it (dangling value or nodes out of order)")
        for written in node.outputs:
            if written is None:
                continue
            if written in defined or written not in graph.values:
                raise GraphError(f"bound graph {graph.name!r}: node {node.name!r} output {written!r} is "
                                 "written twice or has no value entry")
            defined.add(written)
    for value in graph.values.values():
        base = graph.values.get(value.base) if value.base is not None else None
        if value.kind == "view" and (base is None or base.kind == "view"):
            raise GraphError(f"bound graph {graph.name!r}: view {value.name!r} has base {value.base!r}, "
                             "which is not a storage value")
    for output, name in graph.outputs.items():
        if name not in defined:
            raise GraphError(f"bound graph {graph.name!r}: output {output!r} is {name!r}, which nothing writes")
    if not graph.outputs:
        raise GraphError(f"graph {graph.name!r} has no outputs: mark results with g.output(name, value)")


def normalize_shapes(graph: Graph, given: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """Check ``given`` (input name -> shape or array) against the graph's inputs."""
    unknown = sorted(set(given) - set(graph.inputs))
    if unknown:
        raise GraphError(f"graph {graph.name!r}: bind got unknown input(s) {', '.join(unknown)}; "
                         f"its inputs are {', '.join(graph.inputs) or 'none'}")
    missing = [name for name in graph.inputs if name not in given]
    if missing:
        raise GraphError(f"graph {graph.name!r}: bind needs a shape for input(s) {', '.join(missing)}")
    shapes = {name: _as_shape(name, given[name]) for name in graph.inputs}
    _dims(graph, shapes)
    return shapes


def _as_shape(name: str, value: Any) -> tuple[int, ...]:
    shape = getattr(value, "shape", value)
    try:
        if isinstance(shape, (str, bytes)):  # iterable, but of characters: never a shape
            raise TypeError
        dims = tuple(shape)
    except TypeError:
        raise GraphError(f"input {name!r}: expected a shape (tuple of ints) or an array, got {value!r}") from None
    if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in dims):
        raise GraphError(f"input {name!r}: shape {dims} must hold sizes >= 0 (ints)")
    return tuple(int(d) for d in dims)


def _dims(graph: Graph, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, int]:
    sizes: dict[str, tuple[int, str]] = {}
    for name, spec in graph.inputs.items():
        shape = shapes[name]
        declared = [("?" if d is None else d) for d in spec.shape]
        if len(shape) != len(spec.shape):
            raise GraphError(f"input {name!r}: declared with {len(spec.shape)} dims {declared}, "
                             f"bound to {len(shape)} dims {list(shape)}")
        for axis, (dim, size) in enumerate(zip(spec.shape, shape)):
            if isinstance(dim, int) and dim != size:
                raise GraphError(f"input {name!r}: dim {axis} is fixed at {dim} (declared {declared}), "
                                 f"bound to {size}")
            if isinstance(dim, str):
                seen = sizes.setdefault(dim, (size, f"{name} dim {axis}"))
                if seen[0] != size:
                    raise GraphError(f"dim {dim!r} must be the same size everywhere: {seen[1]} is {seen[0]}, "
                                     f"input {name!r} dim {axis} is {size}")
    return {dim: size for dim, (size, _) in sizes.items()}


class _Binder:
    """Walks the graph's nodes once, building values and nodes (copies inserted)."""

    def __init__(self, graph: Graph, shapes: Mapping[str, tuple[int, ...]]):
        self.graph = graph
        self.values: dict[str, BoundValue] = {}
        self.nodes: list[BoundNode] = []
        self.node_names = {node.name for node in graph.nodes}
        for name, spec in graph.inputs.items():
            self.values[name] = BoundValue(name, TensorDesc.contiguous(shapes[name], spec.dtype), "input")
        for name, array in graph.constants.items():
            self.values[name] = BoundValue(name, TensorDesc.contiguous(array.shape, array.dtype), "constant")

    def fresh(self, name: str) -> str:
        candidate, suffix = name, 1
        while candidate in self.values or candidate in self.node_names:
            candidate, suffix = f"{name}{suffix}", suffix + 1
        return candidate

    def copy(self, source: str, stem: str) -> str:
        """Insert a contiguous InplaceCopy of ``source``; returns the new value's name."""
        desc = self.values[source].desc
        node, value = self.fresh(f"{stem}.copy"), self.fresh(f"{stem}.contiguous")
        self.values[value] = BoundValue(value, TensorDesc.contiguous(desc.shape, desc.dtype), "node", node)
        self.node_names.add(node)
        self.nodes.append(BoundNode(node, "InplaceCopy", (source,), (value,)))
        return value

    def view(self, node: Node) -> None:
        spec = resolve_op(node.op, node.name)
        source = node.inputs[0] if node.inputs else None
        output = node.outputs[0] if node.outputs else None
        if source is None or output is None:
            raise GraphError(f"node {node.name!r} ({node.op}): a view needs one input and one output")
        desc, needs_copy = view_or_copy_desc(spec, node.name, self.values[source].desc, node.attrs)
        if needs_copy:
            source = self.copy(source, node.name)
        base = self.values[source].storage
        self.values[output] = BoundValue(output, desc, "view", node.name, base)
        self.nodes.append(BoundNode(node.name, node.op, (source,), (output,), node.attrs, True))

    def compute(self, node: Node) -> None:
        spec = resolve_op(node.op, node.name)
        values = self.values
        # Every bound value has a descriptor: output descriptors straight from the input ones.
        descs = [None if name is None else values[name].desc for name in node.inputs]
        results = infer_descs(spec, node.name, descs, node.attrs)
        if len(results) != len(node.outputs):
            raise GraphError(f"node {node.name!r} ({node.op}): gives {len(results)} outputs with these shapes, "
                             f"the graph names {len(node.outputs)} ({', '.join(map(str, node.outputs))})")
        for name, desc in zip(node.outputs, results):
            if name is None:
                continue
            if desc is None:
                raise GraphError(f"node {node.name!r} ({node.op}): output {name!r} is not produced with "
                                 "these shapes and attributes")
            values[name] = BoundValue(name, desc, "node", node.name)
        self.nodes.append(BoundNode(node.name, node.op, node.inputs, node.outputs, node.attrs))

    def outputs(self) -> dict[str, str]:
        result = {}
        for output, name in self.graph.outputs.items():
            value = self.values[name]
            if value.kind == "view" and not value.desc.is_contiguous:
                name = self.copy(name, f"{output}.out")
            result[output] = name
        return result


def bind_graph(graph: Graph, shapes: Mapping[str, tuple[int, ...]]) -> BoundGraph:
    """Specialize ``graph`` to ``shapes`` (already checked by :func:`normalize_shapes`)."""
    if not graph.outputs:
        raise GraphError(f"graph {graph.name!r} has no outputs: mark results with g.output(name, value)")
    binder = _Binder(graph, shapes)
    for node in graph.nodes:
        if resolve_op(node.op, node.name).is_view:
            binder.view(node)
        else:
            binder.compute(node)
    outputs = binder.outputs()
    return BoundGraph(
        name=graph.name,
        nodes=tuple(binder.nodes),
        values=MappingProxyType(binder.values),
        inputs=tuple(graph.inputs),
        outputs=MappingProxyType(outputs),
        constants=MappingProxyType(dict(graph.constants)),
        input_shapes=MappingProxyType(dict(shapes)),
        dims=MappingProxyType(_dims(graph, shapes)),
        host_values=graph.host_values,
    )
