"""What an untrusted ONNX model is checked for before aclpipe walks it, and the limits that
bound loading it.

A server that loads what clients upload must not let a small file take the host down or
escape with an untyped error.  :func:`validate_model` walks the model once (subgraphs
included, depth bounded) and raises one :class:`~aclpipe.errors.GraphError` naming the node
for each kind of malformed structure:

- a name, op type or domain that is not valid UTF-8 (:func:`check_text`);
- a graph without outputs (an empty file parses as an empty model);
- a name written twice (two nodes writing one output, a node output that shadows an outer
  scope's value), or read before anything produces it; a graph output nothing produces;
- an attribute of the wrong type (a float ``axis``), one the op's schema does not define, one
  set twice, a required one missing, or a 0/1 flag (``keepdims``, ``transA``...) set to
  anything else;
- more inputs or outputs than the op's schema allows;
- subgraphs nested deeper, or more nodes in all, than :class:`OnnxLimits` allows.

:func:`tensor_array` reads every tensor a model carries (initializers, ``Constant`` values)
and turns onnx's errors for data-less or inconsistent tensors into a ``GraphError``; it refuses
external data that was not loaded from the model's folder (a model given as bytes would
otherwise read files relative to the working directory).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx
import onnx.defs
import onnx.numpy_helper

from ..errors import GraphError

__all__ = ["DEFAULT_LIMITS", "OnnxLimits", "check_text", "tensor_array", "validate_model"]


@dataclass(frozen=True)
class OnnxLimits:
    """Bounds on what loading and specializing one model may cost (all configurable through
    ``load_onnx(..., limits=OnnxLimits(...))``).

    Attributes
    ----------
    fold_bytes:
        Largest tensor folded on the host (unless it is no larger than the inputs it comes
        from, like a weight's transpose); larger results of known inputs are computed on the
        device.  Checked *before* the host computes anything.
    tensor_bytes:
        Largest tensor of a specialized graph (a device activation or a folded value); a
        model whose shapes make a larger one is refused with a ``GraphError`` naming it.
    model_nodes:
        Most ONNX nodes in the model, subgraphs included.
    graph_nodes:
        Most catalog nodes in one specialization (after Loop/Scan unrolling).  Specializing
        takes roughly a quarter of a millisecond per catalog node on one core, so the default
        bounds a hostile model's specialization to tens of seconds.
    iterations:
        Most subgraphs emitted in one specialization: If branches, and Loop/Scan iterations
        (nested loops counted in full).
    depth:
        Deepest nesting of subgraphs (If branches, Loop and Scan bodies).
    host_value_elements:
        Largest graph input (in elements) that can be a host value.
    specializations:
        Specialized graphs an ``OnnxGraph`` keeps (least recently used dropped first).
    """

    fold_bytes: int = 16 << 20
    tensor_bytes: int = 4 << 30
    model_nodes: int = 1_000_000
    graph_nodes: int = 100_000
    iterations: int = 20_000
    depth: int = 16
    host_value_elements: int = 1024
    specializations: int = 32

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"OnnxLimits.{name} must be a positive int, got {value!r}")


DEFAULT_LIMITS = OnnxLimits()

#: INT attributes ONNX defines as 0/1 flags: any other value is refused rather than read as
#: true (onnxruntime reads some as ``== 1``, numpy-minded code as ``!= 0``).
_FLAGS = frozenset({
    "allowzero", "antialias", "ceil_mode", "center_point_box", "count_include_pad", "detect_negative",
    "detect_positive", "exclude_outside", "exclusive", "fmod", "input_forget", "interleaved", "is_case_sensitive",
    "is_causal", "keepdims", "largest", "linear_before_reset", "noop_with_empty_axes", "onesided", "reverse",
    "select_last_index", "sorted", "training_mode", "transA", "transB", "upper",
})


def tensor_array(tensor: onnx.TensorProto, what: str) -> np.ndarray:
    """The contents of ``tensor`` (an initializer or an attribute's tensor) as an array."""
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        raise GraphError(f"{what} keeps its data in an external file that was not loaded: load the model "
                         "from its path (external data is read only from the model's own folder)")
    try:
        return onnx.numpy_helper.to_array(tensor)
    except (ValueError, TypeError, KeyError, IndexError, OverflowError, MemoryError) as error:
        shape = list(tensor.dims)
        raise GraphError(f"{what} (dims {shape}, element type {tensor.data_type}) has data that does not "
                         f"match its dims or type: {error}") from None


def check_text(model: onnx.ModelProto) -> None:
    """Raise a :class:`GraphError` when a name, op type or domain is not valid UTF-8.

    ONNX's protobuf schema is proto2, whose string fields are not validated on parsing: a
    corrupted one comes back as ``bytes``, which nothing downstream expects.
    """
    fields: list[object] = [entry.domain for entry in model.opset_import]
    pending = [model.graph]
    while pending:
        graph = pending.pop()
        fields += [graph.name, *(tensor.name for tensor in graph.initializer)]
        fields += [value.name for value in (*graph.input, *graph.output, *graph.value_info)]
        for node in graph.node:
            fields += [node.op_type, node.domain, node.name, *node.input, *node.output]
            for attribute in node.attribute:
                fields.append(attribute.name)
                pending.extend([attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else attribute.graphs)
        bad = next((field for field in fields if not isinstance(field, str)), None)
        if bad is not None:
            raise GraphError(f"a name, op type or domain is not valid UTF-8 ({bad!r:.60}): a corrupted model?")
        fields = []


def validate_model(model: onnx.ModelProto, opsets: dict[str, int], limits: OnnxLimits = DEFAULT_LIMITS) -> None:
    """Raise a :class:`GraphError` naming the node for the first malformed part of ``model``
    (see the module docs).  Op types must already be known to be supported."""
    if not model.graph.output:
        raise GraphError("the model's graph has no outputs (is this an ONNX model? an empty file parses as "
                         "an empty one)")
    _Walk(opsets, limits).graph(model.graph, (), "graph", 0)


class _Walk:
    def __init__(self, opsets: dict[str, int], limits: OnnxLimits):
        self.opsets = opsets
        self.limits = limits
        self.nodes = 0

    def graph(self, graph: onnx.GraphProto, outer: Sequence[set[str]], where: str, depth: int) -> None:
        if depth > self.limits.depth:
            raise GraphError(f"{where}: subgraphs are nested {depth} deep, more than the limit of "
                             f"{self.limits.depth} (OnnxLimits.depth)")
        local: set[str] = set()
        initializers = set()
        for tensor in graph.initializer:
            self._define(tensor.name, local, (), f"{where}: initializer", allow_outer=True)
            initializers.add(tensor.name)
        for value in graph.input:
            if value.name not in initializers:  # an initializer may give a graph input its default
                self._define(value.name, local, (), f"{where}: input", allow_outer=True)
        scopes = (local, *outer)
        for index, node in enumerate(graph.node):
            self.node(node, index, scopes, where, depth)
        for value in graph.output:
            if not any(value.name in scope for scope in scopes):
                raise GraphError(f"{where}: output {value.name!r} is not produced by any node, input or "
                                 "initializer")

    def node(self, node: onnx.NodeProto, index: int, scopes: tuple[set[str], ...], where: str, depth: int) -> None:
        self.nodes += 1
        if self.nodes > self.limits.model_nodes:
            raise GraphError(f"the model has more than {self.limits.model_nodes} nodes (OnnxLimits.model_nodes)")
        label = f"{where}: node {node.op_type} {node.name or next((o for o in node.output if o), '#' + str(index))!r}"
        for name in node.input:
            if name and not any(name in scope for scope in scopes):
                raise GraphError(f"{label} reads {name!r}, which no earlier node, input or initializer produces")
        schema = onnx.defs.get_schema(node.op_type, self.opsets.get(node.domain or "", 0), node.domain)
        _check_arity(schema, node, label)
        given = set()
        for attribute in node.attribute:
            if attribute.name in given:
                raise GraphError(f"{label} sets attribute {attribute.name!r} twice")
            given.add(attribute.name)
            self.attribute(schema, attribute, label, scopes, depth)
        missing = sorted(name for name, declared in schema.attributes.items()
                         if declared.required and name not in given)
        if missing:
            raise GraphError(f"{label} lacks the required attribute(s) {missing} of {schema.name}")
        for name in node.output:
            if name:
                self._define(name, scopes[0], scopes[1:], label + " output", allow_outer=False)

    def attribute(self, schema: onnx.defs.OpSchema, attribute: onnx.AttributeProto, label: str,
                  scopes: tuple[set[str], ...], depth: int) -> None:
        declared = schema.attributes.get(attribute.name)
        if declared is None:
            raise GraphError(f"{label} has attribute {attribute.name!r}, which {schema.name} (since opset "
                             f"{schema.since_version}) does not define; it takes {sorted(schema.attributes)}")
        wanted = int(declared.type)  # type: ignore[call-overload]  # a pybind11 enum: int() works
        if attribute.type != wanted:
            got = onnx.AttributeProto.AttributeType.Name(attribute.type)
            raise GraphError(f"{label}: attribute {attribute.name!r} is of type {got}, {schema.name} takes "
                             f"{onnx.AttributeProto.AttributeType.Name(wanted)}")
        if attribute.name in _FLAGS and attribute.type == onnx.AttributeProto.INT and attribute.i not in (0, 1):
            raise GraphError(f"{label}: attribute {attribute.name!r} is a 0/1 flag, it is {attribute.i}")
        if attribute.type == onnx.AttributeProto.GRAPH:
            self.graph(attribute.g, scopes, f"{label} {attribute.name}", depth + 1)
        elif attribute.type == onnx.AttributeProto.GRAPHS:
            for position, subgraph in enumerate(attribute.graphs):
                self.graph(subgraph, scopes, f"{label} {attribute.name}[{position}]", depth + 1)

    @staticmethod
    def _define(name: str, local: set[str], outer: Sequence[set[str]], what: str, *, allow_outer: bool) -> None:
        if not name:
            raise GraphError(f"{what} has an empty name")
        if name in local:
            raise GraphError(f"{what} {name!r} is written twice in one graph (ONNX graphs assign each "
                             "name once)")
        if not allow_outer and any(name in scope for scope in outer):
            raise GraphError(f"{what} {name!r} shadows a value of an enclosing graph (ONNX forbids it)")
        local.add(name)


def _check_arity(schema: onnx.defs.OpSchema, node: onnx.NodeProto, label: str) -> None:
    for kind, count, low, high in (("inputs", len(node.input), schema.min_input, schema.max_input),
                                   ("outputs", len(node.output), schema.min_output, schema.max_output)):
        if not low <= count <= high:
            bounds = f"{low}" if low == high else f"{low} to {high}"
            raise GraphError(f"{label} has {count} {kind}; {schema.name} (since opset {schema.since_version}) "
                             f"takes {bounds}")
