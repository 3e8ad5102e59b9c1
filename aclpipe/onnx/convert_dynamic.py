"""Ops whose output *shape* depends on tensor data: ``NonZero`` (and the rule for them).

A prepared pipeline plans memory, streams and executors for shapes known before anything
runs; an op whose output size depends on values computed on the device would force a
synchronization in the middle of every run and a re-plan of the rest of the graph for each
new size (what a "sync point" would do).  aclpipe chooses the other way:

- when the op's input is known at build time (an initializer, a ``Constant``, shape
  arithmetic folded once the input shapes are bound, a value computed from small graph
  inputs, which then become host values, or any value the eager evaluator sees), the op is
  evaluated on the host and its result is a constant of the specialized graph;
- otherwise the import stops with :class:`DataDependentShapeError`, naming the node, the op
  and the value, before anything is planned.

Models that need the data-dependent form can be split at that node: run the part before it
through one pipeline, then feed the result to a second model as an input.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .context import BuildContext, OnnxNode, UnsupportedFeature
from .graph_context import HostValueNeeded
from .mapping import converts

__all__ = ["DataDependentShapeError"]


class DataDependentShapeError(UnsupportedFeature):
    """An op's output shape depends on tensor data that is computed on the device.

    Attributes
    ----------
    node:
        The ONNX node (``node.op_type`` and ``node.name`` say which).
    """

    def __init__(self, node: OnnxNode, what: str):
        super().__init__(node, f"the output shape of {node.op_type} depends on the values of {what}, which are "
                               "computed on the device; a prepared pipeline plans every shape before it runs, so "
                               "aclpipe evaluates this op only when its input is known at build time (a constant "
                               "or folded shape arithmetic). Split the model at this node, or make the input a "
                               "constant")


def _known(ctx: BuildContext, node: OnnxNode, value: Any, what: str) -> np.ndarray:
    try:
        return np.asarray(ctx.static_value(value, what))
    except HostValueNeeded:
        raise  # computed from small graph inputs: they become host values, and the op folds
    except UnsupportedFeature:
        raise DataDependentShapeError(node, what) from None


@converts("NonZero", 9, 13)
def convert_non_zero(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
    values = _known(ctx, node, inputs[0], "NonZero's input")
    return [ctx.constant(np.array(np.nonzero(values), dtype=np.int64).reshape(values.ndim, -1))]
