"""The step graph: each Concat(past, new) rewritten into CANN's in-place scatter update of the device cache."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from aclpipe import GraphError, Pipeline, load_onnx
from aclpipe.decode import read_kv_layout
from aclpipe.decode.cache_graph import KV_WRITES, CacheGraph
from aclpipe.decode.kv_pattern import step_model


def _graph(model: onnx.ModelProto, slots: int = 4, capacity: int = 33) -> CacheGraph:
    layout = read_kv_layout(model)
    return CacheGraph(load_onnx(step_model(model, layout)), layout, slots=slots, capacity=capacity)


def _shapes(batch: int, seq: int, past: int) -> dict[str, tuple[int, ...]]:
    return {"input_ids": (batch, seq), "attention_mask": (batch, past + seq), "position_ids": (batch, seq),
            KV_WRITES: (batch, 2)}


def test_the_pasts_are_gone_and_each_concat_appends_to_a_cache_in_place(toy_model):
    graph = _graph(toy_model)
    assert set(graph.inputs) == {"input_ids", "attention_mask", "position_ids", KV_WRITES}
    assert dict(graph.outputs) == {"logits": "logits"}
    bound = graph.bind(**_shapes(2, 1, 16))
    ops = [node.op for node in bound.nodes]
    assert "Cat" not in ops and ops.count("InplaceScatterUpdate") == 4 and ops.count("KvView") == 4
    for value in graph.cache_values.values():  # the whole cache, what the decoder binds its buffer to
        assert bound.values[value].desc.shape == (5, 4, 33, 8)  # 4 slots and the scratch slot
    present = bound.values["Concat_77/cat"]  # the attention reads a strided view of the cache
    assert present.kind == "view" and present.base == graph.cache_values["past_key_values.0.key"]
    assert present.desc.shape == (2, 4, 17, 8) and present.desc.strides == (4 * 33 * 8, 33 * 8, 8, 1)


def test_a_prefill_writes_the_cache_and_reads_its_new_positions_where_they_are(toy_model):
    bound = _graph(toy_model).bind(**_shapes(2, 16, 0))
    ops = [node.op for node in bound.nodes]
    assert ops.count("InplaceScatterUpdate") == 4 and "KvView" not in ops and "Cat" not in ops


def test_the_cache_values_have_one_name_in_every_bucket(toy_model):
    graph = _graph(toy_model)
    names = dict(graph.cache_values)
    for batch, seq, past in ((1, 16, 0), (4, 1, 32), (2, 8, 0)):
        graph.bind(**_shapes(batch, seq, past))
    assert graph.cache_values == names


def test_a_past_read_by_anything_but_its_concat_is_refused(toy_model):
    model = onnx.ModelProto()
    model.CopyFrom(toy_model)
    model.graph.node.append(helper.make_node("Relu", ["past_key_values.1.value"], ["past_relu"]))
    model.graph.output.append(helper.make_empty_tensor_value_info("past_relu"))
    layout = read_kv_layout(model)
    step = step_model(model, layout)  # logits only: keep the Relu alive
    step.graph.output.append(helper.make_empty_tensor_value_info("past_relu"))
    with pytest.raises(GraphError, match="reads past_key_values.1.value.*only by the Concat"):
        CacheGraph(load_onnx(step), layout, slots=2, capacity=17)


def test_a_step_writes_its_new_positions_at_each_rows_length_and_the_others_in_the_scratch_slot(toy_model, device):
    graph = _graph(toy_model, slots=2, capacity=9)
    assert graph.scratch_slot == 2 and graph.cache_shape == (3, 4, 9, 8)
    caches = {past: device.upload(np.full((3, 4, 9, 8), 7.0, np.float32)) for past in graph.cache_values}
    try:
        with Pipeline(graph, device, depth=1, streams=1) as pipe:
            for past, value in graph.cache_values.items():
                pipe.bind_storage(value, caches[past])
            pipe.run_sync({"input_ids": np.array([[3], [4]]), "attention_mask": np.ones((2, 4), np.int64),
                           "position_ids": np.array([[2], [0]]), KV_WRITES: np.array([[0, 2], [2, 0]])})
        key = device.download(caches["past_key_values.0.key"], "float32", (3, 4, 9, 8))
    finally:
        for buffer in caches.values():
            buffer.close()
    written = key != 7.0
    assert written[0, :, 2].all() and written[2, :, 0].all()  # slot 0 at position 2, row 1 in the scratch slot
    assert written.sum() == 2 * 4 * 8 and not written[1].any()  # nothing else: slot 1 is untouched


def test_the_programs_arenas_hold_no_cache(toy_model):
    from aclpipe.decode import Decoder

    with Decoder(toy_model, max_batch=16, max_len=256) as decoder:
        plan = decoder.pipeline.plan_for(**decoder.input_shapes(16, 1, 256))
        cache_bytes = decoder.cache.nbytes
    assert all(plan.values[value].arena_offset is None for value in decoder.graph.cache_values.values())
    assert plan.arena_size < cache_bytes / 2  # one step's activations (a transposed key among them)
