"""Reading the export convention, and refusing models that do not follow it."""

from __future__ import annotations

import onnx
import pytest

from aclpipe import GraphError
from aclpipe.decode import KVLayout, read_kv_layout


def test_the_toy_decoder_layout(toy_model):
    layout = read_kv_layout(toy_model)
    assert layout == KVLayout(layers=2, heads=4, head_dim=8, position_ids=True)
    assert layout.pairs()[1] == ("past_key_values.0.value", "present.0.value")


def test_a_present_that_is_not_concat_of_its_past_is_refused(toy_model):
    model = onnx.ModelProto()
    model.CopyFrom(toy_model)
    node = next(node for node in model.graph.node if "present.1.key" in node.output)
    node.input[0], node.input[1] = node.input[1], node.input[0]  # Concat(new, past)
    with pytest.raises(GraphError, match=r"present.1.key: expected Concat\(past_key_values.1.key, new, axis=2\)"):
        read_kv_layout(model)


def test_a_model_without_a_cache_is_refused(toy_model):
    model = onnx.ModelProto()
    model.CopyFrom(toy_model)
    inputs = [value for value in model.graph.input if not value.name.startswith("past_key_values.")]
    del model.graph.input[:]
    model.graph.input.extend(inputs)
    with pytest.raises(GraphError, match="not a decoder in the optimum / onnxruntime-genai convention"):
        read_kv_layout(model)
