"""The ``light`` model topologies shipped with the onnx package, with seeded random weights.

``onnx/backend/test/data/light/light_<name>.onnx`` are real ImageNet networks (ResNet-50,
SqueezeNet, Inception v1/v2, DenseNet-121, ShuffleNet, VGG-19, AlexNet, ZFNet-512) written at
opset 9 whose weights were replaced by ``ConstantOfShape`` nodes filling each tensor with 0.02.
:func:`light_model` turns every such node back into an initializer drawn from a seeded
generator with a scale that suits its role (found from the op that consumes it: He-scaled
convolution filters, unit-ish batch-norm scales and positive variances, small biases), so the
activations stay finite through the whole depth and the outputs depend on every weight.

The models declare ``[1, 3, 224, 224]`` inputs.  ``batch`` makes the batch dim symbolic
(``"batch"``) where the graph allows it (no ``Reshape`` to a fixed batch); the models stay at
opset 9 unless ``opset`` asks for a conversion (aclpipe reads 11 and up).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper, version_converter

__all__ = ["LIGHT_MODELS", "light_model", "light_path"]

LIGHT_MODELS = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
                "squeezenet", "vgg19", "zfnet512")


def light_path(name: str) -> Path:
    """Where the onnx package keeps ``light_<name>.onnx``."""
    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"light_{name}.onnx"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is not in this onnx installation (known: {', '.join(LIGHT_MODELS)})")
    return path


def _consumers(graph: onnx.GraphProto) -> dict[str, list[tuple[onnx.NodeProto, int]]]:
    found: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in graph.node:
        for index, name in enumerate(node.input):
            found.setdefault(name, []).append((node, index))
    return found


def _role(name: str, consumers: dict[str, list[tuple[onnx.NodeProto, int]]]) -> tuple[str, int]:
    """(consuming op type, input index), looking through Unsqueeze/Reshape (DenseNet's BN)."""
    for _ in range(4):
        uses = consumers.get(name, [])
        if not uses:
            return "", 0
        node, index = uses[0]
        if node.op_type not in ("Unsqueeze", "Reshape", "Identity"):
            return node.op_type, index
        name = node.output[0]
    return "", 0


def _draw(rng: np.random.Generator, shape: tuple[int, ...], role: tuple[str, int]) -> np.ndarray:
    op, index = role
    normal = rng.standard_normal(shape)
    if op in ("Conv", "Gemm", "MatMul") and index == 1:
        fan_in = int(np.prod(shape[1:])) if op != "MatMul" else shape[0]
        return normal * np.sqrt(2.0 / max(fan_in, 1))
    if op == "BatchNormalization":
        return {1: 1.0 + 0.1 * normal, 2: 0.1 * normal, 3: 0.1 * normal}.get(index, rng.uniform(0.5, 1.5, shape))
    if op == "Mul":
        return 1.0 + 0.1 * normal
    return 0.05 * normal


def light_model(name: str, *, seed: int = 0, batch: bool = False, opset: int | None = None,
                logits: bool = True) -> onnx.ModelProto:
    """``light_<name>`` with seeded weights in place of its ``ConstantOfShape`` fillers, converted
    to ``opset`` first when given (cheap while the weights are still fillers).  With ``logits``
    the input of the final Softmax is an extra output: random weights can saturate the softmax
    into a one-hot vector, which would hide differences; the logits do not."""
    model = onnx.load(str(light_path(name)))
    if opset is not None:
        model = version_converter.convert_version(model, opset)
    graph = model.graph
    # Shapes of the intermediate values, inferred while the weights are still small fillers.
    inferred = {value.name: value for value in onnx.shape_inference.infer_shapes(model).graph.value_info}
    rng = np.random.default_rng(seed)
    shapes = {tensor.name: numpy_helper.to_array(tensor) for tensor in graph.initializer}
    consumers = _consumers(graph)
    kept, weights = [], []
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in shapes:
            shape = tuple(int(d) for d in shapes[node.input[0]])
            array = _draw(rng, shape, _role(node.output[0], consumers)).astype(np.float32)
            weights.append(numpy_helper.from_array(array, node.output[0]))
        else:
            kept.append(node)
    used = {name for node in kept for name in node.input}
    initializers = [t for t in graph.initializer if t.name in used] + weights
    del graph.node[:]
    graph.node.extend(kept)
    del graph.initializer[:]
    graph.initializer.extend(initializers)
    # Old IR lists weights among the inputs; keep only the real ones.
    weight_names = set(shapes) | {t.name for t in initializers}
    real = [value for value in graph.input if value.name not in weight_names]
    del graph.input[:]
    graph.input.extend(real)
    if batch and not any(node.op_type == "Reshape" for node in kept):
        graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
        for output in graph.output:
            output.type.tensor_type.shape.dim[0].dim_param = "batch"
    softmax = [node for node in kept if node.op_type == "Softmax"]
    if logits and softmax:
        graph.output.append(inferred[softmax[-1].input[0]])
    model.ir_version = max(model.ir_version, 4)
    onnx.checker.check_model(model)
    return model
