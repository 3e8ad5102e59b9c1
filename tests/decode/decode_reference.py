"""Greedy decoding with onnxruntime: the reference every decoder test checks against."""

from __future__ import annotations

import numpy as np
import onnx


def reference_greedy(model: onnx.ModelProto, prompt: list[int], max_new_tokens: int, eos_id: int | None = None,
                     ) -> list[int]:
    """Greedy decoding with onnxruntime, one sequence, the cache handed back each step."""
    session = reference_session(model)
    config = {i.name: i for i in model.graph.input}
    heads, head_dim = (config["past_key_values.0.key"].type.tensor_type.shape.dim[d].dim_value for d in (1, 3))
    layers = sum(1 for name in config if name.startswith("past_key_values.")) // 2
    past = {f"past_key_values.{layer}.{kind}": np.zeros((1, heads, 0, head_dim), np.float32)
            for layer in range(layers) for kind in ("key", "value")}
    ids = list(prompt)
    tokens: list[int] = []
    step = np.array([ids], np.int64)
    start = 0
    while len(tokens) < max_new_tokens:
        total = start + step.shape[1]
        feeds = {"input_ids": step, "attention_mask": np.ones((1, total), np.int64),
                 "position_ids": np.arange(start, total, dtype=np.int64)[None], **past}
        outputs = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
        token = int(np.argmax(outputs["logits"][0, -1]))
        tokens.append(token)
        if token == eos_id:
            break
        past = {name: outputs[name.replace("past_key_values", "present")] for name in past}
        start, step = total, np.array([[token]], np.int64)
    return tokens


_SESSIONS: dict[int, object] = {}


def reference_session(model: onnx.ModelProto):
    import onnxruntime

    key = id(model)
    if key not in _SESSIONS:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        _SESSIONS[key] = onnxruntime.InferenceSession(model.SerializeToString(), options,
                                                      providers=["CPUExecutionProvider"])
    return _SESSIONS[key]
