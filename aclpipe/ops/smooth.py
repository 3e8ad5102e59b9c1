"""Smooth activations: ``Elu``, ``Celu``, ``Selu``, ``Softplus``, ``Mish``.

Rows of the elementwise :class:`~aclpipe.ops.elementwise.UnaryOp` table, each with aclnn's
attributes (``aclnnEluGetWorkspaceSize(self, alpha, scale, inputScale, out)``,
``aclnnCelu(self, alpha, out)``, ``aclnnSoftplus(self, beta, threshold, out)``,
``aclnnSelu(self, out)``, ``aclnnMish(self, out)``).  Inputs are float32, float16 or
bfloat16, computed in float32; the output keeps the input's dtype.  None needs a workspace.

- ``Elu``: ``scale * x`` for ``x > 0``, else ``scale * alpha * (exp(inputScale * x) - 1)``
  (defaults 1, 1, 1).  ONNX's ``Selu(alpha, gamma)`` is ``Elu(alpha, scale=gamma)``.
- ``Celu``: ``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``; ``alpha`` must not be 0.
- ``Selu``: ``Elu`` with PyTorch's constants (alpha 1.6732632, scale 1.0507010).
- ``Softplus``: ``log(1 + exp(beta * x)) / beta``, and ``x`` itself where ``beta * x >
  threshold`` (defaults 1 and 20, PyTorch's); ``beta`` must not be 0.
- ``Mish``: ``x * tanh(softplus(x))``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from .base import op_error
from .checks import FLOATS
from .elementwise import UnaryOp, keep_dtype, scalar_attr
from .registry import register

__all__ = ["SELU_ALPHA", "SELU_SCALE", "softplus"]

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _finite(op: str, name: str, attrs: Mapping[str, Any], default: float, *, nonzero: bool = False) -> float:
    value = scalar_attr(op, name, attrs, default)
    if isinstance(value, bool) or not math.isfinite(float(value)) or (nonzero and value == 0):
        expected = "a finite non-zero number" if nonzero else "a finite number"
        raise op_error(op, name, expected, repr(value))
    return float(value)


def _elu_attrs(op: str, attrs: Mapping[str, Any]) -> dict[str, Any]:
    return {"alpha": _finite(op, "alpha", attrs, 1.0), "scale": _finite(op, "scale", attrs, 1.0),
            "inputScale": _finite(op, "inputScale", attrs, 1.0)}


def _elu(x: np.ndarray, params: Mapping[str, Any]) -> np.ndarray:
    negative = params["alpha"] * np.expm1(np.minimum(x, 0) * params["inputScale"])
    return np.asarray(params["scale"] * np.where(x > 0, x, negative))


def _celu_attrs(op: str, attrs: Mapping[str, Any]) -> dict[str, Any]:
    return {"alpha": _finite(op, "alpha", attrs, 1.0, nonzero=True)}


def _celu(x: np.ndarray, params: Mapping[str, Any]) -> np.ndarray:
    alpha = params["alpha"]
    return np.asarray(np.maximum(x, 0) + np.minimum(0, alpha * np.expm1(np.minimum(x, 0) / alpha)))


def softplus(x: np.ndarray, beta: float = 1.0, threshold: float = 20.0) -> np.ndarray:
    """``log1p(exp(beta * x)) / beta``, linear above ``threshold`` (overflow-free form)."""
    scaled = x * beta
    smooth = (np.maximum(scaled, 0) + np.log1p(np.exp(-np.abs(scaled)))) / beta
    return np.asarray(np.where(scaled > threshold, x, smooth))


def _softplus_attrs(op: str, attrs: Mapping[str, Any]) -> dict[str, Any]:
    return {"beta": _finite(op, "beta", attrs, 1.0, nonzero=True),
            "threshold": float(scalar_attr(op, "threshold", attrs, 20.0))}


_SMOOTH = (
    UnaryOp("Elu", _elu, FLOATS, keep_dtype, flops=5.0, parse_attrs=_elu_attrs,
            attrs={"alpha": 1.0, "scale": 1.0, "inputScale": 1.0}),
    UnaryOp("Celu", _celu, FLOATS, keep_dtype, flops=6.0, parse_attrs=_celu_attrs, attrs={"alpha": 1.0}),
    UnaryOp("Selu", lambda x, params: _elu(x, {"alpha": SELU_ALPHA, "scale": SELU_SCALE, "inputScale": 1.0}),
            FLOATS, keep_dtype, flops=5.0),
    UnaryOp("Softplus", lambda x, params: softplus(x, params["beta"], params["threshold"]), FLOATS, keep_dtype,
            flops=6.0, parse_attrs=_softplus_attrs, attrs={"beta": 1.0, "threshold": 20.0}),
    UnaryOp("Mish", lambda x, params: x * np.tanh(softplus(x)), FLOATS, keep_dtype, flops=12.0),
)

for _spec in _SMOOTH:
    register(_spec)
