"""The toy decoder every decoder test uses (built once: it is deterministic)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest

import aclpipe
from aclpipe.decode.toy_model import ToyConfig, toy_decoder
from aclpipe.runtime import Device

_MODEL = toy_decoder(ToyConfig())


@pytest.fixture
def toy_model() -> onnx.ModelProto:
    return _MODEL


@pytest.fixture(scope="session")
def fake_cann_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake CANN (tests/fake_cann) built once, for the decoder on the ascend binding."""
    script = Path(__file__).resolve().parents[1] / "fake_cann" / "build.py"
    spec = importlib.util.spec_from_file_location("fake_cann_build_decode", script)
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    if build.find_compiler() is None:
        pytest.skip("no C compiler to build the fake CANN (set CC or install gcc)")
    return Path(build.build_fake_cann(tmp_path_factory.mktemp("fake_cann_decode")))


@pytest.fixture
def ascend_device(fake_cann_lib: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Device]:
    monkeypatch.setenv("ACLPIPE_ASCEND_LIB", str(fake_cann_lib))
    monkeypatch.delenv("ACLPIPE_ASCEND_HOST_FUNC", raising=False)
    device = aclpipe.open_device("ascend:0")
    yield device
    device.close()
