"""The model table: every zoo model with the inputs it is run on.

Each :class:`ZooModel` makes its ``onnx.ModelProto`` and, for a seed, a list of feeds (input
name -> array), one per input signature it is checked with (several batch sizes or sequence
lengths for models with dynamic dims).  Tests, ``examples/onnx_compare.py`` and
``benchmarks/bench_onnx.py`` all read this table.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx

from .cnn import make_mobile, make_ocr
from .light import LIGHT_MODELS, light_model
from .transformer import make_bert

__all__ = ["MODELS", "Feeds", "ZooModel", "torch_available"]

Feeds = dict[str, np.ndarray]


@dataclass(frozen=True)
class ZooModel:
    """A model and the input signatures it is checked with.

    ``shapes`` lists, per signature, each input's shape; ``make_feeds`` draws arrays for them.
    ``group`` is ``"zoo"`` (written with onnx.helper), ``"torch"`` (exported from PyTorch,
    needs torch) or ``"light"`` (onnx's shipped topologies with random weights).
    """

    name: str
    make: Callable[[], onnx.ModelProto]
    shapes: tuple[dict[str, tuple[int, ...]], ...]
    group: str = "zoo"
    note: str = ""

    def feeds(self, seed: int = 0) -> list[Feeds]:
        rng = np.random.default_rng(seed)
        return [{name: _draw(rng, name, shape) for name, shape in signature.items()} for signature in self.shapes]

    @functools.cached_property
    def model(self) -> onnx.ModelProto:
        return self.make()


def _draw(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> np.ndarray:
    if name == "input_ids":
        return rng.integers(0, 100, shape).astype(np.int64)
    if name == "attention_mask":
        mask = np.ones(shape, np.int64)
        mask[0, shape[1] // 2:] = 0  # padding in the first sequence
        return mask
    return rng.standard_normal(shape).astype(np.float32)


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def _bert_shapes(*pairs: tuple[int, int]) -> tuple[dict[str, tuple[int, ...]], ...]:
    return tuple({"input_ids": pair, "attention_mask": pair} for pair in pairs)


def _x(*shapes: tuple[int, ...]) -> tuple[dict[str, tuple[int, ...]], ...]:
    return tuple({"x": shape} for shape in shapes)


def _torch(name: str) -> Callable[[], onnx.ModelProto]:
    def make() -> onnx.ModelProto:
        from .torch_models import torch_model

        return torch_model(name)
    return make


def _light_input(name: str) -> str:
    return "gpu_0/data_0" if name in ("resnet50", "shufflenet", "zfnet512") else "data_0"


_TABLE = [
    *(ZooModel(f"bert_opset{opset}", functools.partial(make_bert, opset), _bert_shapes((2, 12), (1, 7), (3, 5)))
      for opset in (11, 14, 17, 21)),
    *(ZooModel(f"mobile_opset{opset}", functools.partial(make_mobile, opset), _x((2, 3, 32, 32), (1, 3, 24, 40)))
      for opset in (11, 13, 18)),
    *(ZooModel(f"ocr_opset{opset}", functools.partial(make_ocr, opset), _x((2, 1, 32, 48), (1, 1, 32, 32)))
      for opset in (11, 13, 19)),
    ZooModel("torch_encoder", _torch("encoder"), _x((3, 10, 32), (1, 10, 32)), "torch"),
    ZooModel("torch_mobile", _torch("mobile"), _x((2, 3, 32, 32), (1, 3, 24, 40)), "torch"),
    ZooModel("torch_unet", _torch("unet"), _x((2, 3, 16, 24), (1, 3, 32, 16)), "torch"),
    *(ZooModel(f"light_{name}", functools.partial(light_model, name, opset=13),
               ({_light_input(name): (1, 3, 224, 224)},), "light",
               "full 224x224: fixed-size pooling/Reshape make smaller inputs invalid")
      for name in LIGHT_MODELS),
]

#: Every zoo model by name.
MODELS: dict[str, ZooModel] = {model.name: model for model in _TABLE}
