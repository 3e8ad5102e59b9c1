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
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx

from ..dtypes import DType
from ..errors import GraphError, InvalidArgumentError, UnsupportedOpError
from ..graph import Graph, Value
from ..graph.builder import snake_case
from .context import OnnxNode, UnsupportedFeature
from .fold import Folded, content_digest, evaluate_on_host
from .mapping import convert_node

__all__ = ["DEFAULT_FOLD_LIMIT", "GraphContext", "emit_model", "node_label", "prune"]

#: Folded results larger than this many bytes, and larger than the inputs they come from, are
#: computed on the device instead (an ``Expand`` of a constant to the batch size would
#: otherwise become a large weight).
DEFAULT_FOLD_LIMIT = 16 << 20


class GraphContext:
    """Build catalog nodes into ``graph`` for one specialization of a model.

    Parameters
    ----------
    graph:
        The graph to add nodes and constants to (its inputs are already declared).
    fold_limit:
        Largest folded result, in bytes, unless it is no larger than its inputs; bigger ones run
        on the device.
    """

    def __init__(self, graph: Graph, *, fold_limit: int = DEFAULT_FOLD_LIMIT):
        self.graph = graph
        self.fold_limit = fold_limit
        self.node: OnnxNode | None = None  # the ONNX node being converted (for names and errors)
        self.label = "onnx"
        self.folded_ops = 0
        # id(Folded) -> (the Folded, its graph constant); holding the Folded keeps its id unique.
        self._constants: dict[int, tuple[Folded, Value]] = {}
        self._by_digest: dict[str, Value] = {}
        self._used = set(graph.values) | {node.name for node in graph.nodes}

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
        if outputs == 1:
            return result[0] if isinstance(result, tuple) else result
        return tuple(result) if isinstance(result, tuple) else (result,)

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
        raise UnsupportedFeature(self.node, f"{what} must be known once input shapes are bound, but it is "
                                            f"computed from tensor data on the device (value {value.name!r}); "
                                            "aclpipe graphs have data-independent shapes")

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
            results = evaluate_on_host(name, arrays, attrs, outputs)
        except (InvalidArgumentError, TypeError, ValueError):
            return None  # emit the node instead: graph.op reports the problem with the node's name
        produced = sum(result.nbytes for result in results)
        # Large results fold only when they are no bigger than what they replace (a weight's
        # Transpose or Reshape): an Expand to the batch size would otherwise become a huge weight.
        if produced > self.fold_limit and produced > sum(0 if a is None else a.nbytes for a in arrays):
            return None
        self.folded_ops += 1
        return [Folded.of(result) for result in results]

    def _node_name(self, op: str) -> str:
        return self._fresh(f"{self.label}/{snake_case(op)}")

    def _fresh(self, stem: str) -> str:
        """A node or constant name not used yet (each value a node adds is claimed as well)."""
        candidate, suffix = stem, 1
        while candidate in self._used or f"{candidate}:0" in self._used:
            candidate, suffix = f"{stem}.{suffix}", suffix + 1
        self._used.add(candidate)
        return candidate


def _value(value: Any) -> Value:
    if not isinstance(value, Value):
        raise TypeError(f"expected a graph value or a folded constant, got {type(value).__name__}")
    return value


def _stem(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_./:-]+", "_", name) or "const"


def node_label(proto: onnx.NodeProto, index: int) -> str:
    """How an ONNX node is called in node names: its name, else its first output, else type#index."""
    return proto.name or next((name for name in proto.output if name), "") or f"{proto.op_type}#{index}"


def emit_model(ctx: GraphContext, graph: onnx.GraphProto, values: dict[str, Any],
               opsets: Mapping[str, int]) -> dict[str, Any]:
    """Convert every node of ``graph`` in order; ``values`` holds the inputs and initializers by
    name and receives every node output.  Errors name the ONNX node."""
    for index, proto in enumerate(graph.node):
        inputs = []
        for name in proto.input:
            if name and name not in values:
                raise GraphError(f"ONNX node {proto.op_type} {node_label(proto, index)!r} reads {name!r}, "
                                 "which no earlier node, graph input or initializer produces")
            inputs.append(values[name] if name else None)
        domain = "" if proto.domain == "ai.onnx" else proto.domain
        ctx.label = node_label(proto, index)
        ctx.node = OnnxNode(proto.op_type, proto.name, domain, opsets.get(domain, 0))
        try:
            outputs = convert_node(ctx, proto, inputs, opsets.get(domain, 0))
        except UnsupportedOpError:
            raise
        except (GraphError, InvalidArgumentError, ValueError, TypeError) as error:
            raise GraphError(f"ONNX node {proto.op_type} {ctx.label!r} (opset {opsets.get(domain, 0)}, "
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
    return pruned
