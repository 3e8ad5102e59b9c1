"""Graph, Node and Value: the DAG a user builds, one catalog op per node.

A :class:`Graph` is built call by call and stays editable until it is bound::

    g = aclpipe.Graph("mlp")
    x = g.input("x", shape=("batch", 784), dtype="float16")
    w = g.constant("w1", weights)                  # numpy array, an NPU dtype
    h = g.relu(g.matmul(x, w))                     # one builder method per catalog op
    g.output("y", h)
    bound = g.bind(x=(32, 784))                    # concrete shapes: a frozen BoundGraph

Builder methods are generated from the operator catalog (``g.layer_norm`` is ``LayerNorm``);
:meth:`Graph.op` is the generic form.  Values are produced in node order, so a graph built
this way has no cycles; files may list nodes in any order and are sorted on load.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from ..dtypes import DType, as_dtype
from ..errors import GraphError
from ..gc_pause import paused_gc
from ..ops.base import OpSpec
from ..tensor import TensorDesc
from .builder import (
    Dim,
    Shape,
    ValueInfo,
    builder_names,
    freeze_attrs,
    infer_outputs,
    is_list_argument,
    resolve_op,
    snake_case,
)
from .signature import Signature

if TYPE_CHECKING:
    from .bound import BoundGraph

__all__ = ["Graph", "InputSpec", "Node", "Value"]


@dataclass(frozen=True)
class InputSpec:
    """A graph input: its name, shape (ints, and ``None`` or names for dims fixed at prepare
    time) and dtype."""

    name: str
    shape: Shape
    dtype: DType


@dataclass(frozen=True, eq=False)
class Value:
    """A tensor in a graph: a graph input, a constant, or an output of a node.

    ``desc`` is the descriptor (address 0) when every dimension upstream is concrete, else
    ``None``; ``shape`` then holds what is known (symbol names for dims fixed at prepare time,
    ``None`` for a dim not known yet).
    """

    name: str
    graph: Graph = field(repr=False)
    kind: str  # "input" | "constant" | "node"
    producer: str | None
    dtype: DType | None
    shape: Shape | None
    desc: TensorDesc | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        dims = "?" if self.shape is None else ", ".join("?" if d is None else str(d) for d in self.shape)
        return f"Value({self.name!r}, {self.dtype.name if self.dtype is not None else '?'}[{dims}])"


@dataclass(frozen=True)
class Node:
    """One operator call: value names in the op's argument order (``None`` for an optional
    argument not given, or an optional output not produced)."""

    name: str
    op: str
    inputs: tuple[str | None, ...]
    outputs: tuple[str | None, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict, hash=False)


class Graph:
    """A DAG of catalog operators with named inputs, constants and outputs.

    Parameters
    ----------
    name:
        The graph's name (used in messages, plans and files).
    """

    def __init__(self, name: str = "graph"):
        self.name = name
        self._inputs: dict[str, InputSpec] = {}
        self._constants: dict[str, np.ndarray] = {}
        # How a constant loaded from a file was made, so that save() writes it back the same way.
        self._constant_sources: dict[str, dict[str, Any]] = {}
        self._nodes: dict[str, Node] = {}
        self._values: dict[str, Value] = {}
        self._outputs: dict[str, str] = {}
        self._op_counts: dict[str, int] = {}
        self._bound: dict[tuple[Any, ...], BoundGraph] = {}
        #: Signatures of input shapes already checked (a run looks its program up by one).
        self._signatures: dict[tuple[Any, ...], Signature] = {}
        #: Contents of the host-value inputs this graph was specialized for (an imported ONNX
        #: model's specializations; see :mod:`aclpipe.graph.signature`); they are constants here.
        self.host_values: Mapping[str, np.ndarray] = MappingProxyType({})

    # -- read access ---------------------------------------------------------------------
    @property
    def inputs(self) -> Mapping[str, InputSpec]:
        return MappingProxyType(self._inputs)

    @property
    def constants(self) -> Mapping[str, np.ndarray]:
        return MappingProxyType(self._constants)

    @property
    def nodes(self) -> tuple[Node, ...]:
        """Nodes in insertion order (always a topological order)."""
        return tuple(self._nodes.values())

    @property
    def values(self) -> Mapping[str, Value]:
        return MappingProxyType(self._values)

    @property
    def outputs(self) -> Mapping[str, str]:
        """Output name -> value name."""
        return MappingProxyType(self._outputs)

    @property
    def host_inputs(self) -> frozenset[str]:
        """Inputs whose contents, not only their shapes, decide the graph (host values, see
        :mod:`aclpipe.graph.signature`): none for a graph built node by node."""
        return frozenset()

    def value(self, name: str) -> Value:
        """The value called ``name`` (an input, a constant or a node output)."""
        try:
            return self._values[name]
        except KeyError:
            raise GraphError(f"graph {self.name!r} has no value {name!r}") from None

    def __repr__(self) -> str:
        return (f"Graph({self.name!r}: {len(self._inputs)} inputs, {len(self._constants)} constants, "
                f"{len(self._nodes)} nodes, {len(self._outputs)} outputs)")

    # -- building ------------------------------------------------------------------------
    def input(self, name: str, shape: Sequence[Dim], dtype: Any = "float32") -> Value:
        """Declare a graph input.

        ``shape`` holds ints, and ``None`` or a name for each dimension fixed at prepare time;
        dims with the same name must get the same size when the graph is bound.
        """
        self._claim(name, "input")
        dims = tuple(_check_dim(name, dim, axis) for axis, dim in enumerate(shape))
        try:
            npu_dtype = as_dtype(dtype)
        except TypeError as error:
            raise GraphError(f"input {name!r}: {error}") from None
        # An anonymous dynamic dim is a symbol of its own, so probing can follow it.
        named = tuple(f"{name}.{axis}" if dim is None else dim for axis, dim in enumerate(dims))
        self._inputs[name] = InputSpec(name, dims, npu_dtype)
        concrete = all(isinstance(d, int) for d in dims)
        desc = TensorDesc.contiguous(tuple(int(d) for d in dims), npu_dtype) if concrete else None  # type: ignore[arg-type]
        return self._add_value(Value(name, self, "input", None, npu_dtype, named, desc))

    def constant(self, name: str, array: Any) -> Value:
        """Declare a weight: a numpy array (copied, read-only) of an NPU dtype."""
        return self._add_constant(name, array, None)

    def _add_constant(self, name: str, array: Any, source: dict[str, Any] | None) -> Value:
        self._claim(name, "constant")
        data = np.array(array, copy=True)
        try:
            dtype = as_dtype(data.dtype)
        except TypeError as error:
            raise GraphError(f"constant {name!r}: {error}") from None
        data.setflags(write=False)
        self._constants[name] = data
        if source is not None:
            self._constant_sources[name] = source
        desc = TensorDesc.contiguous(data.shape, dtype)
        return self._add_value(Value(name, self, "constant", None, dtype, desc.shape, desc))

    def op(self, op_name: str, *inputs: Any, name: str | None = None,
           outputs: Sequence[str | None] | None = None, **attrs: Any) -> Value | tuple[Value, ...]:
        """Add a node calling catalog op ``op_name``.

        Parameters
        ----------
        op_name:
            The aclnn name (``"Matmul"``, ``"LayerNorm"``).
        *inputs:
            Values in the op's argument order; ``None`` skips an optional one.  Keyword
            arguments named like an op input (``biasOptional=b``) are inputs too.
        name:
            Node name; defaults to ``"<op>_<n>"`` (``matmul_0``).
        outputs:
            Names for the outputs; naming an optional output (``meanOutOptional``) asks for it.
        **attrs:
            The op's attributes.

        Returns
        -------
        The output value, or a tuple of values when the op produces several.
        """
        spec = resolve_op(op_name, name)
        named_inputs = {key: attrs.pop(key) for key in list(attrs) if key in spec.inputs}
        return self._add_node(spec, inputs, named_inputs, name, outputs, attrs)

    def _add_node(self, spec: OpSpec, inputs: Sequence[Any], named_inputs: Mapping[str, Any], name: str | None,
                  outputs: Sequence[str | None] | None, attrs: Mapping[str, Any]) -> Value | tuple[Value, ...]:
        node_name = self._node_name(spec, name)
        frozen = freeze_attrs(attrs)
        problem = spec.unknown_attrs(frozen) if frozen else None  # most nodes have no attributes
        if problem is not None:
            raise GraphError(f"node {node_name!r} ({spec.name}): {problem}")
        values = self._collect_inputs(node_name, spec, inputs, named_inputs)
        structure = infer_outputs(spec, node_name, values, frozen)  # values are what inference reads
        names = self._output_names(node_name, spec, structure, outputs)
        produced = [self._add_value(Value(out, self, "node", node_name, *self._info(structure, slot)))
                    for slot, out in enumerate(names) if out is not None]
        if name is None:  # count only nodes that were added, so a refused call leaves no gap
            stem = snake_case(spec.name)
            self._op_counts[stem] = int(node_name[len(stem) + 1:]) + 1
        self._nodes[node_name] = Node(node_name, spec.name, tuple(v.name if v else None for v in values),
                                      tuple(names), MappingProxyType(frozen))
        self._bound.clear()
        if len(produced) == 1 and not is_list_argument(spec.outputs[0] if spec.outputs else ""):
            return produced[0]
        return tuple(produced)

    def output(self, name: str, value: Value) -> None:
        """Mark ``value`` as the graph output called ``name``."""
        if not isinstance(value, Value):
            raise GraphError(f"output {name!r} is given {type(value).__name__} {value!r}, not a Value: "
                             "pass what a builder method (g.input, g.matmul, ...) returned")
        self._check_own(value, f"output {name!r}")
        if name in self._outputs:
            raise GraphError(f"graph {self.name!r} already has an output {name!r} "
                             f"(value {self._outputs[name]!r}): output names must be unique")
        self._outputs[name] = value.name
        self._bound.clear()

    # -- binding and files ---------------------------------------------------------------
    def signature(self, **inputs: Any) -> Signature:
        """What a program prepared for these inputs (shapes, or arrays) is specific to: their
        shapes, and the contents of :attr:`host_inputs`.  Raises :class:`GraphError` for shapes
        that do not fit the declared inputs."""
        from .bound import normalize_shapes

        try:  # every run asks: shapes seen before skip the checks
            key = tuple((name, getattr(value, "shape", value)) for name, value in inputs.items())
            known = self._signatures.get(key)
        except TypeError:  # unhashable (a list of dims): checked below, not cached
            key, known = (), None
        if known is not None:
            return known
        signature = Signature.of(normalize_shapes(self, inputs))
        if key and len(self._signatures) < 1024:
            self._signatures[key] = signature
        return signature

    def bind(self, **input_shapes: Any) -> BoundGraph:
        """Specialize the graph to concrete input shapes (tuples, or arrays whose shape is used).

        The result is cached per input signature.  Raises :class:`GraphError` naming the
        node on any shape or dtype problem.
        """
        from .bound import bind_graph, normalize_shapes

        shapes = normalize_shapes(self, input_shapes)
        key = tuple(sorted(shapes.items()))
        if key not in self._bound:
            with paused_gc():  # a bound node and value per node, all kept (see aclpipe.gc_pause)
                self._bound[key] = bind_graph(self, shapes)
        return self._bound[key]

    def save(self, path: str | Path) -> None:
        """Write the graph as YAML (``.yaml``/``.yml``) or JSON (``.json``); see :mod:`aclpipe.graph.files`."""
        from .files import save_graph

        save_graph(self, path)

    def __getattr__(self, attribute: str) -> Callable[..., Any]:
        if attribute.startswith("_"):
            raise AttributeError(attribute)
        names = builder_names()
        op_name = names.get(attribute) or {op.lower(): op for op in names.values()}.get(attribute.lower())
        if op_name is None:
            import difflib

            close = difflib.get_close_matches(attribute, list(names), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise AttributeError(f"Graph has no builder {attribute!r}: no catalog op of that name{hint}")

        def builder(*inputs: Any, name: str | None = None, outputs: Sequence[str | None] | None = None,
                    **attrs: Any) -> Value | tuple[Value, ...]:
            return self.op(op_name, *inputs, name=name, outputs=outputs, **attrs)

        builder.__name__ = attribute
        builder.__doc__ = f"Add a {op_name} node (see Graph.op)."
        return builder

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(builder_names()))

    # -- helpers -------------------------------------------------------------------------
    def _claim(self, name: str, what: str) -> None:
        if not isinstance(name, str) or not name:
            raise GraphError(f"{what} name must be a non-empty string, got {name!r}")
        if name in self._values or name in self._nodes:
            raise GraphError(f"duplicate name {name!r} in graph {self.name!r}: "
                             f"it is already {self._describe(name)}; names must be unique")

    def _describe(self, name: str) -> str:
        if name in self._inputs:
            return "an input"
        if name in self._constants:
            return "a constant"
        if name in self._nodes:
            return f"a node ({self._nodes[name].op})"
        return f"an output of node {self._values[name].producer!r}"

    def _add_value(self, value: Value) -> Value:
        self._values[value.name] = value
        self._bound.clear()
        self._signatures.clear()  # a new input changes what shapes fit
        return value

    def _check_own(self, value: Value, where: str) -> None:
        if value.graph is not self:
            raise GraphError(f"{where}: dangling value {value.name!r}: it belongs to graph "
                             f"{value.graph.name!r}, not {self.name!r}")

    def _node_name(self, spec: OpSpec, name: str | None) -> str:
        if name is not None:
            self._claim(name, "node")
            return name
        stem = snake_case(spec.name)
        count = self._op_counts.get(stem, 0)
        while f"{stem}_{count}" in self._values or f"{stem}_{count}" in self._nodes:
            count += 1
        return f"{stem}_{count}"

    def _collect_inputs(self, node: str, spec: OpSpec, inputs: Sequence[Any],
                        named: Mapping[str, Any]) -> list[Value | None]:
        slots = spec.inputs
        listed = len(slots) == 1 and is_list_argument(slots[0])
        if (not listed and not named and len(inputs) == len(slots)
                and all(type(value) is Value and value.graph is self for value in inputs)):
            return list(inputs)  # the common case: a value of this graph for every argument, in order
        if listed and len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
            inputs = tuple(inputs[0])
        if not listed and len(inputs) > len(slots):
            raise GraphError(f"node {node!r} ({spec.name}): takes {len(slots)} inputs "
                             f"({', '.join(slots)}), got {len(inputs)}")
        given: list[Any] = list(inputs) + [None] * (len(slots) - len(inputs)) if not listed else list(inputs)
        for key, value in named.items():
            index = slots.index(key)
            if given[index] is not None:
                raise GraphError(f"node {node!r} ({spec.name}): input {key!r} given twice")
            given[index] = value
        while not listed and given and given[-1] is None:
            given.pop()  # trailing optional inputs not given
        for index, value in enumerate(given):
            slot = slots[0] if listed else slots[index]
            if value is not None and not isinstance(value, Value):
                hint = " (wrap arrays with g.constant(name, array))" if isinstance(value, np.ndarray) else ""
                raise GraphError(f"node {node!r} ({spec.name}): input {slot!r} is {type(value).__name__}, "
                                 f"not a Value{hint}")
            if value is not None:
                self._check_own(value, f"node {node!r} ({spec.name}) input {slot!r}")
        return given

    def _output_names(self, node: str, spec: OpSpec, structure: list[ValueInfo | None] | None,
                      requested: Sequence[str | None] | None) -> list[str | None]:
        listed = bool(spec.outputs) and is_list_argument(spec.outputs[0])
        if structure is None and listed and requested is None:
            raise GraphError(f"node {node!r} ({spec.name}): the number of outputs depends on shapes that are "
                             "fixed only at bind time: name them with outputs=[...] or use fixed sizes")
        count = len(requested) if structure is None and listed and requested is not None else \
            len(structure) if structure is not None else len(spec.outputs)
        slot_names = [spec.outputs[0] if listed else spec.outputs[i] for i in range(count)]
        if requested is not None:
            return self._named_outputs(node, spec, structure, list(requested), slot_names)
        wanted = [i for i in range(count) if not slot_names[i].endswith("Optional")
                  and (structure is None or structure[i] is not None)]
        single = len(wanted) == 1 and not listed
        names: list[str | None] = [None] * count
        for i in wanted:
            names[i] = node if single else f"{node}:{i}"
        for value_name in names:
            if value_name is not None and value_name != node:
                self._claim(value_name, "output")
        return names

    def _named_outputs(self, node: str, spec: OpSpec, structure: list[ValueInfo | None] | None,
                       requested: list[str | None], slot_names: list[str]) -> list[str | None]:
        if len(requested) > len(slot_names):
            raise GraphError(f"node {node!r} ({spec.name}): gives {len(slot_names)} outputs "
                             f"({', '.join(slot_names)}), {len(requested)} names given")
        requested += [None] * (len(slot_names) - len(requested))
        for index, value_name in enumerate(requested):
            slot = slot_names[index]
            if value_name is None and not slot.endswith("Optional"):
                raise GraphError(f"node {node!r} ({spec.name}): output {slot!r} is not optional: give it a name")
            if value_name is not None and structure is not None and structure[index] is None:
                raise GraphError(f"node {node!r} ({spec.name}): output {slot!r} ({value_name!r}) is not "
                                 "produced with these attributes")
            if value_name is not None and value_name != node:
                self._claim(value_name, "output")
        taken = [n for n in requested if n is not None]
        if len(set(taken)) != len(taken):
            raise GraphError(f"node {node!r} ({spec.name}): duplicate output names {taken}")
        return requested

    @staticmethod
    def _info(structure: list[ValueInfo | None] | None, slot: int
              ) -> tuple[DType | None, Shape | None, TensorDesc | None]:
        info = structure[slot] if structure is not None else None
        if info is None:
            return None, None, None
        return info.dtype, info.shape, info.desc


def _check_dim(name: str, dim: Any, axis: int) -> Dim:
    if dim is None or (isinstance(dim, str) and dim):
        return dim
    if isinstance(dim, (int, np.integer)) and not isinstance(dim, bool) and dim >= 0:
        return int(dim)
    raise GraphError(f"input {name!r}: dim {axis} is {dim!r}: expected a size >= 0, None, "
                     "or a name for a dim fixed at prepare time")
