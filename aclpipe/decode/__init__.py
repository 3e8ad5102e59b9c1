"""Autoregressive decoding: :class:`Decoder` generates tokens from an ONNX decoder in the
optimum / onnxruntime-genai export convention, many requests at once (continuous batching)."""

from __future__ import annotations

from .decoder import Decoder
from .errors import PromptTooLongError
from .kv_pattern import KVLayout, read_kv_layout
from .request import Generation
from .sampling import Sampler

__all__ = ["Decoder", "Generation", "KVLayout", "PromptTooLongError", "Sampler", "read_kv_layout"]
