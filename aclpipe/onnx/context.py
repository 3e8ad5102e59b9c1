"""What an ONNX converter may use: the build context, the node it converts, and its errors.

A converter turns one ONNX node into catalog ops.  It never touches a device or a graph
directly; it talks to a :class:`BuildContext`, whose small interface two implementations share:

- :class:`aclpipe.eager.onnx_eval.EagerContext` evaluates every op at once through
  :class:`~aclpipe.eager.OpRunner` (values are numpy arrays); the conformance tests use it;
- a graph-building context (the model importer) adds nodes to an :class:`aclpipe.graph.Graph`
  (values are graph values with known shapes).

Values are opaque to converters: they only pass them back to the context and ask for their
``shape``/``dtype``.  Inputs that ONNX passes as tensors but that decide *structure* (Reshape's
shape, Slice's starts, Split's sizes, Reduce axes, ...) are read with
:meth:`BuildContext.static_value`, which a graph context answers for constants only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import onnx

from ..dtypes import DType
from ..errors import UnsupportedOpError
from .validate import tensor_array

__all__ = ["DTYPE_TO_ONNX", "ONNX_TO_DTYPE", "BuildContext", "OnnxNode", "UnsupportedFeature", "onnx_dtype"]

ONNX_TO_DTYPE: dict[int, DType] = {
    onnx.TensorProto.FLOAT: DType.float32,
    onnx.TensorProto.FLOAT16: DType.float16,
    onnx.TensorProto.BFLOAT16: DType.bfloat16,
    onnx.TensorProto.INT8: DType.int8,
    onnx.TensorProto.UINT8: DType.uint8,
    onnx.TensorProto.INT32: DType.int32,
    onnx.TensorProto.INT64: DType.int64,
    onnx.TensorProto.BOOL: DType.bool,
}
DTYPE_TO_ONNX: dict[DType, int] = {dtype: code for code, dtype in ONNX_TO_DTYPE.items()}


class UnsupportedFeature(UnsupportedOpError):
    """A node uses a feature aclpipe does not implement (a dtype, an attribute value, training
    mode, ...).  The message names the node, the feature and, where there is one, what to do."""

    def __init__(self, node: OnnxNode | None, feature: str):
        self.node = node
        self.feature = feature
        where = f"{node.describe()}: " if node is not None else ""
        super().__init__(f"{where}{feature}")


def onnx_dtype(code: int, node: OnnxNode | None = None) -> DType:
    """The aclpipe dtype of an ONNX ``TensorProto`` element type."""
    if code in ONNX_TO_DTYPE:
        return ONNX_TO_DTYPE[code]
    name = onnx.TensorProto.DataType.Name(code) if code in onnx.TensorProto.DataType.values() else str(code)
    raise UnsupportedFeature(node, f"element type {name} is not an aclpipe dtype "
                                   f"(supported: {', '.join(d.name for d in ONNX_TO_DTYPE.values())})")


@dataclass
class OnnxNode:
    """One ONNX node as a converter sees it.

    Attributes
    ----------
    op_type, name, domain:
        From the NodeProto.
    version:
        The operator set version the node is read with (the model's opset for its domain).
    since_version:
        The version of the operator's schema in effect at ``version`` (what the converter
        implements).
    attrs:
        Attribute values (strings decoded, tensors as numpy arrays).
    num_outputs:
        How many outputs the node lists (an empty name, an unused optional output, counts).
    wanted:
        Which outputs have a name (optional outputs with an empty name are not wanted).
    scope:
        The values visible where the node is (its graph's and the enclosing graphs'), by
        name: what the node's subgraphs (If branches, Loop and Scan bodies) may read.
    """

    op_type: str
    name: str = ""
    domain: str = ""
    version: int = 0
    since_version: int = 0
    attrs: dict[str, Any] = field(default_factory=dict)
    num_outputs: int = 1
    wanted: tuple[bool, ...] = (True,)
    scope: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_proto(cls, proto: onnx.NodeProto, version: int, since_version: int,
                   scope: Mapping[str, Any] | None = None) -> OnnxNode:
        attrs = {attribute.name: _attribute_value(attribute) for attribute in proto.attribute}
        return cls(proto.op_type, proto.name, proto.domain, version, since_version, attrs, len(proto.output),
                   tuple(bool(output) for output in proto.output), scope if scope is not None else {})

    def attr(self, name: str, default: Any = None) -> Any:
        """The attribute ``name`` or ``default`` when the node does not set it."""
        return self.attrs.get(name, default)

    def describe(self) -> str:
        label = f" {self.name!r}" if self.name else ""
        return f"{self.op_type}{label} (opset {self.version})"

    def unsupported(self, feature: str) -> UnsupportedFeature:
        """The error for a feature of this node that aclpipe does not implement."""
        return UnsupportedFeature(self, feature)


def _attribute_value(attribute: onnx.AttributeProto) -> Any:
    value = onnx.helper.get_attribute_value(attribute)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, onnx.TensorProto):
        return tensor_array(value, f"attribute {attribute.name!r}")
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [item.decode() for item in value]
    return value


class BuildContext(Protocol):
    """The interface converters emit catalog ops through.

    ``Value`` below is whatever the context uses for a tensor (a numpy array for the eager
    context, a graph value for a graph context); converters treat it as opaque.
    """

    def op(self, name: str, *inputs: Any, outputs: int = 1, **attrs: Any) -> Any:
        """Emit catalog op ``name`` on ``inputs`` (None for an absent optional tensor) with
        ``attrs``; returns one value, or a tuple of ``outputs`` values when ``outputs > 1``.
        Output shapes and dtypes are the op's inferred ones."""
        ...

    def constant(self, array: np.ndarray) -> Any:
        """A value holding ``array`` (its dtype must be an aclpipe dtype)."""
        ...

    def shape(self, value: Any) -> tuple[int, ...]:
        """The value's shape (always known: models are imported for concrete input shapes)."""
        ...

    def dtype(self, value: Any) -> DType:
        """The value's dtype."""
        ...

    def static_value(self, value: Any, what: str) -> np.ndarray:
        """The contents of ``value`` at build time, for inputs that decide structure; raises
        :class:`UnsupportedFeature` naming ``what`` when the context cannot know them."""
        ...

    def subgraph(self, graph: onnx.GraphProto, feeds: Mapping[str, Any], scope: Mapping[str, Any],
                 label: str) -> list[Any]:
        """Convert ``graph`` (an If branch, a Loop or Scan body) in place: its inputs are bound to
        ``feeds``, other names it reads come from ``scope`` (``node.scope``); returns the values of
        its outputs.  ``label`` names the part in node names (``then``, ``iteration 3``)."""
        ...


def static_ints(ctx: BuildContext, value: Any, what: str) -> list[int]:
    """A 1-D integer tensor known at build time, as Python ints."""
    array = np.asarray(ctx.static_value(value, what))
    return [int(item) for item in array.reshape(-1)]


def normalize_axis(node: OnnxNode, axis: int, rank: int, what: str = "axis") -> int:
    """``axis`` in ``[-rank, rank)`` as a non-negative index (ONNX's rule)."""
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"{node.describe()}: {what} {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


def normalize_axes(node: OnnxNode, axes: Sequence[int], rank: int, what: str = "axes") -> list[int]:
    return [normalize_axis(node, int(axis), rank, what) for axis in axes]
