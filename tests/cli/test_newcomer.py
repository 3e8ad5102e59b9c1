"""What a newcomer met in the first hour with the CLI (issue 27): a model with a host-value input
run and planned from files, ``--sanitizer/--no-sanitizer`` on every command that opens a device,
``bench`` naming the packages its scripts need, and a missing extra named in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from aclpipe import cli

GRAPHS = Path(__file__).resolve().parents[2] / "graphs"


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def assert_one_error_line(err: str, message: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("aclpipe: error: ") and message in lines[0], lines[0]


# -- host values from files --------------------------------------------------------------------------
@pytest.fixture
def reshape_model(tmp_path: Path) -> Path:
    """An ONNX model y = Reshape(x[n], shape[2]): ``shape`` is a host value (its contents decide
    the graph)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"], name="r")], "reshape",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"]),
                               helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "reshape.onnx"
    onnx.save(model, str(path))
    return path


def test_run_passes_a_host_value_from_a_npz_as_its_contents(capsys, tmp_path, reshape_model):
    inputs, outputs = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(inputs, x=np.arange(6, dtype=np.float32), shape=np.array([3, 2]))
    status, _, err = run_main(capsys, "run", str(reshape_model), "--input", str(inputs), "--runs", "2",
                                "--output", str(outputs))
    assert status == 0, err
    np.testing.assert_array_equal(np.load(outputs)["y"], np.arange(6, dtype=np.float32).reshape(3, 2))


def test_run_takes_a_host_value_from_a_npy_and_the_rest_random(capsys, tmp_path, reshape_model):
    np.save(tmp_path / "shape.npy", np.array([2, -1]))
    status, _, err = run_main(capsys, "run", str(reshape_model), "--input", f"shape={tmp_path / 'shape.npy'}",
                                "--random", "--batch", "4", "--runs", "1", "--output", str(tmp_path / "out.npz"))
    assert status == 0, err
    assert np.load(tmp_path / "out.npz")["y"].shape == (2, 2)


def test_plan_takes_input_files_and_plans_for_the_host_values_given(capsys, tmp_path, reshape_model):
    np.savez(tmp_path / "in.npz", x=np.zeros(6, np.float32), shape=np.array([3, 2]))
    status, out, err = run_main(capsys, "plan", str(reshape_model), "--input", str(tmp_path / "in.npz"))
    assert status == 0, err
    assert "host values (specialized for these contents; not copied to the device): shape=[3, 2]" in out
    assert "x[6], shape[2]" in out


def test_plan_input_files_fix_the_shapes_of_an_ordinary_graph(capsys, tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((3, 784), np.float32))
    status, out, err = run_main(capsys, "plan", str(GRAPHS / "mlp.yaml"), "--input", f"x={tmp_path / 'x.npy'}")
    assert status == 0, err
    assert "inputs x[3, 784]" in out


@pytest.mark.parametrize("command", ["run", "plan"])
def test_a_host_value_not_given_is_one_line_naming_input(capsys, reshape_model, command):
    status, _, err = run_main(capsys, command, str(reshape_model), "--batch", "6")
    assert status == 2
    assert_one_error_line(err, "input 'shape' is a host value")
    assert "Reshape's shape" in err and "--input shape=FILE.npy" in err


# -- --sanitizer/--no-sanitizer ------------------------------------------------------------------------
def _options(command: str) -> set[str]:
    parser = cli.build_parser()
    subparsers = next(action for action in parser._actions if action.dest == "command")
    return {option for action in subparsers.choices[command]._actions for option in action.option_strings}


@pytest.mark.parametrize("command", ["run", "selftest", "bench"])
def test_every_command_that_opens_a_simulated_device_takes_both_sanitizer_flags(command):
    assert {"--sanitizer", "--no-sanitizer"} <= _options(command)


@pytest.mark.parametrize(("flag", "environment", "expected"), [
    ("--no-sanitizer", "1", "sanitizer off"),
    ("--sanitizer", "0", "sanitizer on"),
    (None, "1", "sanitizer on"),
    (None, "0", "sanitizer off"),
])
def test_run_sanitizer_flags_decide_over_the_environment(capsys, monkeypatch, flag, environment, expected):
    monkeypatch.setenv("ACLPIPE_SANITIZER", environment)
    argv = ["run", str(GRAPHS / "mlp.yaml"), "--batch", "2", "--runs", "1", *([flag] if flag else [])]
    status, out, err = run_main(capsys, *argv)
    assert status == 0, err
    assert expected in out.splitlines()[0]


def test_bench_compares_without_the_sanitizer_unless_asked():
    parser = cli.build_parser()
    assert parser.parse_args(["bench"]).sanitizer is False
    assert parser.parse_args(["bench", "--sanitizer"]).sanitizer is True


def test_sanitizer_flags_on_hardware_are_a_usage_error(capsys):
    status, _, err = run_main(capsys, "run", str(GRAPHS / "mlp.yaml"), "--device", "ascend:0", "--no-sanitizer")
    assert status == 2
    assert_one_error_line(err, "--sanitizer/--no-sanitizer apply to the sim backend only")


# -- bench names what its scripts need ---------------------------------------------------------------
def test_bench_skips_a_script_whose_packages_are_missing_and_names_the_extra(capsys, monkeypatch, tmp_path):
    scripts = tmp_path / "benchmarks"
    scripts.mkdir()
    (scripts / "bench_onnx.py").write_text("raise SystemExit(3)  # would fail if it ran\n")
    (scripts / "bench_own.py").write_text("NEEDS = ['ray']\nraise SystemExit(3)\n")
    (scripts / "bench_plain.py").write_text("print('plain ran')\n")
    monkeypatch.chdir(tmp_path)
    for module in ("onnx", "onnxruntime", "ray"):
        monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    status, out, err = run_main(capsys, "bench", "--no-graphs")
    assert status == 0, err
    assert "plain ran" in out
    assert "pip install 'aclpipe[onnx]' onnxruntime" in out and "pip install 'aclpipe[ray]'" in out
    assert "pip install 'aclpipe[onnx,ray]' onnxruntime runs them too" in out
    assert "exit 3" not in out


# -- a missing extra names itself --------------------------------------------------------------------
def _blocked(module: str, code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter in which ``module`` cannot be imported."""
    return subprocess.run([sys.executable, "-c", f"import sys\nsys.modules[{module!r}] = None\n{code}"],
                          capture_output=True, text=True, timeout=120, check=False)


def test_load_onnx_without_onnx_names_the_extra():
    done = _blocked("onnx", "import aclpipe\naclpipe.load_onnx")
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("aclpipe._extras.MissingExtraError: reading ONNX models"), done.stderr
    assert "pip install 'aclpipe[onnx]'" in last


def test_aclpipe_ray_without_ray_names_the_extra():
    done = _blocked("ray", "import aclpipe.ray")
    assert "pip install 'aclpipe[ray]'" in done.stderr.strip().splitlines()[-1], done.stderr


def test_the_cli_reading_an_onnx_model_without_onnx_is_one_line_naming_the_extra():
    done = _blocked("onnx", f"from aclpipe.cli import main\nsys.exit(main(['plan', {str(GRAPHS / 'mlp.onnx')!r}]))")
    assert done.returncode == 2
    assert_one_error_line(done.stderr, "pip install 'aclpipe[onnx]'")
