"""onnxruntime with exact integer products: the reference for dynamically quantized models.

onnxruntime's x86 kernel for uint8 x int8 ``MatMulInteger`` (and the QLinear ops built on it)
adds byte pairs in saturating 16-bit arithmetic unless the CPU has VNNI, so on such machines
its int8 models are not exact: one saturated sum changes a dynamic quantization downstream.
Rewriting every ``MatMulInteger`` as an int32 ``MatMul`` of the zero-point-shifted operands
gives the exact result; the difference between the two is onnxruntime's own error.
"""

from __future__ import annotations

import copy
from typing import Any

from onnx import TensorProto, helper

__all__ = ["exact_integer_products"]


def exact_integer_products(model: Any) -> Any:
    """A copy of ``model`` whose ``MatMulInteger`` nodes are exact int32 ``MatMul`` nodes."""
    model = copy.deepcopy(model)
    nodes = []
    for node in model.graph.node:
        if node.op_type != "MatMulInteger":
            nodes.append(node)
            continue
        zero_points = list(node.input[2:4]) + [""] * (4 - len(node.input))
        shifted = []
        for index, (value, zero_point) in enumerate(zip(node.input[:2], zero_points)):
            name = f"{node.output[0]}/exact{index}"
            nodes.append(helper.make_node("Cast", [value], [name], to=TensorProto.INT32))
            if zero_point:
                nodes.append(helper.make_node("Cast", [zero_point], [name + "/zp"], to=TensorProto.INT32))
                nodes.append(helper.make_node("Sub", [name, name + "/zp"], [name + "/shifted"]))
                name += "/shifted"
            shifted.append(name)
        nodes.append(helper.make_node("MatMul", shifted, list(node.output)))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model
