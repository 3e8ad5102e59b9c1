"""Write the small ONNX models in this folder (``mlp.onnx``, ``cnn.onnx``) with ``onnx.helper``.

The weights are drawn from seeded generators and the files carry no producer timestamps, so
running this again writes the same bytes: the committed files can be checked against it.
The batch dimension is symbolic (``batch``).  Needs ``onnx`` (``pip install 'aclpipe[onnx]'``).

Run: ``python graphs/make_onnx.py [--out DIR] [--check]`` (``--check`` compares with the files
already there instead of writing, and exits 1 when they differ).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
HERE = Path(__file__).resolve().parent


def _weights(seed: int, **shapes: tuple[int, ...]) -> list[onnx.TensorProto]:
    """Seeded float32 initialisers, N(0, 1/fan_in) so activations stay around unit scale."""
    rng = np.random.default_rng(seed)
    tensors = []
    for name, shape in shapes.items():
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        scale = 1.0 / np.sqrt(fan_in) if len(shape) > 1 else 0.1
        tensors.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
    return tensors


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="aclpipe graphs/make_onnx.py")
    model.ir_version = 8  # readable by onnx >= 1.10 and onnxruntime >= 1.10
    onnx.checker.check_model(model, full_check=True)
    return model


def make_mlp() -> onnx.ModelProto:
    """x[batch, 64] -> MatMul+Add -> Relu -> Gemm -> Relu -> Gemm -> Softmax: y[batch, 10]."""
    weights = _weights(7, w1=(64, 32), b1=(32,), w2=(16, 32), b2=(16,), w3=(10, 16), b3=(10,))
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["fc1"], name="fc1"),
        helper.make_node("Add", ["fc1", "b1"], ["fc1_bias"], name="fc1_bias"),
        helper.make_node("Relu", ["fc1_bias"], ["act1"], name="act1"),
        helper.make_node("Gemm", ["act1", "w2", "b2"], ["fc2"], name="fc2", transB=1),
        helper.make_node("Relu", ["fc2"], ["act2"], name="act2"),
        helper.make_node("Gemm", ["act2", "w3", "b3"], ["logits"], name="fc3", transB=1),
        helper.make_node("Softmax", ["logits"], ["y"], name="probs", axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])], initializer=weights)
    return _model(graph)


def make_cnn() -> onnx.ModelProto:
    """x[batch, 3, 16, 16] -> Conv+BatchNorm+Relu -> MaxPool -> Conv+Relu -> GlobalAveragePool
    -> Flatten -> Gemm: y[batch, 10]."""
    weights = _weights(11, conv1_w=(8, 3, 3, 3), conv1_b=(8,), conv2_w=(16, 8, 3, 3), conv2_b=(16,),
                       fc_w=(10, 16), fc_b=(10,))
    rng = np.random.default_rng(12)
    weights += [numpy_helper.from_array(array.astype(np.float32), name) for name, array in (
        ("bn_scale", rng.uniform(0.5, 1.5, 8)), ("bn_bias", rng.normal(0, 0.1, 8)),
        ("bn_mean", rng.normal(0, 0.1, 8)), ("bn_var", rng.uniform(0.5, 1.5, 8)))]
    nodes = [
        helper.make_node("Conv", ["x", "conv1_w", "conv1_b"], ["conv1"], name="conv1", pads=[1, 1, 1, 1],
                         kernel_shape=[3, 3]),
        helper.make_node("BatchNormalization", ["conv1", "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["bn1"],
                         name="bn1", epsilon=1e-5),
        helper.make_node("Relu", ["bn1"], ["relu1"], name="relu1"),
        helper.make_node("MaxPool", ["relu1"], ["pool1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["pool1", "conv2_w", "conv2_b"], ["conv2"], name="conv2", pads=[1, 1, 1, 1],
                         kernel_shape=[3, 3]),
        helper.make_node("Relu", ["conv2"], ["relu2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["relu2"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["features"], name="features", axis=1),
        helper.make_node("Gemm", ["features", "fc_w", "fc_b"], ["y"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])], initializer=weights)
    return _model(graph)


MODELS: dict[str, Callable[[], onnx.ModelProto]] = {"mlp": make_mlp, "cnn": make_cnn}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write into (default: this one)")
    parser.add_argument("--check", action="store_true", help="compare with the files there; write nothing")
    args = parser.parse_args(argv)
    stale = []
    for name, make in MODELS.items():
        path = args.out / f"{name}.onnx"
        data = make().SerializeToString()
        if args.check:
            if not path.is_file() or path.read_bytes() != data:
                stale.append(path)
            continue
        path.write_bytes(data)
        print(f"wrote {path} ({len(data)} bytes)")
    if stale:
        print("out of date (run python graphs/make_onnx.py): " + ", ".join(map(str, stale)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
