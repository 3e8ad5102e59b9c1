"""Converters for ONNX ``LSTM``, ``GRU`` and ``RNN`` (catalog :mod:`aclpipe.ops.recurrent`).

The catalog ops take ONNX's inputs in ONNX's order and its attributes under camelCase names,
so the conversion is one node; outputs nobody asked for are still computed (they cost one
store each).  Opset 14 added ``layout``; earlier versions read it as 0.
"""

from __future__ import annotations

from typing import Any

from .context import BuildContext, OnnxNode
from .mapping import converts

__all__: list[str] = []

_OUTPUTS = {"LSTM": 3, "GRU": 2, "RNN": 2}


def _recurrent(op: str) -> Any:
    def convert(ctx: BuildContext, node: OnnxNode, inputs: list[Any]) -> list[Any]:
        attrs: dict[str, Any] = {
            "hiddenSize": node.attr("hidden_size"),
            "direction": node.attr("direction", "forward") or "forward",
            "activations": node.attr("activations"),
            "activationAlpha": node.attr("activation_alpha"),
            "activationBeta": node.attr("activation_beta"),
            "clip": None if node.attr("clip") is None else float(node.attr("clip")),
            "layout": int(node.attr("layout", 0)),
        }
        if op == "LSTM":
            attrs["inputForget"] = int(node.attr("input_forget", 0))
        if op == "GRU":
            attrs["linearBeforeReset"] = int(node.attr("linear_before_reset", 0))
        if attrs["hiddenSize"] is None:
            weight = ctx.shape(inputs[2])  # R is [D, G*H, H]
            attrs["hiddenSize"] = weight[-1]
        results = ctx.op(op, *inputs, outputs=_OUTPUTS[op], **attrs)
        return list(results)
    return convert


for _op in _OUTPUTS:
    converts(_op, 7, 14, 22)(_recurrent(_op))
