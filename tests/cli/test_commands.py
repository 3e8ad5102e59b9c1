"""The graph commands of the ``aclpipe`` CLI: run, plan, check, bench (through ``cli.main``)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import aclpipe
from aclpipe import cli
from aclpipe.cli import bench, check, common

GRAPHS = Path(__file__).resolve().parents[2] / "graphs"


def run_main(capsys, *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def assert_one_error_line(err: str, message: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("aclpipe: error: ") and message in lines[0], lines[0]
    assert "Traceback" not in err


# -- run -------------------------------------------------------------------------------------------------
def test_run_reports_and_writes_a_trace_and_a_gantt_chart(capsys, tmp_path):
    trace_path, gantt_path = tmp_path / "mlp.json", tmp_path / "mlp.png"
    argv = ["run", str(GRAPHS / "mlp.yaml"), "--batch", "4", "--runs", "3", "--trace", str(trace_path)]
    has_matplotlib = _has_matplotlib()
    if has_matplotlib:
        argv += ["--gantt", str(gantt_path)]
    status, out, err = run_main(capsys, *argv)
    assert status == 0, err
    for measure in ("latency p50 / p99", "throughput", "engine busy", "overlap", "events per run", "memory",
                    "device peak", "executors", "prepare cache", "workspace"):
        assert measure in out
    assert "inputs x[4, 784] (seeded random); 3 runs" in out and "host, batch taken to result" in out
    events = json.loads(trace_path.read_text())["traceEvents"]
    kernels = [e for e in events if e["pid"] == 1 and e.get("cat") == "kernel"]
    assert len(kernels) == 3 * 9 and {e["args"]["run"] for e in kernels} == {1, 2, 3}
    assert {e["args"]["name"] for e in events if e["name"] == "thread_name"} >= {"engine h2d", "engine d2h"}
    if has_matplotlib:
        from matplotlib import image

        assert image.imread(gantt_path).shape[1] == 1200


def test_run_with_the_timing_model_reports_modelled_device_time(capsys):
    status, out, err = run_main(capsys, "run", str(GRAPHS / "branchy.yaml"), "--batch", "4", "--runs", "4",
                                "--timing", "--time-scale", "100", "--streams", "4", "--depth", "3",
                                "--workspace", "static")
    assert status == 0, err
    assert "modelled device time" in out and "time scale x100" in out
    assert "4 compute (of 4 allowed)" in out and "strategy=static" in out


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("case, message", [
    ("missing", "not found"),
    ("suffix", "unknown graph file type '.txt'"),
    ("yaml", "YAML syntax error"),
    ("op", "unknown op 'Frobnicate'"),
    ("dim", "--dim seq: graph 'mlp' has no dim of that name"),
    ("device", "no backend named 'nosuch'"),
    ("device_index", "--device sim:99: ACL_ERROR_RT_INVALID_DEVICEID"),
    ("scale", "--time-scale: expected a finite positive number, got '0'"),
    ("scale_inf", "--time-scale: expected a finite positive number, got 'inf'"),
    ("scale_nan", "--time-scale: expected a finite positive number, got 'nan'"),
    ("batch", "more than sim:0's 64.0 GiB; use a smaller --batch"),
    ("dim_huge", "use a smaller --batch"),
    ("trace", "--trace"),
    ("gantt", "--gantt"),
    ("output", "--output"),
    ("output_folder", "is a folder"),
    ("input_missing", "no such file"),
    ("input_name", "graph 'mlp' has no input 'q'"),
    ("input_form", "expected NAME=FILE.npy or FILE.npz"),
    ("input_dtype", "input 'x': expected numbers (float32), got complex64 (complex numbers)"),
    ("input_pickle", "holds Python objects (pickled data), which is never loaded"),
    ("input_rank", "x"),
    ("input_twice", "given twice"),
    ("bench_scale", "--time-scale: expected a finite positive number"),
    ("plan_dot", "--dot"),
    ("depth", "--depth: expected at most 64, got 100000"),
    ("streams", "--streams: expected at most 62, got 100000"),
    ("check_streams", "expected values from 1 to 62"),
])
def test_run_errors_are_one_line_with_exit_2(capsys, tmp_path, case, message):
    mlp = str(GRAPHS / "mlp.yaml")
    np.save(tmp_path / "complex.npy", np.ones((2, 784), np.complex64))
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    np.save(tmp_path / "flat.npy", np.ones(784, np.float32))
    np.save(tmp_path / "x.npy", np.ones((2, 784), np.float32))
    np.savez(tmp_path / "x.npz", x=np.ones((2, 784), np.float32))
    argv = {
        "missing": ["run", str(tmp_path / "nope.yaml")],
        "suffix": ["run", _write(tmp_path / "graph.txt", "nodes: []")],
        "yaml": ["run", _write(tmp_path / "bad.yaml", "nodes: [\n")],
        "op": ["run", _write(tmp_path / "op.yaml", "inputs: {x: {shape: [2]}}\nnodes: [{name: n, op: Frobnicate, "
                                                  "inputs: [x]}]\noutputs: {y: n}\n")],
        "dim": ["run", mlp, "--dim", "seq=4"],
        "device": ["run", mlp, "--device", "nosuch"],
        "device_index": ["run", mlp, "--device", "sim:99"],
        "scale": ["run", mlp, "--timing", "--time-scale", "0"],
        "scale_inf": ["run", mlp, "--time-scale", "inf"],
        "scale_nan": ["run", mlp, "--time-scale", "nan"],
        "batch": ["run", mlp, "--batch", "100000000000"],
        "dim_huge": ["run", str(GRAPHS / "transformer.yaml"), "--dim", "batch=100000000"],
        "trace": ["run", mlp, "--trace", str(tmp_path / "no" / "t.json")],
        "gantt": ["run", mlp, "--gantt", str(tmp_path / "no" / "g.png")],
        "output": ["run", mlp, "--output", str(tmp_path / "no" / "o.npz")],
        "output_folder": ["run", mlp, "--output", str(tmp_path)],
        "input_missing": ["run", mlp, "--input", f"x={tmp_path / 'nope.npy'}"],
        "input_name": ["run", mlp, "--input", f"q={tmp_path / 'x.npy'}"],
        "input_form": ["run", mlp, "--input", str(tmp_path / "x.npy")],
        "input_dtype": ["run", mlp, "--input", f"x={tmp_path / 'complex.npy'}"],
        "input_pickle": ["run", mlp, "--input", f"x={tmp_path / 'objects.npy'}"],
        "input_rank": ["run", mlp, "--input", f"x={tmp_path / 'flat.npy'}"],
        "input_twice": ["run", mlp, "--input", f"x={tmp_path / 'x.npy'}", "--input", str(tmp_path / "x.npz")],
        "bench_scale": ["bench", "--time-scale", "inf"],
        "plan_dot": ["plan", mlp, "--dot", str(tmp_path / "no" / "p.dot")],
        "depth": ["run", mlp, "--depth", "100000"],
        "streams": ["run", mlp, "--streams", "100000"],
        "check_streams": ["check", mlp, "--streams", "1,1000"],
    }[case]
    status, out, err = run_main(capsys, *argv)
    assert status == 2 and out == ""  # nothing ran, nothing printed but the error
    assert_one_error_line(err, message)


def test_onnx_without_an_importer_is_a_clear_error(capsys, monkeypatch):
    monkeypatch.setattr(common, "find_load_onnx", lambda: None)
    status, _, err = run_main(capsys, "plan", str(GRAPHS / "mlp.onnx"))
    assert status == 2
    assert_one_error_line(err, "reading ONNX models needs aclpipe.load_onnx")


def test_onnx_models_run_when_the_importer_is_there(capsys):
    if common.find_load_onnx() is None:
        pytest.skip("aclpipe.load_onnx is not available in this version")
    status, out, err = run_main(capsys, "run", str(GRAPHS / "cnn.onnx"), "--batch", "2", "--runs", "2")
    assert status == 0, err
    assert "latency p50 / p99" in out


def test_the_console_script_entry_point_runs_and_fails_cleanly(tmp_path):
    done = subprocess.run([sys.executable, "-m", "aclpipe.cli", "run", str(GRAPHS / "cnn.yaml"), "--batch", "2",
                           "--runs", "2"], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "aclpipe run: cnn" in done.stdout and "Traceback" not in done.stderr
    bad = subprocess.run([sys.executable, "-m", "aclpipe.cli", "plan", str(tmp_path / "missing.json")],
                         capture_output=True, text=True, timeout=120, check=False)
    assert bad.returncode == 2 and bad.stdout == ""
    assert_one_error_line(bad.stderr, "not found")


# -- plan ------------------------------------------------------------------------------------------------
def test_plan_prints_streams_memory_and_workspaces_and_writes_dot(capsys, tmp_path):
    dot_path = tmp_path / "transformer.dot"
    status, out, err = run_main(capsys, "plan", str(GRAPHS / "transformer.yaml"), "--batch", "2", "--streams", "4",
                                "--dot", str(dot_path))
    assert status == 0, err
    plan = aclpipe.make_plan(aclpipe.load_graph(GRAPHS / "transformer.yaml").bind(x=(2, 16, 64)), streams=4)
    assert plan.summary() in out
    assert "workspaces (phase one)" in out and "scores (8.0 KiB)" in out and "attention (1.0 KiB)" in out
    assert "'static' would hold" in out
    dot = dot_path.read_text()
    assert dot.count("subgraph cluster_") == plan.stream_count and dot.count("style=dashed") == plan.num_waits
    assert f"{plan.stream_count} stream clusters, {plan.num_waits} event edges" in out


# -- check -----------------------------------------------------------------------------------------------
def test_check_finds_no_hazards_in_the_ready_graphs(capsys):
    status, out, err = run_main(capsys, "check", str(GRAPHS / "branchy.yaml"), "--runs", "2")
    assert status == 0, err
    # 3 stream counts x 3 depths x 5 workspace strategies (pool, static, cached, per-call, stream-ordered)
    assert "45 configurations" in out and "no hazards" in out
    assert out.count(" ok ") == 45


def test_check_reports_a_hazard_when_the_plan_drops_its_waits(capsys, monkeypatch):
    import aclpipe.pipeline.prepare

    make_plan = aclpipe.pipeline.prepare.make_plan

    def without_waits(*args, **kwargs):
        plan = make_plan(*args, **kwargs)
        return dataclasses.replace(plan, nodes=tuple(dataclasses.replace(n, waits=()) for n in plan.nodes))

    monkeypatch.setattr(aclpipe.pipeline.prepare, "make_plan", without_waits)
    status, out, err = run_main(capsys, "check", str(GRAPHS / "branchy.yaml"), "--streams", "2", "--depths", "1",
                                "--workspace", "pool", "--runs", "1")
    assert status == 1, err
    assert "hazard" in out and "failed (hazard)" in out and "no hazards" not in out


def test_check_marks_outputs_that_differ_from_the_first_configuration():
    reference = check.Outcome(1, 1, "pool", outputs=[{"y": np.zeros(3, np.float32)}])
    same = check.Outcome(2, 1, "pool", outputs=[{"y": np.zeros(3, np.float32)}])
    other = check.Outcome(4, 1, "pool", outputs=[{"y": np.array([0, 0.5, 0], np.float32)}])
    check.compare(reference, same)
    check.compare(reference, other)
    assert (same.status, same.max_difference) == ("ok", 0.0)
    assert other.status == "mismatch" and other.max_difference == 0.5 and "batch 0 output 'y'" in other.detail


def test_check_argument_errors(capsys):
    status, _, err = run_main(capsys, "check", str(GRAPHS / "mlp.yaml"), "--streams", "1,zero")
    assert status == 2
    assert_one_error_line(err, "expected comma-separated positive integers")


# -- bench -----------------------------------------------------------------------------------------------
def test_bench_compares_configurations_and_tabulates_scripts(capsys, tmp_path, monkeypatch):
    scripts = tmp_path / "benchmarks"
    scripts.mkdir()
    _write(scripts / "bench_ok.py", 'import sys\nQUICK_ARGS = ["--n", "1"]\nprint("args", sys.argv[1:])\n')
    _write(scripts / "bench_broken.py", 'import sys\nprint("boom")\nsys.exit(3)\n')
    monkeypatch.chdir(tmp_path)  # benchmarks/ from here; graphs/ from the source checkout
    status, out, err = run_main(capsys, "bench", "--quick", "--graphs", "mlp", "--runs", "2", "--time-scale", "100")
    assert status == 1, err  # a script failed
    rows = [line for line in out.splitlines() if line.strip().startswith("mlp ")]
    assert [row.split()[1:4] for row in rows] == [["1", "x", "1"], ["4", "x", "1"], ["4", "x", "3"], ["4", "x", "3"]]
    assert rows[0].split()[-1] == "1.00x"
    assert "args ['--n', '1']" in out and "exit 3" in out and "boom" in out


def test_quick_args_come_from_the_script_or_the_known_table(tmp_path):
    own = Path(_write(tmp_path / "bench_own.py", "QUICK_ARGS = ['--size', 2]\n"))
    flag = Path(_write(tmp_path / "bench_flag.py", "parser.add_argument('--quick')\n"))
    plain = Path(_write(tmp_path / "bench_plain.py", "print(1)\n"))
    known = Path(_write(tmp_path / "bench_workspace.py", "print(1)\n"))
    assert bench.quick_args(own) == ["--size", "2"]
    assert bench.quick_args(flag) == ["--quick"]
    assert bench.quick_args(plain) == []
    assert bench.quick_args(known) == ["--ops", "200", "--repeats", "1"]
