"""Converters for ONNX comparisons, logic and ``Clip``.

- ``Equal``/``Less``/``Greater``/``LessOrEqual``/``GreaterOrEqual`` map onto the catalog's
  ``EqTensor``/``LtTensor``/``GtTensor``/``LeTensor``/``GeTensor`` (bool results, NumPy
  broadcasting; ONNX gives both inputs one type, so the catalog's promotion never applies).
- ``Not``/``And``/``Or``/``Xor`` map onto ``LogicalNot``/``LogicalAnd``/``LogicalOr``/
  ``LogicalXor`` (ONNX takes bool tensors only).
- ``Clip``: opset 6's attribute form (``min``/``max`` floats) and opset 11+'s input form
  (optional scalar tensors ``min``/``max``).  Bounds known at build time become ``Clamp``'s
  scalar attributes; bounds computed on the device become ``Maximum``/``Minimum``.  An absent
  bound (or an empty name) does not clamp.  ``min > max`` gives ``max`` everywhere, as ONNX
  specifies (numpy's ``clip`` rule).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import DType
from .context import BuildContext, OnnxNode
from .convert_math import same_dtype
from .mapping import converts

__all__ = ["python_scalar"]


def _compare(op: str) -> Any:
    def convert(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
        a, b = inputs
        same_dtype(ctx, node, [a, b])
        return [ctx.op(op, a, b)]
    return convert


converts("Equal", 11, 13, 19)(_compare("EqTensor"))
converts("Less", 9, 13)(_compare("LtTensor"))
converts("Greater", 9, 13)(_compare("GtTensor"))
converts("LessOrEqual", 12, 16)(_compare("LeTensor"))
converts("GreaterOrEqual", 12, 16)(_compare("GeTensor"))


def _logical(op: str) -> Any:
    def convert(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
        for value in inputs:
            if ctx.dtype(value) != DType.bool:
                raise ValueError(f"{node.describe()}: inputs must be bool tensors, got {ctx.dtype(value).name}")
        return [ctx.op(op, *inputs)]
    return convert


converts("Not", 1)(_logical("LogicalNot"))
converts("And", 7)(_logical("LogicalAnd"))
converts("Or", 7)(_logical("LogicalOr"))
converts("Xor", 7)(_logical("LogicalXor"))


def python_scalar(value: Any, dtype: DType) -> int | float | bool:
    """One element as the Python number a catalog scalar attribute of ``dtype`` takes."""
    item = np.asarray(value).reshape(-1)[0]
    if dtype == DType.bool:
        return bool(item)
    return int(item) if dtype.is_integer else float(item)


@converts("Clip", 6)
def convert_clip_6(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    """Opsets 6-10: float ``min``/``max`` attributes (defaults: the whole float range)."""
    low, high = node.attr("min"), node.attr("max")
    if low is None and high is None:
        return [inputs[0]]
    return [ctx.op("Clamp", inputs[0], min=None if low is None else float(low),
                   max=None if high is None else float(high))]


@converts("Clip", 11, 12, 13)
def convert_clip(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    x = inputs[0]
    dtype = ctx.dtype(x)
    bounds = [inputs[index] if len(inputs) > index else None for index in (1, 2)]
    for bound in bounds:
        if bound is not None and (ctx.dtype(bound) != dtype or int(np.prod(ctx.shape(bound))) != 1):
            raise ValueError(f"{node.describe()}: min and max must be scalars of X's type {dtype.name}, got "
                             f"{ctx.dtype(bound).name}{list(ctx.shape(bound))}")
    known = [None if bound is None else _known(ctx, bound) for bound in bounds]
    if all(bound is None or value is not None for bound, value in zip(bounds, known)):
        low, high = (None if value is None else python_scalar(value, dtype) for value in known)
        if low is None and high is None:
            return [x]
        return [ctx.op("Clamp", x, min=low, max=high)]
    low_value, high_value = bounds
    if low_value is not None:
        x = ctx.op("Maximum", x, low_value)
    if high_value is not None:
        x = ctx.op("Minimum", x, high_value)
    return [x]


def _known(ctx: BuildContext, value: Any) -> np.ndarray | None:
    """The value's contents when the context knows them at build time, else None."""
    try:
        return np.asarray(ctx.static_value(value, "Clip's bound"))
    except Exception:  # noqa: BLE001 - UnsupportedFeature: computed on the device
        return None
