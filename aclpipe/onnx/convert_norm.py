"""Converters for ONNX ``InstanceNormalization`` and ``GroupNormalization`` (catalog
``GroupNorm``).

- ``InstanceNormalization(x, scale, B; epsilon)``: ``GroupNorm`` with one group per channel.
- ``GroupNormalization(x, scale, bias; num_groups, epsilon)``: opset 21 gives ``scale`` and
  ``bias`` per channel, as the catalog takes them; opset 18 gave them per group, so each is
  repeated over its group's channels (``Expand`` of a ``[G, 1]`` view to ``[G, C/G]``).
  Statistics are computed in float32 (``stash_type=1``, the only value onnxruntime accepts).
"""

from __future__ import annotations

from typing import Any

from .context import BuildContext, OnnxNode
from .convert_tensor import _reshape
from .mapping import converts

__all__: list[str] = []


@converts("InstanceNormalization", 6, 22)
def convert_instance_norm(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    x, scale, bias = inputs
    channels = ctx.shape(x)[1]
    return [ctx.op("GroupNorm", x, scale, bias, group=channels, eps=float(node.attr("epsilon", 1e-5)))]


@converts("GroupNormalization", 18, 21)
def convert_group_norm(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    x, scale, bias = inputs
    groups = int(node.attr("num_groups"))
    channels = ctx.shape(x)[1]
    if int(node.attr("stash_type", 1)) != 1:
        raise node.unsupported("stash_type other than 1 (statistics in float32)")
    if groups < 1 or channels % groups:
        raise ValueError(f"{node.describe()}: num_groups={groups} must divide the {channels} channels")
    if node.since_version < 21 and groups != channels:
        scale, bias = (_per_channel(ctx, value, groups, channels) for value in (scale, bias))
    return [ctx.op("GroupNorm", x, scale, bias, group=groups, eps=float(node.attr("epsilon", 1e-5)))]


def _per_channel(ctx: BuildContext, value: Any, groups: int, channels: int) -> Any:
    column = _reshape(ctx, value, [groups, 1])
    return _reshape(ctx, ctx.op("Expand", column, size=[groups, channels // groups]), [channels])
