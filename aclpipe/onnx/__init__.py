"""ONNX import: the op mapping (the core of the model importer), folding, fusing, validation.

``mapping`` holds the table ONNX op type -> converter per operator-set version; converters
emit catalog ops through a small :class:`~aclpipe.onnx.context.BuildContext` interface that
both a graph-building context and the eager evaluator
(:class:`aclpipe.eager.onnx_eval.EagerContext`, which runs each op at once) implement.  The
importer never touches a device: it imports nothing of :mod:`aclpipe.eager` or
:mod:`aclpipe.runtime` (ARCHITECTURE.md 2.2).  Importing this package registers every
converter; it needs the ``onnx`` package (``pip install 'aclpipe[onnx]'``; without it, the
import fails with one line saying so).  :class:`OnnxLimits` bounds what loading an untrusted
model may cost; :class:`HostValueNeeded` is how a specialization asks for host values.
"""

from __future__ import annotations

try:
    import onnx  # noqa: F401  (checked first, so that a missing onnx names the extra)
except ModuleNotFoundError as _error:
    from .._extras import missing_extra

    raise missing_extra(_error, "onnx", "reading ONNX models (aclpipe.load_onnx)") from None

from . import (  # noqa: F401  (registers the converters)
    convert_activations,
    convert_control,
    convert_dynamic,
    convert_image,
    convert_indexing,
    convert_logic,
    convert_math,
    convert_nn,
    convert_norm,
    convert_quant,
    convert_recurrent,
    convert_reduce,
    convert_rounding,
    convert_select,
    convert_smooth,
    convert_tensor,
)
from .context import BuildContext, OnnxNode, UnsupportedFeature
from .convert_dynamic import DataDependentShapeError
from .graph_context import HostValueNeeded
from .mapping import (
    MIN_OPSET,
    UnsupportedNode,
    check_model,
    converts,
    emit_graph,
    lookup,
    model_opsets,
    supported_ops,
    unsupported_nodes,
)
from .validate import OnnxLimits

__all__ = [
    "MIN_OPSET",
    "BuildContext",
    "DataDependentShapeError",
    "HostValueNeeded",
    "OnnxLimits",
    "OnnxNode",
    "UnsupportedFeature",
    "UnsupportedNode",
    "check_model",
    "converts",
    "emit_graph",
    "lookup",
    "model_opsets",
    "supported_ops",
    "unsupported_nodes",
]
