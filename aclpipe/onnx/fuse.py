"""Import-time rewrites of the ONNX graph: a BatchNormalization folded into the Conv before it.

In inference a BatchNormalization after a convolution is a per-output-channel affine map, so
it can be folded into the convolution's weights and bias (onnxruntime does the same among its
basic graph optimizations, ``ConvBNFusion``): one launch instead of two, and one pass over the
activation less.  With ``s = scale / sqrt(var + epsilon)``, ``W' = W * s`` (per output
channel) and ``B' = (B - mean) * s + bias`` (``B`` taken as 0 when the Conv has none), computed
in float32 in that order, as onnxruntime does.

A pair is folded only when nothing else can tell: the Conv's output is read by the
BatchNormalization alone (no other node, no subgraph, not a graph output), the Conv's weight and
bias and the BatchNormalization's four parameters are float32 initializers (1-D, one value per
output channel; the weight of rank 3 or more), and the BatchNormalization is in inference mode
with one output.  The folded Conv takes the BatchNormalization's output name; the new weight and
bias are new initializers, and initializers nothing reads any more are dropped.  (onnxruntime
also leaves a pair alone whose BatchNormalization output is a graph output; here the folded Conv
writes that output under the same name, so callers see no difference.)
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.numpy_helper

from .validate import tensor_array

__all__ = ["fuse_conv_batch_norm"]


def fuse_conv_batch_norm(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """``model`` with every foldable Conv + BatchNormalization pair folded (a copy; the given
    model is left as it was), and one line per folded pair saying which."""
    graph = model.graph
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    readers = _readers(graph)
    first_reader: dict[str, onnx.NodeProto] = {}
    for node in graph.node:
        for name in node.input:
            first_reader.setdefault(name, node)
    pairs = [(conv, norm) for conv in graph.node if (norm := _foldable(conv, first_reader, initializers, readers))]
    if not pairs:
        return model, []
    fused = onnx.ModelProto()
    fused.CopyFrom(model)
    nodes = list(fused.graph.node)
    index = {id(node): position for position, node in enumerate(graph.node)}
    dropped: set[int] = set()
    notes = []
    for conv, norm in pairs:
        new_conv = nodes[index[id(conv)]]
        weight, bias = _folded(conv, norm, initializers)
        weight_name, bias_name = _fresh(f"{conv.input[1]}_bn_folded", initializers), _fresh(
            f"{conv.name or conv.output[0]}_bn_bias", initializers)
        for name, array in ((weight_name, weight), (bias_name, bias)):
            fused.graph.initializer.append(onnx.numpy_helper.from_array(array, name))
            initializers[name] = fused.graph.initializer[-1]
        del new_conv.input[:]
        new_conv.input.extend([conv.input[0], weight_name, bias_name])
        new_conv.output[0] = norm.output[0]
        dropped.add(index[id(norm)])
        notes.append(f"Conv {conv.name or conv.output[0]!r} + BatchNormalization {norm.name or norm.output[0]!r}: "
                     "folded into the Conv's weight and bias")
    del fused.graph.node[:]
    fused.graph.node.extend(node for position, node in enumerate(nodes) if position not in dropped)
    _drop_unread(fused.graph)
    return fused, notes


def _readers(graph: onnx.GraphProto) -> dict[str, int]:
    """How many times each name is read: node inputs (subgraphs' included, as a subgraph may
    read outer names) and the graph's outputs."""
    counts: dict[str, int] = {}
    pending = [graph]
    while pending:
        current = pending.pop()
        for node in current.node:
            for name in node.input:
                counts[name] = counts.get(name, 0) + 1
            for attribute in node.attribute:
                pending.extend([attribute.g] if attribute.HasField("g") else [])
                pending.extend(attribute.graphs)
        for output in current.output:
            counts[output.name] = counts.get(output.name, 0) + 1
    return counts


def _foldable(conv: onnx.NodeProto, first_reader: dict[str, onnx.NodeProto],
              initializers: dict[str, onnx.TensorProto], readers: dict[str, int]) -> onnx.NodeProto | None:
    """The BatchNormalization that ``conv`` can take in (module docstring), or None."""
    if conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx") or len(conv.output) != 1:
        return None
    if readers.get(conv.output[0], 0) != 1 or len(conv.input) < 2:
        return None
    norm = first_reader.get(conv.output[0])
    if norm is None or norm.op_type != "BatchNormalization" or norm.domain not in ("", "ai.onnx"):
        return None
    if (len(norm.input) != 5 or norm.input[0] != conv.output[0] or not norm.output[0]
            or any(norm.output[1:])):
        return None
    if any(attribute.name == "training_mode" and attribute.i for attribute in norm.attribute):
        return None
    weight = initializers.get(conv.input[1])
    if weight is None or weight.data_type != onnx.TensorProto.FLOAT or len(weight.dims) < 3:
        return None
    channels = weight.dims[0]
    parameters = [*norm.input[1:], *conv.input[2:3]]
    for name in parameters:
        tensor = initializers.get(name)
        if tensor is None or tensor.data_type != onnx.TensorProto.FLOAT or list(tensor.dims) != [channels]:
            return None
    return norm


def _folded(conv: onnx.NodeProto, norm: onnx.NodeProto, initializers: dict[str, onnx.TensorProto]
            ) -> tuple[np.ndarray, np.ndarray]:
    """The folded weight and bias, in float32, in onnxruntime's order of operations."""
    def array(name: str) -> np.ndarray:
        return tensor_array(initializers[name], f"initializer {name!r}").astype(np.float32, copy=False)

    scale, shift, mean, var = (array(name) for name in norm.input[1:])
    epsilon = next((attribute.f for attribute in norm.attribute if attribute.name == "epsilon"), 1e-5)
    factor = scale / np.sqrt(var + np.float32(epsilon))
    weight = array(conv.input[1])
    weight = weight * factor.reshape((-1,) + (1,) * (weight.ndim - 1))
    if len(conv.input) > 2 and conv.input[2]:
        bias = (array(conv.input[2]) - mean) * factor + shift
    else:
        bias = shift - mean * factor
    return weight.astype(np.float32), bias.astype(np.float32)


def _fresh(name: str, taken: dict[str, onnx.TensorProto]) -> str:
    """``name``, or ``name`` with a number after it, not yet an initializer's name."""
    candidate, number = name, 1
    while candidate in taken:
        number += 1
        candidate = f"{name}_{number}"
    return candidate


def _drop_unread(graph: onnx.GraphProto) -> None:
    """Remove the initializers (and their graph inputs, for models that list them) that no node
    and no output reads any more."""
    readers = _readers(graph)
    unread = {tensor.name for tensor in graph.initializer if not readers.get(tensor.name)}
    if not unread:
        return
    kept = [tensor for tensor in graph.initializer if tensor.name not in unread]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    inputs = [value for value in graph.input if value.name not in unread]
    del graph.input[:]
    graph.input.extend(inputs)
