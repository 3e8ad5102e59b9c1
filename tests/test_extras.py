"""A missing optional extra names itself in one line (issue 27): ``require`` and ``missing_extra``,
and the places that import an extra's package (the Gantt chart here; the ONNX importer, Ray and
the CLI in tests/cli/test_newcomer.py, in fresh interpreters)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import aclpipe
from aclpipe._extras import MissingExtraError, install_hint, is_installed, missing_extra, require


def test_require_returns_the_module_when_it_is_installed():
    assert require("json", "reading JSON") is sys.modules["json"]


@pytest.mark.parametrize(("module", "command"), [
    ("onnx", "pip install 'aclpipe[onnx]'"),
    ("matplotlib", "pip install 'aclpipe[plot]'"),
    ("matplotlib.pyplot", "pip install 'aclpipe[plot]'"),
    ("ray", "pip install 'aclpipe[ray]'"),
    ("onnxruntime", "pip install onnxruntime"),  # in no extra: installed by its own name
])
def test_a_missing_package_is_one_line_naming_what_installs_it(monkeypatch, module, command):
    for name in {module, module.split(".")[0]}:
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed
    with pytest.raises(MissingExtraError) as caught:
        require(module, "doing the thing")
    message = str(caught.value)
    assert message == f"doing the thing needs the {module.split('.')[0]} package, which is not installed: {command}"
    assert "\n" not in message
    assert isinstance(caught.value, ModuleNotFoundError)  # `except ImportError` still catches it
    assert caught.value.name == module.split(".")[0]


def test_a_broken_installation_keeps_its_own_error():
    # onnx is there but something it imports is not: installing the extra again would not help.
    inner = ModuleNotFoundError("No module named 'google.protobuf'", name="google.protobuf")
    assert missing_extra(inner, "onnx", "reading ONNX models") is inner


def test_one_install_line_for_several_packages():
    assert install_hint("ray", "onnx", "onnxruntime", "onnx") == "pip install 'aclpipe[onnx,ray]' onnxruntime"


def test_is_installed_without_importing(monkeypatch):
    assert is_installed("json") and not is_installed("aclpipe_no_such_package")
    monkeypatch.setitem(sys.modules, "json", None)
    assert not is_installed("json")


def test_a_gantt_chart_without_matplotlib_names_the_plot_extra(device, monkeypatch, tmp_path):
    with aclpipe.record_trace(device) as recording:
        device.upload(np.zeros(8, np.float32))
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(MissingExtraError, match=r"^drawing a Gantt chart needs the matplotlib package, which is "
                                                r"not installed: pip install 'aclpipe\[plot\]'$"):
        recording.trace.save_gantt(tmp_path / "gantt.png")
