"""A tiny GPT-style decoder as ONNX, in the optimum / onnxruntime-genai export convention.

For tests, examples and benchmarks: a model :class:`~aclpipe.decode.Decoder` reads the way it
reads an exported one, small enough to build in milliseconds and to check against
onnxruntime.

Inputs: ``input_ids`` [batch, seq] int64, ``attention_mask`` [batch, past + seq] int64,
``position_ids`` [batch, seq] int64 and per layer ``past_key_values.{i}.key`` / ``.value``
[batch, heads, past, head_dim] float32.  Outputs: ``logits`` [batch, seq, vocab] and per
layer ``present.{i}.key`` / ``.value``, each ``Concat(past, new, axis=2)``.  Attention is
causal with the past as offset (query ``t`` sees keys ``<= past + t``, as Hugging Face
exports build it) and masked by ``attention_mask``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["ToyConfig", "toy_decoder"]


@dataclass(frozen=True)
class ToyConfig:
    """Sizes of the toy decoder."""

    vocab: int = 64
    embed: int = 32
    heads: int = 4
    layers: int = 2
    positions: int = 256
    seed: int = 0

    @property
    def head_dim(self) -> int:
        return self.embed // self.heads


def toy_decoder(config: ToyConfig | None = None) -> onnx.ModelProto:
    """The decoder with deterministic random weights (``config.seed``), opset 17."""
    config = config or ToyConfig()
    builder = _Builder(np.random.default_rng(config.seed))
    cfg = config
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total"]),
              helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch", "seq"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", cfg.vocab])]
    for layer in range(cfg.layers):
        for kind in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_key_values.{layer}.{kind}", TensorProto.FLOAT,
                                                        ["batch", cfg.heads, "past", cfg.head_dim]))
            outputs.append(helper.make_tensor_value_info(f"present.{layer}.{kind}", TensorProto.FLOAT,
                                                         ["batch", cfg.heads, "total", cfg.head_dim]))
    hidden = builder.op("Add", builder.op("Gather", builder.weight(cfg.vocab, cfg.embed), "input_ids"),
                        builder.op("Gather", builder.weight(cfg.positions, cfg.embed), "position_ids"))
    allowed = _attention_allowed(builder)
    for layer in range(cfg.layers):
        hidden = _block(builder, cfg, layer, hidden, allowed)
    normed = _layer_norm(builder, hidden, cfg.embed)
    builder.op("MatMul", normed, builder.weight(cfg.embed, cfg.vocab), out="logits")
    graph = helper.make_graph(builder.nodes, "toy_decoder", inputs, outputs, builder.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _attention_allowed(builder: _Builder) -> str:
    """A bool [batch, 1, seq, total] mask: causal with the past as offset, and attention_mask."""
    seq = builder.op("Slice", builder.op("Shape", "input_ids"), builder.const([1]), builder.const([2]))
    total = builder.op("Slice", builder.op("Shape", "attention_mask"), builder.const([1]), builder.const([2]))
    past = builder.op("Sub", total, seq)
    ones = builder.op("ConstantOfShape", builder.op("Concat", seq, total, axis=0),
                      value=numpy_helper.from_array(np.ones(1, np.int64)))
    causal = builder.op("Cast", builder.op("Trilu", ones, builder.op("Squeeze", past), upper=0), to=TensorProto.BOOL)
    padding = builder.op("Cast", builder.op("Unsqueeze", "attention_mask", builder.const([1, 2])),
                         to=TensorProto.BOOL)
    return builder.op("And", causal, padding)


def _block(builder: _Builder, cfg: ToyConfig, layer: int, hidden: str, allowed: str) -> str:
    normed = _layer_norm(builder, hidden, cfg.embed)
    heads = {}
    for part in ("query", "key", "value"):
        projected = builder.op("Add", builder.op("MatMul", normed, builder.weight(cfg.embed, cfg.embed)),
                               builder.weight(cfg.embed))
        split = builder.op("Reshape", projected, builder.const([0, 0, cfg.heads, cfg.head_dim]))
        heads[part] = builder.op("Transpose", split, perm=[0, 2, 1, 3])
    key = builder.op("Concat", f"past_key_values.{layer}.key", heads["key"], axis=2, out=f"present.{layer}.key")
    value = builder.op("Concat", f"past_key_values.{layer}.value", heads["value"], axis=2,
                       out=f"present.{layer}.value")
    scores = builder.op("Mul", builder.op("MatMul", heads["query"], builder.op("Transpose", key, perm=[0, 1, 3, 2])),
                        builder.const(np.float32(1.0 / np.sqrt(cfg.head_dim))))
    masked = builder.op("Where", allowed, scores, builder.const(np.float32(-1e9)))
    attended = builder.op("MatMul", builder.op("Softmax", masked, axis=-1), value)
    merged = builder.op("Reshape", builder.op("Transpose", attended, perm=[0, 2, 1, 3]),
                        builder.const([0, 0, cfg.embed]))
    hidden = builder.op("Add", hidden, builder.op("MatMul", merged, builder.weight(cfg.embed, cfg.embed)))
    inner = builder.op("Relu", builder.op("MatMul", _layer_norm(builder, hidden, cfg.embed),
                                          builder.weight(cfg.embed, 4 * cfg.embed)))
    return builder.op("Add", hidden, builder.op("MatMul", inner, builder.weight(4 * cfg.embed, cfg.embed)))


def _layer_norm(builder: _Builder, hidden: str, embed: int) -> str:
    return builder.op("LayerNormalization", hidden, builder.const(np.ones(embed, np.float32)),
                      builder.const(np.zeros(embed, np.float32)), axis=-1, epsilon=1e-5)


class _Builder:
    """Names values, collects nodes and initializers."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def _name(self, stem: str) -> str:
        self._count += 1
        return f"{stem}_{self._count}"

    def op(self, op_type: str, *inputs: str, out: str | None = None, **attrs: Any) -> str:
        output = out or self._name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [output], name=self._name(op_type), **attrs))
        return output

    def const(self, value: object) -> str:
        array = np.asarray(value)
        if array.dtype.kind == "i":
            array = array.astype(np.int64)
        name = self._name("const")
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def weight(self, *shape: int) -> str:
        scale = 1.0 / np.sqrt(shape[0]) if len(shape) > 1 else 0.1
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32))
