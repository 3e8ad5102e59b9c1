"""``aclpipe run`` with real inputs (--input .npy/.npz), shown and saved outputs (--output)."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

import aclpipe
from aclpipe import cli
from aclpipe.cli.arrays import input_assignment, outputs_table

GRAPHS = Path(__file__).resolve().parents[2] / "graphs"


def run_main(capsys, *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def expected(x: np.ndarray) -> dict[str, np.ndarray]:
    return aclpipe.run(GRAPHS / "mlp.yaml", x=x)


def test_run_feeds_a_npy_input_prints_the_outputs_and_saves_them(capsys, tmp_path):
    x = np.random.default_rng(0).standard_normal((3, 784)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    saved = tmp_path / "out.npz"
    status, out, err = run_main(capsys, "run", str(GRAPHS / "mlp.yaml"), "--input", f"x={tmp_path / 'x.npy'}",
                                "--runs", "3", "--output", str(saved))
    assert status == 0, err
    text = " ".join(out.split())
    assert "inputs x[3, 784] (x from --input); 3 runs" in text
    assert "latency p50 / p99" in out and "outputs of run 3" in out  # the timing table stays
    for name in ("logits", "probs"):
        assert name in out
    assert "(3, 10)" in out and "float32" in out
    with np.load(saved) as outputs:
        want = expected(x)
        assert sorted(outputs.files) == sorted(want)
        for name, value in want.items():
            np.testing.assert_allclose(outputs[name], value, rtol=1e-5)
    first_probs = np.array2string(want["probs"].reshape(-1)[:3], precision=4, separator=", ")[1:-1]
    assert first_probs.split(",")[0] in out  # the printed values are the run's


def test_a_npz_feeds_every_input_it_holds_and_float64_is_converted(capsys, tmp_path):
    x = np.random.default_rng(1).standard_normal((5, 784))  # float64, as numpy makes it by default
    np.savez(tmp_path / "batch.npz", x=x)
    saved = tmp_path / "out.npz"
    status, _, err = run_main(capsys, "run", str(GRAPHS / "mlp.yaml"), "--input", str(tmp_path / "batch.npz"),
                                "--runs", "2", "--output", str(saved))
    assert status == 0, err
    assert "converted float64 to float32" in err
    with np.load(saved) as outputs:
        np.testing.assert_allclose(outputs["probs"], expected(x.astype(np.float32))["probs"], rtol=1e-5)


def test_given_inputs_fix_the_named_dims_of_the_others(capsys, tmp_path):
    np.save(tmp_path / "x.npy", np.ones((2, 16, 64), np.float32))
    status, out, err = run_main(capsys, "run", str(GRAPHS / "transformer.yaml"), "--input",
                                f"x={tmp_path / 'x.npy'}", "--runs", "1")
    assert status == 0, err
    assert "x[2, 16, 64]" in out


def test_a_device_fault_while_running_is_exit_1(capsys, monkeypatch):
    from aclpipe.cli import run as run_command

    real = run_command.open_device_for

    def faulty(spec, **options):
        device = real(spec, **options)
        device.inject_fault("kernel", match="fc2")
        return device

    monkeypatch.setattr(run_command, "open_device_for", faulty)
    status, _, err = run_main(capsys, "run", str(GRAPHS / "mlp.yaml"), "--runs", "2")
    assert status == 1
    assert err.startswith("aclpipe: error: ") and "fc2" in err and "Traceback" not in err


@pytest.mark.parametrize("text, parsed", [("x=a.npy", ("x", "a.npy")), ("b.npz", (None, "b.npz")),
                                          ("in.put=dir/a=b.npy", ("in.put", "dir/a=b.npy"))])
def test_input_assignments(text, parsed):
    assert input_assignment(text) == parsed


@pytest.mark.parametrize("text", ["x=", "=a.npy", "a.npy", "plain"])
def test_bad_input_assignments(text):
    with pytest.raises(argparse.ArgumentTypeError):
        input_assignment(text)


def test_the_outputs_table_shows_a_few_values():
    table = outputs_table({"y": np.arange(10, dtype=np.float32), "empty": np.zeros((0, 3), np.int32)}, "t")
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(table)
    text = console.export_text()
    assert "(10,)" in text and "0., 1., 2., 3., 4., 5., ...]" in text and "(0, 3)" in text and "int32" in text
