"""GraphContext: the :class:`~aclpipe.onnx.context.BuildContext` that builds an aclpipe Graph.

Values are either :class:`~aclpipe.onnx.fold.Folded` (known at build time) or graph
:class:`~aclpipe.graph.Value` objects (computed on the device).  ``ctx.op(...)`` folds: when
every input is known, the op runs on the host (:func:`~aclpipe.onnx.fold.evaluate_on_host`)
and its result is known too; otherwise a node is added to the graph.  Known values become
graph constants only when a device node reads them, so shape arithmetic leaves no trace in
the graph.  Folded constants are named by content (``<hint>~<digest>``): the Pipeline caches
uploads by name across input signatures, and a name must always mean the same bytes.

:func:`emit_model` walks an ONNX graph through the context, naming each catalog node after
the ONNX node it comes from and turning any validation error into a :class:`GraphError`
that names the ONNX node.  :func:`prune` drops nodes no output depends on.

Host values.  When a converter asks for the contents of a value computed on the device
(:meth:`GraphContext.static_value`, e.g. Reshape's shape) and that value depends on graph
inputs small enough to be host values, the context raises :class:`HostValueNeeded` naming
them; the importer then makes those inputs host values (their contents become constants of
the specialization) and builds again.  Every size is checked against :class:`OnnxLimits`
before anything is allocated: a fold whose result would exceed ``fold_bytes`` runs on the
device instead, and a tensor larger than ``tensor_bytes`` is a :class:`GraphError`.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import ChainMap
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any

import numpy as np
import onnx

from ..dtypes import DType
from ..errors import GraphError, InvalidArgumentError, UnsupportedOpError
from ..graph import Graph, Value
from ..graph.builder import snake_case
from .context import OnnxNode, UnsupportedFeature
from .fold import Folded, content_digest, evaluate_on_host, result_bytes
from .mapping import convert_node
from .validate import DEFAULT_LIMITS, OnnxLimits, tensor_array

__all__ = ["DEFAULT_FOLD_LIMIT", "GraphContext", "HostValueNeeded", "emit_model", "node_label", "prune"]

#: Folded results larger than this many bytes, and larger than the inputs they come from, are
#: computed on the device instead (an ``Expand`` of a constant to the batch size would
#: otherwise become a large weight).
DEFAULT_FOLD_LIMIT = DEFAULT_LIMITS.fold_bytes


class HostValueNeeded(UnsupportedFeature):
    """A converter needs the contents of a value computed on the device from graph ``inputs``
    that can be host values; the importer makes them host values and builds again."""

    def __init__(self, node: OnnxNode | None, what: str, inputs: tuple[str, ...]):
        self.what = what
        self.inputs = inputs
        names = ", ".join(repr(name) for name in inputs)
        super().__init__(node, f"{what} is computed from graph input(s) {names}, which must be host values: "
                               "pass them as ordinary run inputs and the graph is specialized for their contents")


class GraphContext:
    """Build catalog nodes into ``graph`` for one specialization of a model.

    Parameters
    ----------
    graph:
        The graph to add nodes and constants to (its inputs are already declared).
    limits:
        The size and count limits (:class:`~aclpipe.onnx.validate.OnnxLimits`).
    opsets:
        The model's operator sets (subgraphs are read with them).
    fold_limit:
        Overrides ``limits.fold_bytes``: the largest folded result, in bytes, unless it is no
        larger than its inputs; bigger ones run on the device.
    """

    def __init__(self, graph: Graph, *, limits: OnnxLimits = DEFAULT_LIMITS, opsets: Mapping[str, int] | None = None,
                 fold_limit: int | None = None):
        self.graph = graph
        self.limits = limits if fold_limit is None else dataclasses.replace(limits, fold_bytes=fold_limit)
        self.fold_limit = self.limits.fold_bytes
        self.opsets = dict(opsets or {})
        self.node: OnnxNode | None = None  # the ONNX node being converted (for names and errors)
        self.label = "onnx"
        self.folded_ops = 0
        self.nodes_added = 0
        self.iterations = 0  # subgraphs emitted (If branches, Loop and Scan iterations)
        # id(Folded) -> (the Folded, its graph constant); holding the Folded keeps its id unique.
        self._constants: dict[int, tuple[Folded, Value]] = {}
        self._by_digest: dict[str, Value] = {}
        self._used = set(graph.values) | {node.name for node in graph.nodes}
        self._suffixes: dict[str, int] = {}
        self._reads: dict[str, list[str]] = {}  # node output -> the values its node reads

    # -- the BuildContext interface ----------------------------------------------------------
    def op(self, name: str, *inputs: Any, outputs: int = 1, **attrs: Any) -> Any:
        present = [value for value in inputs if value is not None]
        if all(isinstance(value, Folded) for value in present):
            folded = self._try_fold(name, inputs, outputs, attrs)
            if folded is not None:
                return folded[0] if outputs == 1 else tuple(folded)
        values = [None if value is None else self.device_value(value) for value in inputs]
        node_name = self._node_name(name)
        names = None if outputs == 1 else [f"{node_name}:{index}" for index in range(outputs)]
        for taken in names or ():
            self._used.add(taken)
        result = self.graph.op(name, *values, name=node_name, outputs=names, **attrs)
        produced = result if isinstance(result, tuple) else (result,)
        self._count_node()
        reads = [value.name for value in values if value is not None]
        for value in produced:
            self._check_size(value.name, value.shape, value.dtype)
            self._reads[value.name] = reads
        if outputs == 1:
            return produced[0]
        return tuple(produced)

    def constant(self, array: np.ndarray) -> Folded:
        folded = Folded.of(array)
        folded.dtype  # noqa: B018 - refuse dtypes the device does not have (TypeError), as EagerContext does
        return folded

    def shape(self, value: Any) -> tuple[int, ...]:
        if isinstance(value, Folded):
            return value.shape
        return tuple(int(dim) for dim in _value(value).shape or ())  # type: ignore[arg-type]  # concrete once bound

    def dtype(self, value: Any) -> DType:
        if isinstance(value, Folded):
            return value.dtype
        dtype = _value(value).dtype
        assert dtype is not None  # every value of a specialized graph has a concrete dtype
        return dtype

    def static_value(self, value: Any, what: str) -> np.ndarray:
        if isinstance(value, Folded):
            return value.array
        sources = self._inputs_behind(_value(value))
        limit = self.limits.host_value_elements
        large = {name: spec for name, spec in sources.items() if _elements(spec) > limit}
        if sources and not large:
            raise HostValueNeeded(self.node, what, tuple(sorted(sources)))
        if large:
            described = ", ".join(f"{name!r} ({_describe(spec.dtype, spec.shape)})"
                                  for name, spec in sorted(large.items()))
            why = (f"from graph input(s) {described}, too large to be host values (at most {limit} elements, "
                   "OnnxLimits.host_value_elements)")
        else:
            why = f"on the device (value {value.name!r}, larger than the fold limit of {self.fold_limit} bytes)"
        raise UnsupportedFeature(self.node, f"{what} must be known when the graph is specialized, but it is "
                                            f"computed {why}; aclpipe graphs have data-independent shapes")

    def subgraph(self, graph: onnx.GraphProto, feeds: Mapping[str, Any], scope: Mapping[str, Any],
                 label: str) -> list[Any]:
        """Emit ``graph`` (an If branch, a Loop or Scan body) here, its inputs bound to ``feeds``
        and its other free names read from ``scope``; returns its outputs' values."""
        self.iterations += 1
        if self.iterations > self.limits.iterations:
            raise GraphError(f"more than {self.limits.iterations} subgraphs (If branches, Loop and Scan "
                             "iterations) in one specialization (OnnxLimits.iterations)")
        local: dict[str, Any] = {tensor.name: Folded(tensor_array(tensor, f"subgraph initializer {tensor.name!r}"),
                                                     hint=tensor.name) for tensor in graph.initializer}
        local.update(feeds)
        values: ChainMap[str, Any] = ChainMap(local, scope)  # type: ignore[arg-type]  # read-only outer scopes
        node, outer_label = self.node, self.label
        try:
            emit_model(self, graph, values, self.opsets, prefix=f"{outer_label}/{label}")
        finally:
            self.node, self.label = node, outer_label
        return [values[output.name] for output in graph.output]

    # -- helpers -------------------------------------------------------------------------------
    def device_value(self, value: Any) -> Value:
        """The graph value for ``value``, adding a constant for a known one (once)."""
        if not isinstance(value, Folded):
            return _value(value)
        known = self._constants.get(id(value))
        if known is not None:
            return known[1]
        if value.name is not None and value.name not in self._used:
            self._used.add(value.name)
            constant = self.graph.constant(value.name, value.array)
        else:
            digest = content_digest(value.array)
            shared = self._by_digest.get(digest)
            if shared is None:
                shared = self.graph.constant(self._fresh(f"{_stem(value.name or value.hint or self.label)}~{digest}"),
                                             value.array)
                self._by_digest[digest] = shared
            constant = shared
        self._constants[id(value)] = (value, constant)
        return constant

    def _try_fold(self, name: str, inputs: tuple[Any, ...], outputs: int, attrs: Mapping[str, Any]
                  ) -> list[Folded] | None:
        arrays = [None if value is None else value.array for value in inputs]
        try:
            # Sized from shape inference first, so that nothing large is ever allocated on the host.
            produced = result_bytes(name, arrays, attrs, outputs)
            # Large results fold only when they are no bigger than what they replace (a weight's
            # Transpose or Reshape): an Expand to the batch size would otherwise become a huge weight.
            if produced > self.fold_limit and produced > sum(0 if a is None else a.nbytes for a in arrays):
                return None
            results = evaluate_on_host(name, arrays, attrs, outputs)
        except (InvalidArgumentError, TypeError, ValueError, ArithmeticError, IndexError):
            return None  # emit the node instead: graph.op reports the problem with the node's name
        self.folded_ops += 1
        return [Folded.of(result) for result in results]

    def _count_node(self) -> None:
        self.nodes_added += 1
        if self.nodes_added > self.limits.graph_nodes:
            raise GraphError(f"the specialized graph has more than {self.limits.graph_nodes} nodes "
                             "(OnnxLimits.graph_nodes; unrolled Loop and Scan iterations count in full)")

    def _check_size(self, name: str, shape: Iterable[Any] | None, dtype: DType | None) -> None:
        dims = [int(d) for d in shape or () if isinstance(d, (int, np.integer))]
        nbytes = math.prod(dims) * (dtype.itemsize if dtype is not None else 1)
        if nbytes > self.limits.tensor_bytes:
            raise GraphError(f"value {name!r} would be {_describe(dtype, dims)}, {nbytes} bytes, more "
                             f"than the limit of {self.limits.tensor_bytes} bytes (OnnxLimits.tensor_bytes)")

    def _inputs_behind(self, value: Value) -> dict[str, Value]:
        """The graph inputs whose data ``value`` is computed from."""
        found: dict[str, Value] = {}
        pending, seen = [value.name], set()
        while pending:
            name = pending.pop()
            if name in seen:
                continue
            seen.add(name)
            current = self.graph.values[name]
            if current.kind == "input":
                found[name] = current
            pending.extend(self._reads.get(name, ()))
        return found

    def _node_name(self, op: str) -> str:
        return self._fresh(f"{self.label}/{snake_case(op)}")

    def _fresh(self, stem: str) -> str:
        """A node or constant name not used yet (each value a node adds is claimed as well)."""
        # Suffixes resume where the stem's last one ended: an unrolled loop names thousands of
        # nodes after one stem, and counting from 1 each time would be quadratic.
        candidate, suffix = stem, self._suffixes.get(stem, 1)
        while candidate in self._used or f"{candidate}:0" in self._used:
            candidate, suffix = f"{stem}.{suffix}", suffix + 1
        self._suffixes[stem] = suffix
        self._used.add(candidate)
        return candidate


def _value(value: Any) -> Value:
    if not isinstance(value, Value):
        raise TypeError(f"expected a graph value or a folded constant, got {type(value).__name__}")
    return value


def _describe(dtype: DType | None, shape: Iterable[Any] | None) -> str:
    return f"{dtype.name if dtype is not None else '?'}{list(shape or ())}"


def _elements(value: Value) -> int:
    return math.prod(int(dim) for dim in value.shape or () if isinstance(dim, int))


def _stem(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_./:-]+", "_", name) or "const"


def node_label(proto: onnx.NodeProto, index: int) -> str:
    """How an ONNX node is called in node names: its name, else its first output, else type#index."""
    return proto.name or next((name for name in proto.output if name), "") or f"{proto.op_type}#{index}"


class _NodeError(GraphError):
    """A GraphError already naming the ONNX node (enclosing If/Loop/Scan nodes pass it on)."""


def emit_model(ctx: GraphContext, graph: onnx.GraphProto, values: MutableMapping[str, Any],
               opsets: Mapping[str, int], prefix: str = "") -> MutableMapping[str, Any]:
    """Convert every node of ``graph`` in order; ``values`` holds the inputs and initializers by
    name and receives every node output.  Errors name the ONNX node (inside a subgraph, with
    the enclosing nodes' names as a ``prefix``)."""
    for index, proto in enumerate(graph.node):
        inputs = []
        for name in proto.input:
            if name and name not in values:
                raise GraphError(f"ONNX node {proto.op_type} {node_label(proto, index)!r} reads {name!r}, "
                                 "which no earlier node, graph input or initializer produces")
            inputs.append(values[name] if name else None)
        domain = "" if proto.domain == "ai.onnx" else proto.domain
        ctx.label = f"{prefix}/{node_label(proto, index)}" if prefix else node_label(proto, index)
        ctx.node = OnnxNode(proto.op_type, proto.name, domain, opsets.get(domain, 0))
        try:
            outputs = convert_node(ctx, proto, inputs, opsets.get(domain, 0), scope=values)
        except (UnsupportedOpError, _NodeError):
            raise
        except (GraphError, InvalidArgumentError, ValueError, TypeError, ArithmeticError, LookupError) as error:
            # ArithmeticError and LookupError: converters index attributes and shapes that an
            # untrusted model may get wrong; they are the model's fault, named like the rest.
            raise _NodeError(f"ONNX node {proto.op_type} {ctx.label!r} (opset {opsets.get(domain, 0)}, "
                             f"inputs {_shapes(ctx, inputs)}): {error}") from error
        for name, value in zip(proto.output, outputs):
            if name:
                named = isinstance(value, Folded) and value.name is None and value.hint is None
                values[name] = dataclasses.replace(value, hint=name) if named else value
    return values


def _shapes(ctx: GraphContext, inputs: list[Any]) -> str:
    described = []
    for value in inputs:
        if value is None:
            described.append("-")
        else:
            described.append(f"{ctx.dtype(value).name}{list(ctx.shape(value))}")
    return "[" + ", ".join(described) + "]"


def prune(graph: Graph) -> Graph:
    """``graph`` without the nodes and constants no output depends on (itself when all are used)."""
    needed = set(graph.outputs.values())
    live = []
    for node in reversed(graph.nodes):
        if any(output in needed for output in node.outputs if output is not None):
            live.append(node)
            needed.update(name for name in node.inputs if name is not None)
    if len(live) == len(graph.nodes) and needed >= set(graph.constants):
        return graph
    pruned = Graph(graph.name)
    values: dict[str, Value] = {}
    for name, spec in graph.inputs.items():
        values[name] = pruned.input(name, spec.shape, spec.dtype)
    for name, array in graph.constants.items():
        if name in needed:
            values[name] = pruned.constant(name, array)
    for node in reversed(live):
        result = pruned.op(node.op, *[None if name is None else values[name] for name in node.inputs],
                           name=node.name, outputs=list(node.outputs), **dict(node.attrs))
        produced = result if isinstance(result, tuple) else (result,)
        for value in produced:
            values[value.name] = value
    for output, name in graph.outputs.items():
        pruned.output(output, values[name])
    pruned.host_values = graph.host_values
    return pruned
