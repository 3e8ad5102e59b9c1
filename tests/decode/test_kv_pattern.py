"""Reading the export convention, and refusing models that do not follow it."""

from __future__ import annotations

import onnx
import pytest

from aclpipe import GraphError
from aclpipe.decode import read_kv_layout
from aclpipe.decode.kv_pattern import step_model


def test_the_toy_decoder_layout(toy_model):
    layout = read_kv_layout(toy_model)
    assert (layout.layers, layout.heads, layout.head_dim, layout.position_ids) == (2, 4, 8, True)
    assert layout.pairs()[1] == ("past_key_values.0.value", "present.0.value")
    concats = {node.output[0]: node for node in toy_model.graph.node if node.op_type == "Concat"}
    assert layout.news == tuple(concats[present].input[1] for _, present in layout.pairs())


def test_a_step_reads_back_the_logits_only(toy_model):
    layout = read_kv_layout(toy_model)
    step = step_model(toy_model, layout)
    assert [value.name for value in step.graph.output] == ["logits"]
    assert [value.name for value in toy_model.graph.output][1] == "present.0.key"  # the model itself is left alone


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
