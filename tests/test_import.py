"""``import aclpipe`` stays light: heavy optional parts load only when used (issue 27 asks for
``import aclpipe`` within 3x ``import numpy``; benchmarks/bench_import.py times it).

Timing is noisy, so these tests check what it depends on instead: which modules a fresh
interpreter holds after the import.  Each check runs in a subprocess, because this test process
has long since imported everything.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Costly modules that ``import aclpipe`` must not pull in: ml_dtypes alone was 2.5 s of 3 s.
HEAVY = ("ml_dtypes", "onnx", "onnxruntime", "matplotlib", "ray", "rich")


def _loaded_after(code: str) -> set[str]:
    """The top-level package names a fresh interpreter holds after running ``code``."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_import_aclpipe_loads_no_heavy_optional_module() -> None:
    loaded = _loaded_after("import aclpipe")
    assert not loaded & set(HEAVY), f"import aclpipe loaded {sorted(loaded & set(HEAVY))}"


def test_the_command_line_loads_no_optional_extra() -> None:
    # `aclpipe --help` and friends import every subcommand module; none may need an extra to load.
    loaded = _loaded_after("import aclpipe.cli")
    assert not loaded & {"ml_dtypes", "onnx", "onnxruntime", "matplotlib", "ray"}


@pytest.mark.parametrize("use", [
    "assert aclpipe.DType.bfloat16.numpy.name == 'bfloat16'",
    "assert aclpipe.dtypes.as_dtype('bf16').numpy.itemsize == 2",
    "import ml_dtypes, numpy\n"
    "assert aclpipe.dtypes.as_dtype(numpy.zeros(1, ml_dtypes.bfloat16).dtype).name == 'bfloat16'",
])
def test_bfloat16_still_works_when_first_asked_for(use: str) -> None:
    # ml_dtypes loads on demand, including when a bfloat16 array arrives before aclpipe asked for the type.
    assert "ml_dtypes" in _loaded_after(f"import aclpipe, aclpipe.dtypes\n{use}")


def test_bfloat16_itemsize_needs_no_ml_dtypes() -> None:
    # Planning sizes (TensorDesc.extent_bytes) of a bfloat16 graph must not pay for ml_dtypes.
    assert "ml_dtypes" not in _loaded_after("import aclpipe\nassert aclpipe.DType.bfloat16.itemsize == 2")
