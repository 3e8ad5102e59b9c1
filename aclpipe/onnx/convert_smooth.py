"""Converters for ONNX ``Elu``, ``Selu``, ``Celu``, ``Softplus``, ``Mish`` (catalog
:mod:`aclpipe.ops.smooth`), ``GlobalMaxPool`` and ``IsNaN``.

- ``Selu(alpha, gamma)`` is the catalog's ``Elu(alpha, scale=gamma)``: the catalog's ``Selu``
  has PyTorch's fixed constants, which ONNX's defaults equal only to float32 precision.
- ``Softplus`` is ``log(exp(x) + 1)``: the catalog's ``Softplus`` with ``beta=1`` and an
  infinite ``threshold`` (no linear cut-off).
- ``GlobalMaxPool`` is ``Amax`` over every spatial dim, keeping them as size 1.
- ``IsNaN`` is ``x != x`` (``NeTensor``), true exactly for NaN.
"""

from __future__ import annotations

from typing import Any

from .context import BuildContext, OnnxNode
from .mapping import converts

__all__: list[str] = []


@converts("Elu", 6, 22)
def convert_elu(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    return [ctx.op("Elu", inputs[0], alpha=float(node.attr("alpha", 1.0)), scale=1.0, inputScale=1.0)]


@converts("Selu", 6, 22)
def convert_selu(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    alpha = float(node.attr("alpha", 1.67326319217681884765625))
    gamma = float(node.attr("gamma", 1.05070102214813232421875))
    return [ctx.op("Elu", inputs[0], alpha=alpha, scale=gamma, inputScale=1.0)]


@converts("Celu", 12, 28)
def convert_celu(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    return [ctx.op("Celu", inputs[0], alpha=float(node.attr("alpha", 1.0)))]


@converts("Softplus", 1, 22)
def convert_softplus(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    return [ctx.op("Softplus", inputs[0], beta=1.0, threshold=float("inf"))]


@converts("Mish", 18, 22)
def convert_mish(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    return [ctx.op("Mish", inputs[0])]


@converts("GlobalMaxPool", 1, 22)
def convert_global_max_pool(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    x = inputs[0]
    rank = len(ctx.shape(x))
    if rank < 3:
        raise ValueError(f"{node.describe()}: X must be [N, C, spatial...], got {list(ctx.shape(x))}")
    return [ctx.op("Amax", x, dim=list(range(2, rank)), keepdim=True)]


@converts("IsNaN", 9, 13, 20)
def convert_is_nan(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    x = inputs[0]
    if not ctx.dtype(x).is_floating:
        raise node.unsupported(f"IsNaN of {ctx.dtype(x).name} (float inputs are supported)")
    return [ctx.op("NeTensor", x, x)]
