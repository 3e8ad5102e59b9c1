"""``benchmarks/bench_onnx.py`` runs end to end on one small model and prints every table it
promises (figures themselves are never asserted: the machine is shared)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")

_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_onnx.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_onnx_under_test", _SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(spec.name, None)
    return module


def _cells(out: str, model: str, header: str) -> dict[str, str]:
    """The row of ``model`` in the table whose header contains ``header``, by column name."""
    lines = out.splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("|") and header in line)
    names = [cell.strip() for cell in lines[start].strip("|").split("|")]
    row = next(line for line in lines[start + 2:] if line.startswith(f"| {model} "))
    return dict(zip(names, (cell.strip() for cell in row.strip("|").split("|")), strict=True))


def test_the_bench_prints_cpu_time_the_machinery_and_the_floor_per_launch(capsys):
    _bench().main(["--models", "mobile_opset11", "--repeats", "2", "--streams", "1", "--machinery", "--floor"])
    out = capsys.readouterr().out
    main = _cells(out, "mobile_opset11", "cpu us")
    # its six BatchNormalizations are folded into the Convs before them at import
    assert int(main["launches"]) == 23 and float(main["cpu us"]) > 0 and float(main["us/launch"]) > 0
    assert 0 < float(main["kernel min"]) <= float(main["kernel us"]) * 1.0001 + 0.05  # one stream: matched launches
    floor = _cells(out, "mobile_opset11", "floor us")
    numpy_us, machinery_us, floor_us = (float(floor[key]) for key in ("numpy us", "machinery us", "floor us"))
    assert numpy_us > 0 and machinery_us > 0
    assert floor_us == pytest.approx(numpy_us + machinery_us, abs=0.11)  # each cell rounded to 0.1


def test_no_fuse_runs_every_node_as_written(capsys):
    _bench().main(["--models", "mobile_opset11", "--repeats", "1", "--streams", "1", "--no-fuse"])
    out = capsys.readouterr().out
    assert "every node as written" in out and int(_cells(out, "mobile_opset11", "cpu us")["launches"]) == 29


def test_kernel_min_sums_each_launchs_smallest_time_and_needs_one_order():
    bench = _bench()
    assert bench.kernel_minimum([[1.0, 5.0, 2.0], [3.0, 2.0, 2.5]]) == pytest.approx(1.0 + 2.0 + 2.0)
    assert bench.kernel_minimum([[1.0, 5.0], [3.0]]) != bench.kernel_minimum([[1.0, 5.0], [3.0]])  # nan
    assert bench.kernel_minimum([]) != bench.kernel_minimum([])
