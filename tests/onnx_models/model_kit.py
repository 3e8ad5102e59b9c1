"""Small helpers the ONNX model tests share: build a one-graph model, declare a tensor, run a
graph through a Pipeline on a sanitizing simulated device."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

import aclpipe

__all__ = ["make_model", "run_pipeline", "tensor"]


def make_model(nodes: Sequence[onnx.NodeProto], inputs: Sequence[onnx.ValueInfoProto],
               outputs: Sequence[onnx.ValueInfoProto], initializers: Iterable[onnx.TensorProto] = (),
               opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), "test", list(inputs), list(outputs), initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def tensor(name: str, dims: Sequence[Any] | None, elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, dims)


async def run_pipeline(graph: aclpipe.Graph, feeds: Sequence[Mapping[str, np.ndarray]], streams: int = 2
                       ) -> list[dict[str, np.ndarray]]:
    """Run each feed through one Pipeline (sanitizer on); the results in order."""
    device = aclpipe.open_device("sim", sanitizer=True)
    try:
        async with aclpipe.Pipeline(graph, device, streams=streams) as pipe:
            return [await pipe.run(**batch) for batch in feeds]
    finally:
        device.close()
