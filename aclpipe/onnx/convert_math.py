"""Converters for ONNX math: elementwise, activations, normalizations, MatMul and Gemm.

Where the catalog's (PyTorch-style) semantics differ from ONNX's, the converter bridges:

- ONNX keeps the input type where aclnn promotes: integer ``Div`` truncates toward zero
  (catalog true division, then a truncating ``Cast``); ``Pow`` returns the base's type;
- pre-13 ``Softmax``/``LogSoftmax`` flatten the input to 2-D at ``axis`` and normalize each row;
- ``BatchNormalization`` of rank > 4 runs on the ``[N, C, rest]`` view.
"""

from __future__ import annotations

import math
from functools import reduce
from typing import Any

from ..dtypes import DType
from .context import BuildContext, OnnxNode, normalize_axis
from .mapping import converts

__all__: list[str] = []


def same_dtype(ctx: BuildContext, node: OnnxNode, values: list[Any]) -> DType:
    """ONNX binary ops take one type for every input (no promotion)."""
    dtypes = {ctx.dtype(value) for value in values}
    if len(dtypes) != 1:
        raise ValueError(f"{node.describe()}: inputs must have one element type, got "
                         f"{', '.join(sorted(d.name for d in dtypes))}")
    return dtypes.pop()


def cast_to(ctx: BuildContext, value: Any, dtype: DType) -> Any:
    """``value`` as ``dtype`` (a no-op when it already is)."""
    return value if ctx.dtype(value) == dtype else ctx.op("Cast", value, dtype=dtype)


# -- elementwise ------------------------------------------------------------------------------
def _arithmetic(op: str) -> Any:
    def convert(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
        a, b = inputs
        dtype = same_dtype(ctx, node, [a, b])
        if op == "Div" and not dtype.is_floating:
            # aclnn divides integers exactly (float result); ONNX truncates toward zero, as Cast does.
            return [cast_to(ctx, ctx.op("Div", a, b), dtype)]
        return [ctx.op(op, a, b)]
    return convert


for _op, _catalog in (("Add", "Add"), ("Sub", "Sub"), ("Mul", "Mul"), ("Div", "Div")):
    converts(_op, 7, 13, 14)(_arithmetic(_catalog))


@converts("Pow", 7, 12, 13, 15)
def convert_pow(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    base, exponent = inputs
    return [cast_to(ctx, ctx.op("Pow", base, exponent), ctx.dtype(base))]  # ONNX keeps the base's type


def _unary(op: str) -> Any:
    def convert(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
        return [ctx.op(op, inputs[0])]
    return convert


for _op in ("Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Sigmoid", "Tanh"):
    converts(_op, 6, 13)(_unary(_op))
converts("Erf", 9, 13)(_unary("Erf"))
converts("Relu", 6, 13, 14)(_unary("Relu"))


def _variadic(op: str) -> Any:
    """Max, Min, Sum: fold any number of broadcasting inputs pairwise."""
    def convert(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
        present = [value for value in inputs if value is not None]
        if not present:
            raise ValueError(f"{node.describe()}: needs at least one input")
        same_dtype(ctx, node, present)
        return [reduce(lambda left, right: ctx.op(op, left, right), present)]
    return convert


converts("Max", 8, 12, 13)(_variadic("Maximum"))
converts("Min", 8, 12, 13)(_variadic("Minimum"))
converts("Sum", 8, 13)(_variadic("Add"))


@converts("Gelu", 20)
def convert_gelu(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    approximate = node.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise ValueError(f"{node.describe()}: approximate must be 'none' or 'tanh', got {approximate!r}")
    return [ctx.op("GeluV2", inputs[0], approximate=approximate)]


# -- softmax -------------------------------------------------------------------------------
def _softmax_2d(op: str) -> Any:
    """Opsets 11-12: the input is coerced to 2-D ``[prod(shape[:axis]), prod(shape[axis:])]``."""
    def convert(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
        x = inputs[0]
        shape = ctx.shape(x)
        axis = normalize_axis(node, int(node.attr("axis", 1)), len(shape))
        if axis == len(shape) - 1:
            return [ctx.op(op, x, dim=-1)]  # the coerced rows are the last dim already
        rows = (math.prod(shape[:axis]), math.prod(shape[axis:]))
        flat = ctx.op(op, ctx.op("Reshape", x, shape=list(rows)), dim=1)
        return [ctx.op("Reshape", flat, shape=list(shape))]
    return convert


def _softmax_axis(op: str) -> Any:
    def convert(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
        x = inputs[0]
        axis = normalize_axis(node, int(node.attr("axis", -1)), len(ctx.shape(x)))
        return [ctx.op(op, x, dim=axis)]
    return convert


for _op in ("Softmax", "LogSoftmax"):
    converts(_op, 11)(_softmax_2d(_op))
    converts(_op, 13)(_softmax_axis(_op))


# -- normalization -------------------------------------------------------------------------
@converts("LayerNormalization", 17)
def convert_layer_norm(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    x, scale, bias = (inputs + [None, None])[:3]
    if int(node.attr("stash_type", 1)) != 1:
        raise node.unsupported("stash_type other than 1 (float32 statistics)")
    shape = ctx.shape(x)
    axis = normalize_axis(node, int(node.attr("axis", -1)), len(shape))
    normalized = list(shape[axis:])
    scale, bias = (_broadcast_to(ctx, value, normalized) for value in (scale, bias))
    stats = node.num_outputs > 1
    results = ctx.op("LayerNorm", x, scale, bias, outputs=3 if stats else 1, normalizedShape=normalized,
                     eps=float(node.attr("epsilon", 1e-5)))
    if not stats:
        return [results]
    y, mean, rstd = results
    return [y, mean, rstd][:node.num_outputs]


def _broadcast_to(ctx: BuildContext, value: Any, shape: list[int]) -> Any:
    if value is None or list(ctx.shape(value)) == shape:
        return value
    return ctx.op("Expand", value, size=shape)


@converts("BatchNormalization", 9, 14, 15)
def convert_batch_norm(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    if int(node.attr("training_mode", 0)) or sum(node.wanted[1:]):
        raise node.unsupported("training mode (batch statistics and running-stat outputs); "
                               "export the model in inference mode")
    x, scale, bias, mean, var = inputs
    shape = ctx.shape(x)
    attrs: dict[str, Any] = {"eps": float(node.attr("epsilon", 1e-5)), "training": False}
    if len(shape) in (2, 3, 4):
        return [ctx.op("BatchNorm", x, scale, bias, mean, var, **attrs)]
    if len(shape) < 2:
        raise ValueError(f"{node.describe()}: X must have a channel dim (rank >= 2), got {list(shape)}")
    folded = ctx.op("Reshape", x, shape=[shape[0], shape[1], math.prod(shape[2:])])
    return [ctx.op("Reshape", ctx.op("BatchNorm", folded, scale, bias, mean, var, **attrs), shape=list(shape))]


# -- matrix products -----------------------------------------------------------------------
@converts("MatMul", 9, 13)
def convert_matmul(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    a, b = inputs
    same_dtype(ctx, node, [a, b])
    return [ctx.op("Matmul", a, b)]


@converts("Gemm", 11, 13)
def convert_gemm(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    """``Y = alpha * A' @ B' + beta * C`` with ``A'``/``B'`` transposed on request."""
    a, b, c = (inputs + [None])[:3]
    if int(node.attr("transA", 0)):
        a = ctx.op("Transpose", a, dim0=0, dim1=1)
    if int(node.attr("transB", 0)):
        b = ctx.op("Transpose", b, dim0=0, dim1=1)
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    if c is not None and beta != 0.0:
        return [ctx.op("Addmm", c, a, b, beta=beta, alpha=alpha)]
    product = ctx.op("Mm", a, b)
    return [product if alpha == 1.0 else ctx.op("Muls", product, other=alpha)]
