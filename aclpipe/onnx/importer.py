"""``load_onnx``: an ONNX model as an aclpipe :class:`~aclpipe.graph.Graph`.

.. code-block:: python

    graph = aclpipe.load_onnx("bert.onnx")          # inputs keep their dynamic dims
    async with aclpipe.Pipeline(graph) as pipe:
        out = await pipe.run(input_ids=ids)          # any batch size / sequence length

What happens when.  ``load_onnx`` reads the model, checks its operator set (11 and up; older
models can be upgraded with ``upgrade_opset=``) and lists *every* unsupported op type in one
:class:`~aclpipe.errors.UnsupportedOpError`.  Initializers become graph constants; graph
inputs are declared with their dims (a ``dim_param`` becomes a named dim, an unknown dim
``None``); outputs keep the model's names.

The catalog nodes are made per input signature, when the graph is bound (:meth:`OnnxGraph.bind`,
which :class:`~aclpipe.Pipeline` calls for each new set of input shapes).  Specializing then,
with every shape concrete, is what lets the importer *fold*: ``Shape``, ``Size`` and
``ConstantOfShape`` become constants, and so does every op whose inputs are all known, so the
``Gather``/``Unsqueeze``/``Concat``/``Slice``/``Cast``/arithmetic chains exporters build on
``Shape`` (and constant subgraphs such as weight transposes) never reach the device; only
real tensor work does.  Each specialization is cached; errors at specialization name the ONNX
node.  When every input dim is fixed (in the model, or through ``input_shapes=``), the model is
specialized at load, so its errors surface there.

The shape-dependent parts are thus recorded as the ONNX graph itself (the template), and
replayed through :class:`~aclpipe.onnx.graph_context.GraphContext` for each signature:
converters always see concrete shapes, and nothing symbolic has to be evaluated on the device.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import onnx
import onnx.defs
import onnx.numpy_helper

from ..dtypes import DType
from ..errors import GraphError, UnsupportedOpError
from ..graph import BoundGraph, Graph, Node, Value
from ..graph.bound import normalize_shapes
from ..graph.builder import Dim
from . import (  # noqa: F401 (importing them registers the converters)
    convert_activations,
    convert_image,
    convert_logic,
    convert_reduce,
    convert_rounding,
    convert_select,
)
from .context import onnx_dtype
from .fold import Folded
from .graph_context import DEFAULT_FOLD_LIMIT, GraphContext, emit_model, prune
from .mapping import MIN_OPSET, check_model, model_opsets

__all__ = ["MAX_OPSET", "DynamicDimWarning", "OnnxGraph", "initializer_arrays", "load_onnx"]

#: The newest default-domain opset the installed ``onnx`` package describes.
MAX_OPSET = int(onnx.defs.onnx_opset_version())

ModelSource = str | os.PathLike[str] | bytes | onnx.ModelProto


class DynamicDimWarning(UserWarning):
    """A graph input declares a dim with a negative size (``dim_value: -1``); it is read as a
    dynamic dim."""


def load_onnx(model: ModelSource, *, name: str | None = None,
              input_shapes: Mapping[str, Sequence[Dim]] | None = None, upgrade_opset: int | None = None,
              fold_limit: int = DEFAULT_FOLD_LIMIT) -> OnnxGraph:
    """Import an ONNX model as a graph of catalog ops.

    Parameters
    ----------
    model:
        A path to a ``.onnx`` file (external data next to it is found), the serialized bytes,
        or an ``onnx.ModelProto``.
    name:
        The graph's name (default: the model graph's name, else the file name).
    input_shapes:
        Input name -> dims that replace the declared ones (ints fix a dim, names or None keep it
        dynamic), e.g. ``{"x": ("batch", 3, 224, 224)}``.  Fixed dims must match the model's.
    upgrade_opset:
        Convert the model to this default-domain opset first (``onnx.version_converter``),
        e.g. 13 for models exported below opset 11.
    fold_limit:
        Largest folded tensor in bytes (unless it is no larger than its inputs, like a weight's
        transpose); larger results of constant inputs are computed on the device.

    Raises
    ------
    UnsupportedOpError
        The opset is outside ``[11, MAX_OPSET]``, or some op types have no converter: one
        error lists every unsupported op type and opset.
    GraphError
        An input is not a tensor of an NPU dtype, ``input_shapes`` does not fit, or (for
        models whose input shapes are all fixed) an ONNX node is invalid for those shapes.
    """
    proto, default_name = _read(model)
    if upgrade_opset is not None:
        proto = _upgrade(proto, upgrade_opset)
    _check_opset(proto)
    check_model(proto)
    return OnnxGraph(proto, name or proto.graph.name or default_name, input_shapes or {}, fold_limit=fold_limit)


def _read(model: ModelSource) -> tuple[onnx.ModelProto, str]:
    if isinstance(model, onnx.ModelProto):
        return model, "onnx"
    if isinstance(model, (bytes, bytearray)):
        return onnx.load_from_string(bytes(model)), "onnx"
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        if not path.is_file():
            raise FileNotFoundError(f"no ONNX model at {str(path)!r}")
        return onnx.load(str(path)), path.stem
    raise TypeError(f"load_onnx takes a path, bytes or an onnx.ModelProto, got {type(model).__name__}")


def _upgrade(proto: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    import onnx.version_converter

    try:
        return onnx.version_converter.convert_version(proto, opset)
    except Exception as error:  # the converter raises plain RuntimeErrors of many kinds
        raise UnsupportedOpError(f"onnx.version_converter could not convert the model to opset {opset}: "
                                 f"{error}") from error


def _check_opset(proto: onnx.ModelProto) -> None:
    opset = model_opsets(proto)[""]
    if opset < MIN_OPSET:
        raise UnsupportedOpError(
            f"the ONNX model uses default-domain opset {opset}; aclpipe reads opsets {MIN_OPSET} to "
            f"{MAX_OPSET}: load it with upgrade_opset=13 (or convert it with "
            "onnx.version_converter.convert_version)")
    if opset > MAX_OPSET:
        raise UnsupportedOpError(
            f"the ONNX model uses default-domain opset {opset}, newer than the installed onnx package "
            f"{onnx.__version__} describes ({MAX_OPSET}): upgrade onnx (pip install -U onnx)")


class OnnxGraph(Graph):
    """A graph imported from ONNX: declared inputs, the initializers as constants, the model's
    outputs, and catalog nodes made per input signature (see the module docs).

    Use :meth:`specialize` to see the catalog graph for given input shapes; :meth:`bind` (what
    :class:`~aclpipe.Pipeline` calls) binds that graph.  Builder methods are refused: edit a
    specialized graph instead.
    """

    def __init__(self, model: onnx.ModelProto, name: str, input_shapes: Mapping[str, Sequence[Dim]], *,
                 fold_limit: int = DEFAULT_FOLD_LIMIT):
        super().__init__(name)
        self.model = model
        self.opsets = dict(model_opsets(model))
        self.fold_limit = fold_limit
        self._specialized: dict[tuple[Any, ...], Graph] = {}
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
            super().constant(tensor.name, onnx.numpy_helper.to_array(tensor))
        self._onnx_outputs = MappingProxyType({value.name: value.name for value in model.graph.output})
        if self.is_static:
            self.specialize()  # every shape is known: validate (and build) now

    # -- what the graph is -----------------------------------------------------------------
    @property
    def outputs(self) -> Mapping[str, str]:
        """Output names, as in the model (values exist per specialization)."""
        return self._onnx_outputs

    @property
    def is_static(self) -> bool:
        """Whether every input dim is fixed (then the graph is specialized at load)."""
        return all(isinstance(dim, int) for spec in self.inputs.values() for dim in spec.shape)

    @property
    def nodes(self) -> tuple[Node, ...]:
        """The catalog nodes when every input dim is fixed; otherwise ``()`` (nodes are made per
        signature: see :meth:`specialize`)."""
        return self.specialize().nodes if self.is_static else ()

    @property
    def signatures(self) -> int:
        """How many input signatures have been specialized."""
        return len(self._specialized)

    def __repr__(self) -> str:
        inputs = ", ".join(f"{n}: {s.dtype.name}[{', '.join('?' if d is None else str(d) for d in s.shape)}]"
                           for n, s in self.inputs.items())
        return (f"OnnxGraph({self.name!r}: inputs [{inputs}], {len(self.constants)} initializers, "
                f"{len(self.model.graph.node)} ONNX nodes, outputs {list(self.outputs)}, "
                f"{self.signatures} specialization(s))")

    # -- specializing ----------------------------------------------------------------------
    def specialize(self, **input_shapes: Any) -> Graph:
        """The catalog graph for these input shapes (tuples or arrays; optional for inputs whose
        dims are all fixed), with shape arithmetic and constant subgraphs folded.  Cached."""
        for input_name, spec in self.inputs.items():
            if input_name not in input_shapes and all(isinstance(d, int) for d in spec.shape):
                input_shapes[input_name] = tuple(spec.shape)
        shapes = normalize_shapes(self, input_shapes)
        key = tuple(sorted(shapes.items()))
        graph = self._specialized.get(key)
        if graph is None:
            graph = self._specialized[key] = self._build(shapes)
        return graph

    def bind(self, **input_shapes: Any) -> BoundGraph:
        """Specialize to these input shapes and bind; see :meth:`Graph.bind`."""
        return self.specialize(**input_shapes).bind(**input_shapes)

    def _build(self, shapes: Mapping[str, tuple[int, ...]]) -> Graph:
        graph = Graph(self.name)
        values: dict[str, Any] = {name: graph.input(name, shapes[name], spec.dtype)
                                  for name, spec in self.inputs.items()}
        values.update({name: Folded(array, name) for name, array in self.constants.items()})
        context = GraphContext(graph, fold_limit=self.fold_limit)
        emit_model(context, self.model.graph, values, self.opsets)
        for output in self.model.graph.output:
            graph.output(output.name, _output_value(context, output.name, values[output.name]))
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
            raise GraphError(f"graph {self.name!r} has dynamic input dims; save a specialization instead: "
                             "graph.specialize(x=shape).save(path)")
        self.specialize().save(path)


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


def initializer_arrays(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Initializer name -> array (a helper for tests and tools)."""
    return {tensor.name: onnx.numpy_helper.to_array(tensor) for tensor in model.graph.initializer}
