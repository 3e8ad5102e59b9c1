"""Converters for ONNX ``ArgMax``/``ArgMin``, ``TopK``, ``Range`` and ``Tile``.

- ``ArgMax``/``ArgMin`` (11, 12, 13): the catalog ops return the first extreme index;
  ``select_last_index=1`` (12+) runs them on the input reversed along the axis and maps the
  index back (``size - 1 - i``).
- ``TopK`` (11, 24): ``K`` must be known at build time; ``largest``/``sorted`` as attributes of
  the catalog's ``Topk`` (equal values keep index order, as ONNX requires).
- ``Range`` (11, 27): start, limit and delta must be known at build time (they are after shape
  folding); the result is a constant ``start + i * delta`` for ``i < max(ceil((limit - start)
  / delta), 0)``.
- ``Tile`` (6, 13): ``repeats`` known at build time; ``x`` of shape ``[d0, d1, ...]`` is viewed as
  ``[1, d0, 1, d1, ...]`` (only for repeated dims), expanded to ``[r0, d0, r1, d1, ...]`` and
  reshaped to ``[r0 * d0, ...]``: one ``Expand`` kernel.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .context import BuildContext, OnnxNode, normalize_axis, static_ints
from .mapping import converts

__all__: list[str] = []


def _arg(op: str) -> Any:
    def convert(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
        x = inputs[0]
        shape = ctx.shape(x)
        axis = normalize_axis(node, int(node.attr("axis", 0)), len(shape))
        keep = bool(node.attr("keepdims", 1))
        if not int(node.attr("select_last_index", 0)):
            return [ctx.op(op, x, dim=axis, keepdim=keep)]
        size = shape[axis]
        backwards = ctx.constant(np.arange(size - 1, -1, -1, dtype=np.int64))
        index = ctx.op(op, ctx.op("IndexSelect", x, backwards, dim=axis), dim=axis, keepdim=keep)
        return [ctx.op("Adds", ctx.op("Muls", index, other=-1), other=size - 1)]
    return convert


converts("ArgMax", 11, 12, 13)(_arg("ArgMax"))
converts("ArgMin", 11, 12, 13)(_arg("ArgMin"))


@converts("TopK", 11, 24)
def convert_top_k(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    x, k_value = inputs
    (k,) = static_ints(ctx, k_value, "TopK's K")
    axis = normalize_axis(node, int(node.attr("axis", -1)), len(ctx.shape(x)))
    values, indices = ctx.op("Topk", x, outputs=2, k=k, dim=axis, largest=bool(node.attr("largest", 1)),
                             sorted=bool(node.attr("sorted", 1)))
    return [values, indices]


@converts("Range", 11, 27)
def convert_range(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    start, limit, delta = (np.asarray(ctx.static_value(value, f"Range's {what}")).reshape(())
                           for value, what in zip(inputs, ("start", "limit", "delta")))
    if delta == 0:
        raise ValueError(f"{node.describe()}: delta must not be 0")
    count = max(math.ceil((float(limit) - float(start)) / float(delta)), 0)
    # Integers exactly in int64; floats in float64 (at least stash_type=1's fp32), rounded once.
    wide = np.int64 if start.dtype.kind in "iu" else np.float64
    steps = np.arange(count, dtype=wide) * delta.astype(wide)
    values = (steps + start.astype(wide)).astype(start.dtype)
    return [ctx.constant(values)]


@converts("Tile", 6, 13)
def convert_tile(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    x, repeats_value = inputs
    shape = list(ctx.shape(x))
    repeats = static_ints(ctx, repeats_value, "Tile's repeats")
    if len(repeats) != len(shape) or any(r < 0 for r in repeats):
        raise ValueError(f"{node.describe()}: repeats must hold {len(shape)} values >= 0, got {repeats}")
    if all(r == 1 for r in repeats):
        return [x]
    spread, expanded = [], []
    for size, count in zip(shape, repeats):
        if count != 1:
            spread.append(1)
            expanded.append(count)
        spread.append(size)
        expanded.append(size)
    tiled = ctx.op("Expand", ctx.op("Reshape", x, shape=spread), size=expanded)
    return [ctx.op("Reshape", tiled, shape=[size * count for size, count in zip(shape, repeats)])]
