"""Converters for ONNX ``Floor``, ``Ceil``, ``Round``, ``Sign`` and ``Mod``.

``Mod`` with ``fmod=0`` (integers only) takes the divisor's sign: the catalog's ``Remainder``;
``fmod=1`` takes the dividend's sign: ``Fmod``.  PyTorch exports ``Mod`` in the shape
arithmetic of attention-head splits, where it folds away; on device tensors it is one kernel.
"""

from __future__ import annotations

from typing import Any

from .context import BuildContext, OnnxNode
from .convert_math import same_dtype
from .mapping import converts

__all__: list[str] = []


def _unary(op: str) -> Any:
    def convert(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
        return [ctx.op(op, inputs[0])]
    return convert


converts("Floor", 6, 13)(_unary("Floor"))
converts("Ceil", 6, 13)(_unary("Ceil"))
converts("Round", 11, 22)(_unary("Round"))
converts("Sign", 9, 13)(_unary("Sign"))


@converts("Mod", 10, 13, 28)
def convert_mod(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    a, b = inputs
    dtype = same_dtype(ctx, node, [a, b])
    fmod = bool(node.attr("fmod", 0))
    if not fmod and dtype.is_floating and node.since_version < 28:
        raise ValueError(f"{node.describe()}: fmod=0 is defined for integers only before opset 28; floats "
                         "need fmod=1")
    return [ctx.op("Fmod" if fmod else "Remainder", a, b)]
