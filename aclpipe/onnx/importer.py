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

The catalog nodes are made per signature (:mod:`aclpipe.onnx.onnx_graph`: input shapes, and
the contents of host-value inputs), when the graph is bound (:meth:`OnnxGraph.bind`, which
:class:`~aclpipe.Pipeline` calls for each new signature).  Specializing then,
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

Untrusted models.  ``load_onnx`` checks the model's structure before walking it
(:mod:`aclpipe.onnx.validate`), sizes every tensor before allocating it, and bounds nodes,
unrolled iterations and nesting (:class:`~aclpipe.onnx.validate.OnnxLimits`); every malformed
model is a :class:`~aclpipe.errors.GraphError` (naming the file and the node) or an
:class:`~aclpipe.errors.UnsupportedOpError`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
import onnx.defs
import onnx.numpy_helper

from ..errors import GraphError, UnsupportedOpError
from ..graph.builder import Dim
from . import (  # noqa: F401 (importing them registers the converters)
    convert_activations,
    convert_control,
    convert_image,
    convert_logic,
    convert_reduce,
    convert_rounding,
    convert_select,
)
from .fuse import fuse_conv_batch_norm
from .mapping import MIN_OPSET, check_model, model_opsets
from .onnx_graph import DynamicDimWarning, OnnxGraph, naming
from .validate import DEFAULT_LIMITS, OnnxLimits, check_text, validate_model

__all__ = ["MAX_OPSET", "DynamicDimWarning", "OnnxGraph", "initializer_arrays", "load_onnx"]

#: The newest default-domain opset the installed ``onnx`` package describes.
MAX_OPSET = int(onnx.defs.onnx_opset_version())

ModelSource = str | os.PathLike[str] | bytes | onnx.ModelProto


def load_onnx(model: ModelSource, *, name: str | None = None,
              input_shapes: Mapping[str, Sequence[Dim]] | None = None, upgrade_opset: int | None = None,
              fold_limit: int | None = None, limits: OnnxLimits | None = None, fuse_conv_bn: bool = True
              ) -> OnnxGraph:
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
        transpose); larger results of constant inputs are computed on the device.  Shorthand
        for ``limits=OnnxLimits(fold_bytes=...)``.
    limits:
        Bounds on sizes, node counts, unrolled iterations, nesting and cached specializations
        (:class:`~aclpipe.onnx.validate.OnnxLimits`); the defaults suit trusted and untrusted
        models alike.
    fuse_conv_bn:
        Fold each BatchNormalization that follows a Conv into the Conv's weight and bias when
        their parameters are float32 initializers and nothing else reads the Conv's output
        (:mod:`aclpipe.onnx.fuse`, as onnxruntime's ``ConvBNFusion``): one launch instead of
        two.  The graph's :attr:`~OnnxGraph.rewrites` lists what was folded; False imports every
        node as it is.

    Raises
    ------
    UnsupportedOpError
        The opset is outside ``[11, MAX_OPSET]``, or some op types have no converter: one
        error lists every unsupported op type and opset.
    GraphError
        The file is not a valid ONNX model, its structure is malformed (see
        :mod:`aclpipe.onnx.validate`), an input is not a tensor of an NPU dtype, ``input_shapes``
        does not fit, or (for models whose input shapes are all fixed) an ONNX node is invalid
        for those shapes.  Messages start with the file's path when loading from one.
    """
    limits = limits or DEFAULT_LIMITS
    if fold_limit is not None:
        limits = dataclasses.replace(limits, fold_bytes=fold_limit)
    proto, default_name, source = _read(model)
    with naming(source):
        check_text(proto)
        if upgrade_opset is not None:
            proto = _upgrade(proto, upgrade_opset)
        _check_opset(proto)
        check_model(proto)
        validate_model(proto, model_opsets(proto), limits)
        rewrites: list[str] = []
        if fuse_conv_bn:
            proto, rewrites = fuse_conv_batch_norm(proto)
        return OnnxGraph(proto, name or proto.graph.name or default_name, input_shapes or {}, limits=limits,
                         source=source, rewrites=rewrites)


def _read(model: ModelSource) -> tuple[onnx.ModelProto, str, str]:
    """The model, its default name, and how messages name where it came from."""
    if isinstance(model, onnx.ModelProto):
        return model, "onnx", ""
    if isinstance(model, (bytes, bytearray)):
        with naming("ONNX model bytes"):
            return _parse(lambda: onnx.load_from_string(bytes(model))), "onnx", ""
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        if not path.is_file():
            raise FileNotFoundError(f"no ONNX model at {str(path)!r}")
        with naming(str(path)):
            return _parse(lambda: onnx.load(str(path))), path.stem, str(path)
    raise TypeError(f"load_onnx takes a path, bytes or an onnx.ModelProto, got {type(model).__name__}")


def _parse(load: Callable[[], onnx.ModelProto]) -> onnx.ModelProto:
    """Parse with onnx's own reader; its errors (protobuf's DecodeError, the external data
    checks' ValidationError, ...) become GraphErrors."""
    try:
        return load()
    except RecursionError:
        raise GraphError("the model is nested too deeply to parse") from None
    except (OSError, MemoryError):
        raise
    except Exception as error:  # noqa: BLE001 - protobuf and onnx raise many unrelated types here
        raise GraphError(f"not a readable ONNX model: {type(error).__name__}: {error}") from None


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


def initializer_arrays(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Initializer name -> array (a helper for tests and tools)."""
    return {tensor.name: onnx.numpy_helper.to_array(tensor) for tensor in model.graph.initializer}
