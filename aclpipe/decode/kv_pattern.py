"""Reading a decoder's export convention: which inputs are the past, which outputs the present.

The optimum / onnxruntime-genai convention: inputs ``input_ids`` [batch, seq],
``attention_mask`` [batch, past + seq], optional ``position_ids`` [batch, seq] and per layer
``past_key_values.{i}.key`` / ``.value`` [batch, heads, past, head_dim]; outputs ``logits``
[batch, seq, vocab] and ``present.{i}.key`` / ``.value``.  Each present must be
``Concat(past, new, axis=2)`` of its own past (through Identity nodes at most): that is what
lets the decoder keep the cache on the device and append each step's new positions to it in
place (:mod:`.cache_graph`), instead of copying the past into a new present every step.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import onnx

from ..errors import GraphError

__all__ = ["KVLayout", "read_kv_layout", "step_model"]

_REQUIRED_INPUTS = ("input_ids", "attention_mask")


@dataclass(frozen=True)
class KVLayout:
    """What a decoder model's inputs and outputs are.

    Attributes
    ----------
    layers, heads, head_dim:
        The cache's sizes (heads and head_dim from the past inputs' fixed dims).
    position_ids:
        Whether the model takes ``position_ids``.
    """

    layers: int
    heads: int
    head_dim: int
    position_ids: bool
    #: Per :meth:`pairs` entry, the value concatenated after the past: the step's new positions.
    news: tuple[str, ...] = ()

    def past(self, layer: int, kind: str) -> str:
        return f"past_key_values.{layer}.{kind}"

    def present(self, layer: int, kind: str) -> str:
        return f"present.{layer}.{kind}"

    def pairs(self) -> list[tuple[str, str]]:
        """(past input, present output) for every layer, key then value."""
        return [(self.past(layer, kind), self.present(layer, kind))
                for layer in range(self.layers) for kind in ("key", "value")]


def read_kv_layout(model: onnx.ModelProto) -> KVLayout:
    """The layout of ``model``, checked against the convention.

    Raises
    ------
    GraphError
        An input or output of the convention is missing, a past input's heads or head_dim is
        not a fixed dim, or a present is not ``Concat(past, new, axis=2)`` of its past.
    """
    graph = model.graph
    initializers = {tensor.name for tensor in graph.initializer}
    inputs = {value.name: value for value in graph.input if value.name not in initializers}
    outputs = {value.name for value in graph.output}
    missing = [name for name in _REQUIRED_INPUTS if name not in inputs] + (
        [] if "logits" in outputs else ["logits (output)"])
    layers = sum(1 for name in inputs if name.startswith("past_key_values.") and name.endswith(".key"))
    if missing or layers == 0:
        missing = missing or ["past_key_values.0.key"]
        raise GraphError(
            f"not a decoder in the optimum / onnxruntime-genai convention: missing {missing}"
            f"; expected inputs input_ids, attention_mask, [position_ids], past_key_values.{{i}}.key/.value and "
            f"outputs logits, present.{{i}}.key/.value (inputs seen: {sorted(inputs)})")
    heads, head_dim = _cache_dims(inputs["past_key_values.0.key"])
    layout = KVLayout(layers, heads, head_dim, "position_ids" in inputs)
    producers = {output: node for node in graph.node for output in node.output}
    news = []
    for past, present in layout.pairs():
        if past not in inputs or present not in outputs:
            raise GraphError(f"decoder layer cache: expected input {past!r} and output {present!r}; "
                             f"one is missing (outputs seen: {sorted(outputs)})")
        news.append(_check_concat(past, present, producers))
    return dataclasses.replace(layout, news=tuple(news))


def step_model(model: onnx.ModelProto, layout: KVLayout) -> onnx.ModelProto:
    """The model a decoder step runs: ``logits`` its only output.  The presents stay on the
    device: each ``Concat(past, new)`` becomes an in-place append to the cache, which the
    attention reads where it is (:class:`~aclpipe.decode.cache_graph.CacheGraph`), so a step
    reads back nothing but the logits."""
    step = onnx.ModelProto()
    step.CopyFrom(model)
    kept = [value for value in step.graph.output if value.name == "logits"]
    del step.graph.output[:]
    step.graph.output.extend(kept)
    return step


def _cache_dims(value: onnx.ValueInfoProto) -> tuple[int, int]:
    dims = value.type.tensor_type.shape.dim
    fixed = [dim.dim_value if dim.HasField("dim_value") else None for dim in dims]
    if len(fixed) != 4 or fixed[1] is None or fixed[3] is None:
        raise GraphError(f"{value.name}: expected [batch, heads, past, head_dim] with heads and head_dim fixed, "
                         f"got dims {[dim.dim_param or dim.dim_value for dim in dims]}; re-export with static heads")
    return fixed[1], fixed[3]


def _check_concat(past: str, present: str, producers: dict[str, onnx.NodeProto]) -> str:
    """The value ``present``'s Concat puts after ``past``, once checked that it is one."""
    node = producers.get(present)
    while node is not None and node.op_type == "Identity":
        node = producers.get(node.input[0])
    axis = None if node is None else next((attr.i for attr in node.attribute if attr.name == "axis"), None)
    source = None if node is None or not node.input else _through_identity(node.input[0], producers)
    if node is None or node.op_type != "Concat" or axis not in (2, -2) or len(node.input) != 2 or source != past:
        seen = "a graph input" if node is None else f"{node.op_type} {node.name!r} of {list(node.input)}"
        raise GraphError(f"{present}: expected Concat({past}, new, axis=2), the pattern the decoder appends to its "
                         f"cache in place; got {seen}")
    return str(node.input[1])


def _through_identity(name: str, producers: dict[str, onnx.NodeProto]) -> str:
    node = producers.get(name)
    while node is not None and node.op_type == "Identity":
        name = node.input[0]
        node = producers.get(name)
    return name
