"""Small ONNX models for aclpipe's importer: tests, ``examples/onnx_compare.py`` and
``benchmarks/bench_onnx.py`` use them.

- :mod:`.transformer`: BERT-style encoders as exporters write them (opsets 11 to 21);
- :mod:`.cnn`: a MobileNetV3-style classifier and an OCR-style segmenter;
- :mod:`.torch_models`: small PyTorch modules exported with ``torch.onnx.export`` (needs torch);
- :mod:`.light`: the onnx package's ``light`` topologies (ResNet-50, DenseNet-121, ...) with
  seeded random weights;
- :mod:`.models`: the table of all of them with the input shapes they are checked at.

Write them as files with ``python -m onnx_zoo --out DIR [names...]`` (run from ``graphs/``).
Weights come from seeded generators, so the same call writes the same models.
"""

from __future__ import annotations

from .models import MODELS, ZooModel, torch_available

__all__ = ["MODELS", "ZooModel", "torch_available"]
