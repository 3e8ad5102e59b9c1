"""A small helper to write ONNX graphs node by node with seeded weights (``onnx.helper`` underneath)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["ModelBuilder"]

Dims = Sequence[int | str | None]


class ModelBuilder:
    """Collects nodes and initializers; names are made unique from ``op_type`` counters.

    Parameters
    ----------
    name:
        The graph's name.
    opset:
        The default-domain operator set the nodes are written for.
    seed:
        Seed of the weight generator (the same seed writes the same model).
    """

    def __init__(self, name: str, opset: int, seed: int = 0):
        self.name = name
        self.opset = opset
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._counts: dict[str, int] = {}

    def _fresh(self, stem: str) -> str:
        count = self._counts.get(stem, 0)
        self._counts[stem] = count + 1
        return f"{stem}_{count}"

    def input(self, name: str, dims: Dims, elem_type: int = TensorProto.FLOAT) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, list(dims)))
        return name

    def output(self, value: str, dims: Dims | None = None, elem_type: int = TensorProto.FLOAT) -> None:
        self.outputs.append(helper.make_tensor_value_info(value, elem_type, None if dims is None else list(dims)))

    def weight(self, stem: str, shape: Sequence[int], scale: float | None = None, offset: float = 0.0) -> str:
        """A seeded float32 initializer, N(offset, scale^2); the scale defaults to 1/sqrt(fan_in)."""
        if scale is None:
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
            scale = 1.0 / np.sqrt(fan_in) if len(shape) > 1 else 0.1
        array = (offset + self.rng.standard_normal(tuple(shape)) * scale).astype(np.float32)
        return self.initializer(stem, array)

    def initializer(self, stem: str, array: Any) -> str:
        name = self._fresh(stem)
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def constant(self, array: Any, stem: str = "const") -> str:
        """A ``Constant`` node holding ``array`` (how exporters write small tensors)."""
        name = self._fresh(stem)
        self.nodes.append(helper.make_node("Constant", [], [name], name=name,
                                           value=numpy_helper.from_array(np.asarray(array), name)))
        return name

    def ints(self, values: Sequence[int]) -> str:
        return self.constant(np.array(values, dtype=np.int64), "ints")

    def node(self, op_type: str, inputs: Sequence[str], outputs: int = 1, **attrs: Any) -> Any:
        """Add a node; returns its output name (or a list of names when ``outputs > 1``)."""
        name = self._fresh(op_type)
        names = [name if outputs == 1 else f"{name}:{index}" for index in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), names, name=name, **attrs))
        return names[0] if outputs == 1 else names

    def model(self) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, initializer=self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)],
                                  producer_name="aclpipe graphs/onnx_zoo")
        # The oldest IR version that carries the opset, so older runtimes read the file too.
        model.ir_version = 8 if self.opset <= 17 else 9 if self.opset <= 20 else 10
        onnx.checker.check_model(model, full_check=True)
        return model
