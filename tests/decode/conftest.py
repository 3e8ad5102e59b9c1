"""The toy decoder every decoder test uses (built once: it is deterministic)."""

from __future__ import annotations

import onnx
import pytest

from aclpipe.decode.toy_model import ToyConfig, toy_decoder

_MODEL = toy_decoder(ToyConfig())


@pytest.fixture
def toy_model() -> onnx.ModelProto:
    return _MODEL
