"""The ONNX op table: ``op_type`` -> a converter per operator-set version, and the graph walk.

A converter is ``convert(ctx, node, inputs) -> outputs``: it reads the node's attributes,
emits catalog ops through the :class:`~aclpipe.onnx.context.BuildContext` ``ctx`` and
returns one value per node output (None for an optional output nobody asked for).  It is
registered for the schema versions whose semantics it implements:

.. code-block:: python

    @converts("Softmax", 11)          # opsets 11-12: coerce to 2-D, then softmax over dim 1
    def softmax_11(ctx, node, inputs): ...

    @converts("Softmax", 13)          # opsets 13+: softmax over ``axis``
    def softmax_13(ctx, node, inputs): ...

A node is looked up by its *schema version* at the model's opset (``onnx.defs.get_schema``),
so ``Softmax`` in an opset-15 model uses the converter registered for 13.  Versions are
registered from the one in effect at opset 11 (the oldest aclpipe reads) up; later versions
that only widened the type constraints (bfloat16, float8, int4 ...) are registered where the
converter handles them, since the types themselves are checked per value.

:func:`check_model` collects *every* unsupported (op type, opset) of a model into one
:class:`~aclpipe.errors.UnsupportedOpError`; :func:`emit_graph` walks a graph's nodes in
order through a context.
"""

from __future__ import annotations

import functools
from collections import ChainMap
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import onnx
import onnx.defs

from ..errors import UnsupportedOpError
from .context import BuildContext, OnnxNode
from .validate import tensor_array

__all__ = [
    "MIN_OPSET",
    "Converter",
    "UnsupportedNode",
    "check_model",
    "converts",
    "emit_graph",
    "lookup",
    "supported_ops",
    "unsupported_nodes",
]

Converter = Callable[[BuildContext, OnnxNode, list[Any]], list[Any]]

#: The oldest default-domain operator set aclpipe reads.
MIN_OPSET = 11
_DEFAULT_DOMAINS = ("", "ai.onnx")
_TABLE: dict[str, dict[int, Converter]] = {}


def converts(op_type: str, *since_versions: int) -> Callable[[Converter], Converter]:
    """Register the decorated converter for ``op_type`` at these schema versions."""
    def register(convert: Converter) -> Converter:
        versions = _TABLE.setdefault(op_type, {})
        for version in since_versions:
            if version in versions:
                raise ValueError(f"{op_type} version {version} has two converters")
            versions[version] = convert
        return convert
    return register


def supported_ops() -> dict[str, tuple[int, ...]]:
    """Every ONNX op type with a converter, and its supported schema versions."""
    return {op_type: tuple(sorted(versions)) for op_type, versions in sorted(_TABLE.items())}


@functools.lru_cache(maxsize=4096)
def since_version(op_type: str, opset: int, domain: str = "") -> int | None:
    """The schema version of ``op_type`` in effect at ``opset`` (None: no such op there)."""
    try:
        return int(onnx.defs.get_schema(op_type, opset, domain).since_version)
    except onnx.defs.SchemaError:
        return None


@dataclass(frozen=True)
class UnsupportedNode:
    """One reason a model cannot be imported, as listed by :func:`unsupported_nodes`."""

    op_type: str
    domain: str
    opset: int
    since_version: int | None
    why: str

    def describe(self) -> str:
        domain = f"{self.domain}::" if self.domain not in _DEFAULT_DOMAINS else ""
        return f"{domain}{self.op_type} (opset {self.opset}): {self.why}"


def lookup(op_type: str, opset: int, domain: str = "") -> tuple[Converter, int]:
    """The converter for ``op_type`` at ``opset`` and the schema version it implements.

    Raises
    ------
    UnsupportedOpError
        When aclpipe has no converter for that op at that version.
    """
    problem = _problem(op_type, domain, opset)
    if problem is not None:
        raise UnsupportedOpError(f"cannot import ONNX {problem.describe()}")
    version = since_version(op_type, opset, domain)
    assert version is not None
    return _TABLE[op_type][version], version


def _problem(op_type: str, domain: str, opset: int) -> UnsupportedNode | None:
    if domain not in _DEFAULT_DOMAINS:
        return UnsupportedNode(op_type, domain, opset, None, "only the default ONNX domain is supported")
    if opset < MIN_OPSET:
        return UnsupportedNode(op_type, domain, opset, None,
                               f"opsets below {MIN_OPSET} are not supported; upgrade the model with "
                               "onnx.version_converter.convert_version")
    version = since_version(op_type, opset, domain)
    if version is None:
        return UnsupportedNode(op_type, domain, opset, None, "not an ONNX operator at this opset")
    versions = _TABLE.get(op_type)
    if not versions:
        return UnsupportedNode(op_type, domain, opset, version, "no converter for this op type")
    if version not in versions:
        return UnsupportedNode(op_type, domain, opset, version,
                               f"schema version {version} has no converter (supported: "
                               f"{', '.join(map(str, sorted(versions)))})")
    return None


def model_opsets(model: onnx.ModelProto) -> dict[str, int]:
    """Domain -> opset of ``model`` (the default domain under ``""``)."""
    opsets = {("" if entry.domain == "ai.onnx" else entry.domain): int(entry.version)
              for entry in model.opset_import}
    opsets.setdefault("", MIN_OPSET)
    return opsets


def unsupported_nodes(graph: onnx.GraphProto, opsets: Mapping[str, int]) -> list[UnsupportedNode]:
    """Every distinct (op type, domain, opset) in ``graph`` (subgraphs included) that has no converter."""
    found: dict[tuple[str, str], UnsupportedNode] = {}
    for proto in _all_nodes(graph):
        domain = "" if proto.domain == "ai.onnx" else proto.domain
        opset = opsets.get(domain, 0)
        problem = _problem(proto.op_type, domain, opset)
        if problem is not None:
            found.setdefault((proto.op_type, domain), problem)
    return list(found.values())


def _all_nodes(graph: onnx.GraphProto) -> Iterable[onnx.NodeProto]:
    for proto in graph.node:
        yield proto
        for attribute in proto.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(attribute.g)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for subgraph in attribute.graphs:
                    yield from _all_nodes(subgraph)


def check_model(model: onnx.ModelProto) -> None:
    """Raise one :class:`UnsupportedOpError` listing every unsupported op type of ``model``."""
    problems = unsupported_nodes(model.graph, model_opsets(model))
    if problems:
        lines = "\n".join(f"  - {problem.describe()}" for problem in problems)
        raise UnsupportedOpError(f"the ONNX model uses {len(problems)} unsupported op type(s):\n{lines}")


def convert_node(ctx: BuildContext, proto: onnx.NodeProto, inputs: list[Any], opset: int,
                 scope: Mapping[str, Any] | None = None) -> list[Any]:
    """Convert one node; returns one value per listed output.  ``scope`` holds the values the
    node's subgraphs (If branches, Loop bodies) may read by name."""
    convert, version = lookup(proto.op_type, opset, proto.domain)
    node = OnnxNode.from_proto(proto, opset, version, scope)
    outputs = list(convert(ctx, node, inputs))
    if len(outputs) < node.num_outputs:
        outputs.extend([None] * (node.num_outputs - len(outputs)))
    for index, (value, wanted) in enumerate(zip(outputs, node.wanted)):
        if wanted and value is None:
            raise node.unsupported(f"output {index} ({proto.output[index]!r}) is not produced by aclpipe")
    return outputs[:node.num_outputs]


def emit_graph(ctx: BuildContext, graph: onnx.GraphProto, feeds: Mapping[str, Any],
               opsets: Mapping[str, int], scope: Mapping[str, Any] | None = None) -> MutableMapping[str, Any]:
    """Walk ``graph`` through ``ctx``: initializers become constants, ``feeds`` give the graph
    inputs by name, other names are read from ``scope`` (the enclosing graphs' values, for a
    subgraph); returns every value by name (the graph outputs among them)."""
    local: dict[str, Any] = {}
    for initializer in graph.initializer:
        local[initializer.name] = ctx.constant(tensor_array(initializer, f"initializer {initializer.name!r}"))
    local.update(feeds)
    values: MutableMapping[str, Any] = local if scope is None else ChainMap(local, scope)  # type: ignore[arg-type]
    for proto in graph.node:
        inputs = []
        for name in proto.input:
            if name and name not in values:
                raise UnsupportedOpError(f"ONNX node {proto.op_type} {proto.name!r} reads {name!r}, which no "
                                         "earlier node, input or initializer produces")
            inputs.append(values[name] if name else None)
        domain = "" if proto.domain == "ai.onnx" else proto.domain
        outputs = convert_node(ctx, proto, inputs, opsets.get(domain, 0), values)
        for name, value in zip(proto.output, outputs):
            if name:
                values[name] = value
    return values
