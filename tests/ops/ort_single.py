"""One ONNX node run by onnxruntime: the reference for ops whose ONNX definition the catalog follows."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")

from onnx import helper  # noqa: E402 - only once onnxruntime is known to be there

__all__ = ["ort_node"]


def ort_node(op: str, inputs: list[np.ndarray | None], outputs: int = 1, opset: int = 21, **attrs: Any
             ) -> list[np.ndarray]:
    """Run one ``op`` node on ``inputs`` (None: an absent optional input) with onnxruntime."""
    names, graph_inputs, feeds = [], [], {}
    for index, array in enumerate(inputs):
        if array is None:
            names.append("")
            continue
        name = f"in{index}"
        names.append(name)
        elem = helper.np_dtype_to_tensor_dtype(array.dtype)
        graph_inputs.append(helper.make_tensor_value_info(name, elem, list(array.shape)))
        feeds[name] = array
    out_names = [f"out{i}" for i in range(outputs)]
    node = helper.make_node(op, names, out_names, **attrs)
    graph = helper.make_graph([node], op, graph_inputs, [helper.make_empty_tensor_value_info(n) for n in out_names])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return [np.asarray(value) for value in session.run(None, feeds)]


