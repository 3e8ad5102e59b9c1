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


# -- inputs are never changed silently (issue 23, section 3) ---------------------------------------------------
def _graph(tmp_path: Path, dtype: str) -> str:
    """A graph of one ``dtype`` input x[batch, 4] and one output y = x + x."""
    path = tmp_path / f"g_{dtype}.yaml"
    path.write_text(f"name: g_{dtype}\ninputs:\n  x: {{shape: [batch, 4], dtype: {dtype}}}\nnodes:\n"
                    "  - {name: y, op: Add, inputs: [x, x]}\noutputs: {y: y}\n")
    return str(path)


def assert_refused(status: int, out: str, err: str, message: str) -> None:
    """Exit 2 before anything ran, with one error line holding ``message``."""
    lines = err.strip().splitlines()
    assert status == 2 and out == "" and len(lines) == 1, err
    assert lines[0].startswith("aclpipe: error: ") and message in lines[0], lines[0]


@pytest.mark.parametrize(("array", "dtype", "message"), [
    (np.full((1, 4), 2**33 + 5, np.int64), "int32", "values from 8589934597 to 8589934597 do not fit int32"),
    (np.full((1, 4), 200, np.uint8), "int8", "values from 200 to 200 do not fit int8"),
    (np.full((1, 4), 1e300), "float32", "value 1e+300 overflows float32 to infinity"),
    (np.array([[1.9, -2.7, 0.5, 3.0]]), "int32", "float64 values cannot become int32 without changing them"),
    (np.ones((1, 4), np.int64), "bool", "int64 values cannot become bool"),
])
def test_an_input_that_would_change_is_refused_not_converted(capsys, tmp_path, array, dtype, message):
    np.save(tmp_path / "x.npy", array)
    status, out, err = run_main(capsys, "run", _graph(tmp_path, dtype), "--input", f"x={tmp_path / 'x.npy'}",
                                "--runs", "1")
    assert_refused(status, out, err, message)
    assert "input 'x'" in err


def test_a_conversion_that_keeps_every_value_runs_with_a_note(capsys, tmp_path):
    np.save(tmp_path / "x.npy", np.array([[-128, 0, 5, 127]], np.int64))
    saved = tmp_path / "out.npy"
    status, _, err = run_main(capsys, "run", _graph(tmp_path, "int32"), "--input", f"x={tmp_path / 'x.npy'}",
                              "--runs", "1", "--output", str(saved))
    assert status == 0, err
    assert "converted int64 to int32" in err
    np.testing.assert_array_equal(np.load(saved), np.array([[-256, 0, 10, 254]], np.int32))


# -- untrusted arrays are bounded before they are read (section 4) ---------------------------------------------
def _npy_claiming(shape: tuple[int, ...], data: bytes = b"") -> bytes:
    """A .npy header declaring ``shape`` float32, followed by ``data`` only."""
    import io

    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": "<f4", "fortran_order": False, "shape": shape})
    return buffer.getvalue() + data


def _zip(path: Path, members: list[tuple[str, bytes]]) -> None:
    import warnings
    import zipfile

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about a repeated name, which is the point
        with zipfile.ZipFile(path, "w") as archive:
            for name, data in members:
                archive.writestr(name, data)


def _npy(array: np.ndarray) -> bytes:
    import io

    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


X = np.ones((2, 784), np.float32)


@pytest.mark.parametrize(("case", "message"), [
    ("huge_header", "holds [35184372088832] float32 = 140737488355328 bytes, over the limit of 1073741824 bytes"),
    ("truncated_npy", "is truncated: its header declares 4000000 bytes of data, the file has 8"),
    ("unused_bomb", "graph 'mlp' has no input 'junk'"),
    ("duplicate", "holds two members named 'x'"),
    ("raw_bytes", "member 'x' is not a .npy array"),
    ("truncated_npz", "is not a readable .npz archive"),
    ("not_zip", "is not a readable .npz archive"),
    ("empty_npz", "the .npz holds no arrays; give the inputs it should hold, or pass --random"),
    ("missing_input", "--input gives no value for input(s) mask"),
])
def test_bad_input_files_are_one_error_line_and_exit_2(capsys, tmp_path, case, message):
    mlp = str(GRAPHS / "mlp.yaml")
    given = tmp_path / "in.npz"
    if case == "huge_header":
        given = tmp_path / "x.npy"
        given.write_bytes(_npy_claiming((1 << 45,)))  # 128 TiB claimed by a 128-byte file
    elif case == "truncated_npy":
        given = tmp_path / "x.npy"
        given.write_bytes(_npy_claiming((1_000_000,), b"12345678"))
    elif case == "unused_bomb":  # a member that would allocate 1 TiB if it were read
        _zip(given, [("x.npy", _npy(X)), ("junk.npy", _npy_claiming((1 << 38,)))])
    elif case == "duplicate":
        _zip(given, [("x.npy", _npy(X)), ("x.npy", _npy(X + 1))])
    elif case == "raw_bytes":
        _zip(given, [("x", b"not an array")])
    elif case == "truncated_npz":
        np.savez(given, x=X)
        given.write_bytes(given.read_bytes()[:300])
    elif case == "not_zip":
        given.write_bytes(b"PK but not a zip file at all")
    elif case == "empty_npz":
        np.savez(given)
    else:
        mlp = _write_two_inputs(tmp_path)
        np.savez(given, x=X)
    argv = ["run", mlp, "--input", f"x={given}" if given.suffix == ".npy" else str(given), "--runs", "1"]
    assert_refused(*run_main(capsys, *argv), message)


def _write_two_inputs(tmp_path: Path) -> str:
    path = tmp_path / "two.yaml"
    path.write_text("name: two\ninputs:\n  x: {shape: [batch, 784], dtype: float32}\n"
                    "  mask: {shape: [batch, 784], dtype: float32}\nnodes:\n"
                    "  - {name: y, op: Mul, inputs: [x, mask]}\noutputs: {y: y}\n")
    return str(path)


def test_random_fills_what_input_leaves_out(capsys, tmp_path):
    np.savez(tmp_path / "empty.npz")
    status, out, err = run_main(capsys, "run", str(GRAPHS / "mlp.yaml"), "--input", str(tmp_path / "empty.npz"),
                                "--random", "--runs", "1")
    assert status == 0, err
    np.savez(tmp_path / "x.npz", x=X)
    status, out, err = run_main(capsys, "run", _write_two_inputs(tmp_path), "--input", str(tmp_path / "x.npz"),
                                "--random", "--runs", "1")
    assert status == 0, err
    assert "x from --input, the rest seeded random" in " ".join(out.split())


def test_input_limits_are_the_graph_loaders(tmp_path):
    """One set of limits: LoadLimits bounds each input array and an archive's arrays together."""
    from aclpipe.cli.arrays import load_inputs
    from aclpipe.errors import InputFormatError
    from aclpipe.graph.limits import LoadLimits

    graph = aclpipe.load_graph(_write_two_inputs(tmp_path))
    np.savez(tmp_path / "both.npz", x=X, mask=X)
    one = X.nbytes
    assert set(load_inputs(graph, [(None, str(tmp_path / "both.npz"))],
                           limits=LoadLimits(max_constant_bytes=one, max_total_constant_bytes=2 * one))[0]) == {
        "x", "mask"}
    with pytest.raises(InputFormatError, match="over the limit of 6271 bytes per array"):
        load_inputs(graph, [(None, str(tmp_path / "both.npz"))], limits=LoadLimits(max_constant_bytes=one - 1))
    with pytest.raises(InputFormatError, match="LoadLimits.max_total_constant_bytes"):
        load_inputs(graph, [(None, str(tmp_path / "both.npz"))],
                    limits=LoadLimits(max_constant_bytes=one, max_total_constant_bytes=2 * one - 1))


# -- outputs are checked before running (section 5) ------------------------------------------------------------
@pytest.mark.parametrize(("case", "message"), [
    ("fifo", "is not a regular file (a FIFO, socket or device)"),
    ("dangling", "the folder"),
    ("npy_for_two_outputs", "a .npy file holds one array, the graph has 2 outputs (logits, probs); give OUT.npz"),
    ("suffix", "unknown suffix '.txt'"),
])
def test_output_paths_are_checked_before_running(capsys, tmp_path, case, message):
    import os

    target = tmp_path / "out.npz"
    reader = None
    if case == "fifo":
        os.mkfifo(target)
        reader = os.open(target, os.O_RDONLY | os.O_NONBLOCK)  # so that an unchecked write would not block
    elif case == "dangling":
        target.symlink_to(tmp_path / "missing" / "out.npz")
    elif case == "npy_for_two_outputs":
        target = tmp_path / "out.npy"
    else:
        target = tmp_path / "out.txt"
    try:
        status, out, err = run_main(capsys, "run", str(GRAPHS / "mlp.yaml"), "--runs", "1", "--output", str(target))
    finally:
        if reader is not None:
            os.close(reader)
    assert_refused(status, out, err, message)
    assert "missing" not in os.listdir(tmp_path)
