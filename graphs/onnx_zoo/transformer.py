"""BERT-style encoders written the way PyTorch exporters write them.

``input_ids`` and ``attention_mask`` are ``[batch, seq]`` int64 with both dims symbolic.  The
graph has what real exports have: word/position/token-type embedding ``Gather``s, positions
from ``Shape`` (``Range`` or a ``Slice`` of a position buffer), the extended attention mask
(``Unsqueeze``/``Cast``/``Sub``/``Mul``, or ``Equal``/``Where``), attention heads split and
merged with ``Reshape``s whose target shapes are ``Shape``/``Gather``/``Unsqueeze``/``Concat``
chains, ``MatMul``/``Transpose``/``Softmax``, LayerNorm decomposed (``ReduceMean``/``Sub``/
``Pow``/``Sqrt``/``Div``) or as ``LayerNormalization``, GELU through ``Erf`` or as ``Gelu``,
residual ``Add``s and a pooler (``Gather`` of token 0, ``Gemm``, ``Tanh``).

The operator forms follow the opset: attribute ``axes`` before 13 (``Unsqueeze``, ``Split``)
and before 18 (``ReduceMean``), ``LayerNormalization`` from 17, ``Gelu`` from 20.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto

from .builder import ModelBuilder

__all__ = ["make_bert"]


class _Bert:
    def __init__(self, opset: int, hidden: int, heads: int, layers: int, vocab: int, seed: int):
        self.b = ModelBuilder(f"bert_opset{opset}", opset, seed)
        self.opset, self.hidden, self.heads, self.layers, self.vocab = opset, hidden, heads, layers, vocab
        self.head_dim = hidden // heads

    # -- opset-dependent forms ------------------------------------------------------------------
    def unsqueeze(self, x: str, axes: list[int]) -> str:
        if self.opset < 13:
            return self.b.node("Unsqueeze", [x], axes=axes)
        return self.b.node("Unsqueeze", [x, self.b.ints(axes)])

    def reduce_mean(self, x: str) -> str:
        if self.opset < 18:
            return self.b.node("ReduceMean", [x], axes=[-1])
        return self.b.node("ReduceMean", [x, self.b.ints([-1])])

    def dim(self, x: str, index: int) -> str:
        """A 1-element int64 tensor holding dim ``index`` of ``x`` (Shape -> Gather -> Unsqueeze)."""
        scalar = self.b.node("Gather", [self.b.node("Shape", [x]), self.b.constant(np.array(index, np.int64))],
                             axis=0)
        return self.unsqueeze(scalar, [0])

    def layer_norm(self, x: str) -> str:
        gamma = self.b.weight("ln_gamma", (self.hidden,), 0.1, 1.0)
        beta = self.b.weight("ln_beta", (self.hidden,), 0.1)
        if self.opset >= 17:
            return self.b.node("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-12)
        mean = self.reduce_mean(x)
        centred = self.b.node("Sub", [x, mean])
        variance = self.reduce_mean(self.b.node("Pow", [centred, self.b.constant(np.array(2.0, np.float32))]))
        spread = self.b.node("Sqrt", [self.b.node("Add", [variance, self.b.constant(np.array(1e-12, np.float32))])])
        normed = self.b.node("Div", [centred, spread])
        return self.b.node("Add", [self.b.node("Mul", [normed, gamma]), beta])

    def gelu(self, x: str) -> str:
        if self.opset >= 20:
            return self.b.node("Gelu", [x])
        scaled = self.b.node("Div", [x, self.b.constant(np.array(math.sqrt(2.0), np.float32))])
        shifted = self.b.node("Add", [self.b.node("Erf", [scaled]), self.b.constant(np.array(1.0, np.float32))])
        return self.b.node("Mul", [self.b.node("Mul", [x, shifted]), self.b.constant(np.array(0.5, np.float32))])

    def linear(self, x: str, fan_in: int, fan_out: int) -> str:
        weight = self.b.weight("w", (fan_in, fan_out), 1.0 / math.sqrt(fan_in))
        return self.b.node("Add", [self.b.node("MatMul", [x, weight]), self.b.weight("bias", (fan_out,), 0.02)])

    # -- the model --------------------------------------------------------------------------------
    def embeddings(self, ids: str) -> str:
        b, hidden = self.b, self.hidden
        words = b.node("Gather", [b.weight("word_embeddings", (self.vocab, hidden), 1.0), ids], axis=0)
        seq = b.node("Gather", [b.node("Shape", [ids]), b.constant(np.array(1, np.int64))], axis=0)
        positions_table = b.weight("position_embeddings", (64, hidden), 1.0)
        if self.opset >= 14:
            position_ids = b.node("Range", [b.constant(np.array(0, np.int64)), seq,
                                            b.constant(np.array(1, np.int64))])
            position_ids = self.unsqueeze(position_ids, [0])
        else:
            buffer = b.initializer("position_ids", np.arange(64, dtype=np.int64)[None, :])
            position_ids = b.node("Slice", [buffer, b.ints([0]), self.unsqueeze(seq, [0]), b.ints([1])])
        positions = b.node("Gather", [positions_table, position_ids], axis=0)
        zeros = b.node("ConstantOfShape", [b.node("Shape", [ids])],
                       value=onnx.numpy_helper.from_array(np.array([0], np.int64)))
        types = b.node("Gather", [b.weight("token_type_embeddings", (2, hidden), 1.0), zeros], axis=0)
        return self.layer_norm(b.node("Add", [b.node("Add", [words, positions]), types]))

    def extended_mask(self, mask: str) -> str:
        b = self.b
        if self.opset >= 14:
            masked = b.node("Equal", [mask, b.constant(np.array(0, np.int64))])
            bias = b.node("Where", [masked, b.constant(np.array(-10000.0, np.float32)),
                                    b.constant(np.array(0.0, np.float32))])
            return self.unsqueeze(bias, [1, 2])
        as_float = b.node("Cast", [self.unsqueeze(mask, [1, 2])], to=TensorProto.FLOAT)
        inverted = b.node("Sub", [b.constant(np.array(1.0, np.float32)), as_float])
        return b.node("Mul", [inverted, b.constant(np.array(-10000.0, np.float32))])

    def split_heads(self, x: str, perm: list[int]) -> str:
        b = self.b
        shape = b.node("Concat", [self.dim(x, 0), self.dim(x, 1), b.ints([self.heads]), b.ints([self.head_dim])],
                       axis=0)
        return b.node("Transpose", [b.node("Reshape", [x, shape])], perm=perm)

    def qkv(self, x: str) -> list[str]:
        b, hidden = self.b, self.hidden
        if self.opset < 13:
            return [self.linear(x, hidden, hidden) for _ in range(3)]
        fused = self.linear(x, hidden, 3 * hidden)
        if self.opset >= 18:
            return b.node("Split", [fused], outputs=3, axis=-1, num_outputs=3)
        return b.node("Split", [fused, b.ints([hidden] * 3)], outputs=3, axis=-1)

    def attention(self, x: str, mask: str) -> str:
        b = self.b
        q, k, v = self.qkv(x)
        queries, keys = self.split_heads(q, [0, 2, 1, 3]), self.split_heads(k, [0, 2, 3, 1])
        values = self.split_heads(v, [0, 2, 1, 3])
        scores = b.node("Div", [b.node("MatMul", [queries, keys]),
                                b.constant(np.array(math.sqrt(self.head_dim), np.float32))])
        probs = b.node("Softmax", [b.node("Add", [scores, mask])], axis=-1)
        context = b.node("Transpose", [b.node("MatMul", [probs, values])], perm=[0, 2, 1, 3])
        merged_width = b.node("Mul", [self.dim(context, 2), self.dim(context, 3)])
        shape = b.node("Concat", [self.dim(context, 0), self.dim(context, 1), merged_width], axis=0)
        merged = b.node("Reshape", [context, shape])
        return self.layer_norm(b.node("Add", [self.linear(merged, self.hidden, self.hidden), x]))

    def feed_forward(self, x: str) -> str:
        inner = self.gelu(self.linear(x, self.hidden, 4 * self.hidden))
        return self.layer_norm(self.b.node("Add", [self.linear(inner, 4 * self.hidden, self.hidden), x]))

    def build(self) -> onnx.ModelProto:
        b = self.b
        ids = b.input("input_ids", ["batch", "seq"], TensorProto.INT64)
        mask = self.extended_mask(b.input("attention_mask", ["batch", "seq"], TensorProto.INT64))
        hidden = self.embeddings(ids)
        for _ in range(self.layers):
            hidden = self.feed_forward(self.attention(hidden, mask))
        b.output(b.node("Identity", [hidden]) if self.opset >= 14 else hidden, ["batch", "seq", self.hidden])
        first = b.node("Gather", [hidden, b.constant(np.array(0, np.int64))], axis=1)
        pooled = b.node("Tanh", [b.node("Gemm", [first, b.weight("pooler", (self.hidden, self.hidden)),
                                                  b.weight("pooler_bias", (self.hidden,), 0.02)], transB=1)])
        b.output(pooled, ["batch", self.hidden])
        return b.model()


def make_bert(opset: int = 14, *, hidden: int = 64, heads: int = 4, layers: int = 2, vocab: int = 100,
              seed: int = 0) -> onnx.ModelProto:
    """A BERT-style encoder: outputs ``last_hidden_state [batch, seq, hidden]`` and ``pooled
    [batch, hidden]`` (names are the producing nodes'; see ``model.graph.output``)."""
    return _Bert(opset, hidden, heads, layers, vocab, seed).build()
