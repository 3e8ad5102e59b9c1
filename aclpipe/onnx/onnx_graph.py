"""``OnnxGraph``: an imported model whose catalog nodes are made per signature.

A signature is the input shapes and the contents of the host-value inputs
(:class:`~aclpipe.graph.Signature`).  For each new one the ONNX graph (the template) is
replayed through :class:`~aclpipe.onnx.graph_context.GraphContext` with every shape concrete,
so shape arithmetic and constant subgraphs fold and only tensor work reaches the device.

Host values.  Some models feed a small graph input where aclnn takes a host array (Reshape's
shape, Slice's starts, Split's sizes, Reduce axes, TopK's k, an If condition, a Loop's trip
count...).  Like TensorRT's shape tensors, such inputs are *host values*: found the first time
a specialization needs one (:class:`~aclpipe.onnx.graph_context.HostValueNeeded`), listed in
:attr:`OnnxGraph.host_inputs`, passed as ordinary run inputs, and part of the signature: the
graph is specialized per (input shapes, host values), their contents become constants, and
they are never copied to the device.  At most ``OnnxLimits.specializations`` specializations
are kept (least recently used dropped first; a dropped one is rebuilt when asked for again).

Declared inputs.  A ``dim_param`` becomes a named dim, an unknown dim ``None``; the "unknown"
forms exporters write (``dim_value: -1``, ``dim_param: "?"``) are dynamic dims too, the
negative ones with a :class:`DynamicDimWarning` naming the input.
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import onnx

from ..dtypes import DType
from ..errors import GraphError, UnsupportedOpError
from ..graph import BoundGraph, Graph, Node, Value
from ..graph.bound import normalize_shapes
from ..graph.builder import Dim
from ..graph.signature import Signature
from .context import onnx_dtype
from .fold import Folded
from .graph_context import GraphContext, HostValueNeeded, emit_model, prune
from .mapping import model_opsets
from .validate import DEFAULT_LIMITS, OnnxLimits, tensor_array

__all__ = ["DynamicDimWarning", "OnnxGraph", "naming"]


class DynamicDimWarning(UserWarning):
    """A graph input declares a dim with a negative size (``dim_value: -1``); it is read as a
    dynamic dim."""


@contextlib.contextmanager
def naming(source: str) -> Iterator[None]:
    """GraphErrors raised inside start with ``source`` (the model's path), once."""
    try:
        yield
    except GraphError as error:
        if not source or str(error).startswith(f"{source}: "):
            raise
        raise GraphError(f"{source}: {error}") from error


class OnnxGraph(Graph):
    """A graph imported from ONNX: declared inputs, the initializers as constants, the model's
    outputs, and catalog nodes made per signature (see the module docs).

    Use :meth:`specialize` to see the catalog graph for given inputs (shapes, and the contents
    of the :attr:`host_inputs`); :meth:`bind` (what :class:`~aclpipe.Pipeline` calls) binds
    that graph.  Builder methods are refused: edit a specialized graph instead.
    """

    def __init__(self, model: onnx.ModelProto, name: str, input_shapes: Mapping[str, Sequence[Dim]], *,
                 fold_limit: int | None = None, limits: OnnxLimits = DEFAULT_LIMITS, source: str = "",
                 rewrites: Sequence[str] = ()):
        super().__init__(name)
        self.model = model
        #: What the importer rewrote before ``model`` (one line each, e.g. a folded Conv + BatchNormalization).
        self.rewrites = tuple(rewrites)
        self.opsets = dict(model_opsets(model))
        self.limits = limits if fold_limit is None else dataclasses.replace(limits, fold_bytes=fold_limit)
        self.fold_limit = self.limits.fold_bytes
        self.source = source
        self._specialized: OrderedDict[Signature, Graph] = OrderedDict()
        self._host: dict[str, str] = {}  # host-value input -> what reads it
        initializers = {tensor.name for tensor in model.graph.initializer}
        declared = [value for value in model.graph.input if value.name not in initializers]
        unknown = sorted(set(input_shapes) - {value.name for value in declared})
        if unknown:
            raise GraphError(f"input_shapes names {unknown}, which are not inputs of the model "
                             f"(inputs: {[value.name for value in declared]})")
        for value in declared:
            dims, dtype = _declared(value)
            super().input(value.name, _override(value.name, dims, input_shapes.get(value.name)), dtype)
        for tensor in model.graph.initializer:
            super().constant(tensor.name, tensor_array(tensor, f"initializer {tensor.name!r}"))
        self._onnx_outputs = MappingProxyType({value.name: value.name for value in model.graph.output})
        if self._fixed_dims:
            try:
                self.specialize()  # every shape is known: validate (and build) now
            except _HostValueMissing:
                pass  # the model has host values: it is specialized when their contents are known

    # -- what the graph is -----------------------------------------------------------------
    @property
    def outputs(self) -> Mapping[str, str]:
        """Output names, as in the model (values exist per specialization)."""
        return self._onnx_outputs

    @property
    def host_inputs(self) -> frozenset[str]:
        """The inputs found to be host values so far (see the module docs); :attr:`host_reasons`
        says what reads each."""
        return frozenset(self._host)

    @property
    def host_reasons(self) -> Mapping[str, str]:
        """Host-value input -> what needs its contents (``"Reshape 'r' (opset 17): Reshape's shape"``)."""
        return MappingProxyType(dict(self._host))

    @property
    def _fixed_dims(self) -> bool:
        return all(isinstance(dim, int) for spec in self.inputs.values() for dim in spec.shape)

    @property
    def is_static(self) -> bool:
        """Whether every input dim is fixed and no input is a host value (then the graph is
        specialized at load)."""
        return self._fixed_dims and not self._host

    @property
    def nodes(self) -> tuple[Node, ...]:
        """The catalog nodes when the graph is static; otherwise ``()`` (nodes are made per
        signature: see :meth:`specialize`)."""
        return self.specialize().nodes if self.is_static else ()

    @property
    def signatures(self) -> int:
        """How many signatures are specialized (and kept: at most ``limits.specializations``)."""
        return len(self._specialized)

    def __repr__(self) -> str:
        inputs = ", ".join(f"{n}: {s.dtype.name}[{', '.join('?' if d is None else str(d) for d in s.shape)}]"
                           + (" (host value)" if n in self._host else "") for n, s in self.inputs.items())
        return (f"OnnxGraph({self.name!r}: inputs [{inputs}], {len(self.constants)} initializers, "
                f"{len(self.model.graph.node)} ONNX nodes, outputs {list(self.outputs)}, "
                f"{self.signatures} specialization(s))")

    # -- specializing ----------------------------------------------------------------------
    def signature(self, **inputs: Any) -> Signature:
        """The signature of these inputs: shapes (tuples, or arrays) and the contents of the host
        values (arrays; their declared dtype).  Specializes the graph when the signature is new
        (finding any further host values)."""
        return self._lookup(inputs)[0]

    def specialize(self, **inputs: Any) -> Graph:
        """The catalog graph for these inputs (as :meth:`signature` takes them; optional for
        inputs whose dims are all fixed), with shape arithmetic, constant subgraphs and host
        values folded.  Cached (least recently used dropped beyond ``limits.specializations``)."""
        return self._lookup(inputs)[1]

    def bind(self, **inputs: Any) -> BoundGraph:
        """Specialize to these inputs and bind; see :meth:`Graph.bind`.  Host values are given
        as arrays (their contents), the other inputs as shapes or arrays."""
        signature, graph = self._lookup(inputs)
        return graph.bind(**signature.device_shapes)

    def _lookup(self, inputs: dict[str, Any]) -> tuple[Signature, Graph]:
        for input_name, spec in self.inputs.items():
            if input_name not in inputs and all(isinstance(d, int) for d in spec.shape):
                inputs[input_name] = tuple(spec.shape)
        with naming(self.source):
            shapes = normalize_shapes(self, inputs)
            while True:  # each pass that finds new host values builds again with their contents
                signature = Signature.of(shapes, {name: self._host_array(name, inputs[name]) for name in self._host})
                graph = self._specialized.get(signature)
                if graph is not None:
                    self._specialized.move_to_end(signature)
                    return signature, graph
                try:
                    graph = self._build(signature)
                except HostValueNeeded as need:
                    self._add_host_inputs(need)
                    continue
                self._specialized[signature] = graph
                while len(self._specialized) > self.limits.specializations:
                    self._specialized.popitem(last=False)
                return signature, graph

    def _host_array(self, name: str, given: Any) -> np.ndarray:
        spec = self.inputs[name]
        if not isinstance(given, np.ndarray):
            raise _HostValueMissing(
                f"input {name!r} is a host value ({self._host[name]}): its contents decide the graph, so give "
                f"them as an array, e.g. {name}=np.array([...], dtype='{spec.dtype.name}'), not a shape")
        if given.dtype != spec.dtype.numpy:
            raise TypeError(f"input {name!r}: expected dtype {spec.dtype.name} (as the graph declares), got "
                            f"{given.dtype}; convert with array.astype('{spec.dtype.name}')")
        if given.size > self.limits.host_value_elements:
            raise GraphError(f"input {name!r} is a host value ({self._host[name]}) of {given.size} elements, more "
                             f"than the limit of {self.limits.host_value_elements} (OnnxLimits.host_value_elements)")
        return given

    def _add_host_inputs(self, need: HostValueNeeded) -> None:
        new = [name for name in need.inputs if name not in self._host]
        if not new:  # cannot happen: host values are constants, so nothing computed from them reaches here
            raise GraphError(f"{need}: these inputs are host values already") from need
        where = need.node.describe() + ": " if need.node is not None else ""
        for name in new:
            self._host[name] = f"{where}{need.what}"

    def _build(self, signature: Signature) -> Graph:
        graph = Graph(self.name)
        shapes, host = dict(signature.shapes), signature.host
        values: dict[str, Any] = {name: graph.input(name, shapes[name], spec.dtype)
                                  for name, spec in self.inputs.items() if name not in host}
        # Host values are named by content (no ``name``): a constant name always means one content.
        values.update({name: Folded(array, hint=name) for name, array in host.items()})
        values.update({name: Folded(array, name) for name, array in self.constants.items()})
        context = GraphContext(graph, limits=self.limits, opsets=self.opsets)
        try:
            emit_model(context, self.model.graph, values, self.opsets)
            for output in self.model.graph.output:
                graph.output(output.name, _output_value(context, output.name, values[output.name]))
        except GraphError as error:
            if not host:
                raise
            raise GraphError(f"{error} (specialized for {signature.describe()})") from error
        graph.host_values = MappingProxyType(host)
        return prune(graph)

    # -- editing is done on specializations --------------------------------------------------
    def op(self, op_name: str, *inputs: Any, **kwargs: Any) -> Value | tuple[Value, ...]:
        raise GraphError(f"graph {self.name!r} was imported from ONNX; its nodes are made per input "
                         "signature: add ops to a specialization (g = graph.specialize(x=shape))")

    def output(self, name: str, value: Value) -> None:
        raise GraphError(f"graph {self.name!r} was imported from ONNX; its outputs are the model's "
                         f"({', '.join(self.outputs)})")

    def save(self, path: str | Path) -> None:
        """Save the specialized graph (only when every input dim is fixed)."""
        if not self.is_static:
            raise GraphError(f"graph {self.name!r} has dynamic input dims or host values; save a specialization "
                             "instead: graph.specialize(x=shape).save(path)")
        self.specialize().save(path)


class _HostValueMissing(GraphError):
    """A host value was given as a shape (or not at all), so the graph cannot be specialized."""


def _declared(value: onnx.ValueInfoProto) -> tuple[tuple[Dim, ...], DType]:
    kind = value.type.WhichOneof("value")
    if kind != "tensor_type":
        raise GraphError(f"ONNX graph input {value.name!r} is a {kind or 'value of unknown type'}, "
                         "not a tensor: aclpipe graphs take tensors only")
    tensor = value.type.tensor_type
    try:
        dtype = onnx_dtype(tensor.elem_type)
    except UnsupportedOpError as error:
        raise GraphError(f"ONNX graph input {value.name!r}: {error}") from None
    if not tensor.HasField("shape"):
        raise GraphError(f"ONNX graph input {value.name!r} has no declared rank; give its dims with "
                         f"load_onnx(..., input_shapes={{{value.name!r}: (...)}})")
    return tuple(_dim(value.name, axis, dim) for axis, dim in enumerate(tensor.shape.dim)), dtype


#: ``dim_param`` spellings exporters use for "unknown" rather than for a named dim: read as a
#: name, two of them would wrongly be required to be the same size.
_UNKNOWN_DIM_PARAMS = frozenset({"?", "-1", "none", "null", "unk", "unknown", "*", "dynamic"})


def _dim(input_name: str, axis: int, dim: onnx.TensorShapeProto.Dimension) -> Dim:
    """One declared dim: an int, a name (a dim fixed at prepare time), or None (unknown).

    Paddle and some other exporters write an unknown dim as ``dim_value: -1`` (or a
    ``dim_param`` such as ``"?"``); onnxruntime treats those as dynamic, and so does aclpipe,
    with a warning naming the input, since a negative size is not valid ONNX.
    """
    which = dim.WhichOneof("value")
    if which == "dim_value":
        if dim.dim_value >= 0:
            return int(dim.dim_value)
        warnings.warn(f"ONNX graph input {input_name!r} declares dim {axis} as {dim.dim_value}; aclpipe reads "
                      "it as a dynamic dim (as onnxruntime does)", DynamicDimWarning, stacklevel=6)
        return None
    if which == "dim_param" and dim.dim_param.strip():
        if dim.dim_param.strip().lower() in _UNKNOWN_DIM_PARAMS:
            return None
        return dim.dim_param
    return None


def _override(name: str, declared: tuple[Dim, ...], given: Sequence[Dim] | None) -> tuple[Dim, ...]:
    if given is None:
        return declared
    given = tuple(None if d is None else d if isinstance(d, str) else int(d) for d in given)
    if len(given) != len(declared):
        raise GraphError(f"input_shapes[{name!r}] has {len(given)} dims, the model declares {len(declared)} "
                         f"({list(declared)})")
    for axis, (have, want) in enumerate(zip(declared, given)):
        if isinstance(have, int) and isinstance(want, int) and have != want:
            raise GraphError(f"input_shapes[{name!r}] dim {axis} is {want}, the model fixes it at {have}")
    return given


def _output_value(context: GraphContext, name: str, value: Any) -> Value:
    """A node value for a graph output: constants and graph inputs are copied, so that every
    output is written by a node of the run."""
    produced = context.device_value(value)
    if produced.kind in ("input", "constant"):
        context.label = name
        copy = context.op("InplaceCopy", produced)
        assert isinstance(copy, Value)
        return copy
    return produced
