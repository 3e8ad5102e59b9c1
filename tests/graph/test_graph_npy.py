""".npy initialisers: confined to the graph's folder, plain arrays only, sizes checked first."""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest

from aclpipe.errors import GraphError
from aclpipe.graph import LoadLimits, load_graph


def graph_file(folder: Path, entry: str, name: str = "graph.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"constants: {{w: {{file: {entry!r}}}}}\nnodes: []\noutputs: {{}}\n")
    return path


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """A graph folder with one good weight file, and a secret file outside it."""
    inside = tmp_path / "models"
    inside.mkdir()
    np.save(inside / "w.npy", np.arange(6, dtype=np.float32))
    secret = tmp_path / "secret.npy"
    np.save(secret, np.ones(3, np.float32))
    return inside, secret


def _outside_message(error: pytest.ExceptionInfo[GraphError], secret: Path) -> str:
    text = str(error.value)
    assert "its file lies outside" in text and "base_dir" in text
    assert "secret" not in text and str(secret.parent) + os.sep not in text.replace(str(secret.parent / "models"), "")
    return text.split(": constant 'w': ", 1)[1]


@pytest.mark.parametrize("entry", ["../secret.npy", "../missing.npy", "sub/../../secret.npy",
                                   "nosuchdir/../../secret.npy"])
def test_relative_escapes_are_refused_alike(layout: tuple[Path, Path], entry: str) -> None:
    # Before: '../' loaded silently, and "not found (looked for /abs/path)" told whether a file existed.
    inside, secret = layout
    with pytest.raises(GraphError) as caught:
        load_graph(graph_file(inside, entry))
    assert _outside_message(caught, secret) == _outside_message(caught, secret)  # one message, no path of its own
    messages = set()
    for other in ("../secret.npy", "../missing.npy"):
        with pytest.raises(GraphError) as again:
            load_graph(graph_file(inside, other))
        messages.add(_outside_message(again, secret))
    assert len(messages) == 1  # an existing and a missing file outside look the same


def test_absolute_paths_outside_are_refused(layout: tuple[Path, Path]) -> None:
    inside, secret = layout
    for entry in (str(secret), "/etc/passwd", "/dev/zero", str(tmp := secret.parent / "nothing.npy")):
        with pytest.raises(GraphError) as caught:
            load_graph(graph_file(inside, entry))
        assert _outside_message(caught, secret)
        assert entry not in str(caught.value) and str(tmp) not in str(caught.value)


def test_an_absolute_path_inside_the_folder_is_fine(layout: tuple[Path, Path]) -> None:
    inside, _ = layout
    g = load_graph(graph_file(inside, str(inside / "w.npy")))
    np.testing.assert_array_equal(g.constants["w"], np.arange(6))


def test_symlinks_out_of_the_folder_are_refused(layout: tuple[Path, Path]) -> None:
    inside, secret = layout
    (inside / "link.npy").symlink_to(secret)
    (inside / "dangling.npy").symlink_to(secret.parent / "gone.npy")
    (inside / "linked_dir").symlink_to(secret.parent)
    messages = set()
    for entry in ("link.npy", "dangling.npy", "linked_dir/secret.npy"):
        with pytest.raises(GraphError) as caught:
            load_graph(graph_file(inside, entry))
        messages.add(_outside_message(caught, secret))
    assert len(messages) == 1
    # A symlink that stays inside is followed.
    (inside / "alias.npy").symlink_to(inside / "w.npy")
    assert load_graph(graph_file(inside, "alias.npy")).constants["w"].shape == (6,)


def test_a_symlinked_graph_folder_is_resolved_too(tmp_path: Path, layout: tuple[Path, Path]) -> None:
    inside, _ = layout
    view = tmp_path / "view"
    view.symlink_to(inside)
    assert load_graph(graph_file(view, "w.npy", "other.yaml")).constants["w"].shape == (6,)


def test_base_dir_allows_another_folder(layout: tuple[Path, Path], tmp_path: Path) -> None:
    inside, _ = layout
    path = graph_file(inside, "../secret.npy")
    g = load_graph(path, base_dir=tmp_path)
    np.testing.assert_array_equal(g.constants["w"], np.ones(3))
    with pytest.raises(GraphError, match=r"lies outside .*models"):
        load_graph(graph_file(tmp_path / "elsewhere", "../models/w.npy"), base_dir=inside / "sub")


def test_missing_files_inside_the_folder_are_named(layout: tuple[Path, Path]) -> None:
    inside, _ = layout
    with pytest.raises(GraphError, match=r"constant 'w': file 'absent.npy' not found in .*models"):
        load_graph(graph_file(inside, "absent.npy"))


def test_an_npz_renamed_npy_is_refused(layout: tuple[Path, Path]) -> None:
    # Before: AttributeError (np.load returned an NpzFile).
    inside, _ = layout
    np.savez(inside / "pair.npz", a=np.zeros(2), b=np.ones(2))
    os.rename(inside / "pair.npz", inside / "pair.npy")
    with pytest.raises(GraphError, match=r"file 'pair.npy' is not a .npy array: it is a zip archive"):
        load_graph(graph_file(inside, "pair.npy"))
    with zipfile.ZipFile(inside / "plain.npy", "w") as archive:
        archive.writestr("x", "data")
    with pytest.raises(GraphError, match=r"it is a zip archive"):
        load_graph(graph_file(inside, "plain.npy"))


def test_pickles_are_refused(layout: tuple[Path, Path]) -> None:
    inside, _ = layout
    (inside / "pickled.npy").write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(GraphError, match=r"it holds pickled Python data, which aclpipe never loads"):
        load_graph(graph_file(inside, "pickled.npy"))
    np.save(inside / "objects.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    with pytest.raises(GraphError, match=r"file 'objects.npy' holds Python objects \(pickled data\)"):
        load_graph(graph_file(inside, "objects.npy"))


def test_the_header_size_is_checked_before_the_data_is_read(layout: tuple[Path, Path]) -> None:
    inside, _ = layout
    np.save(inside / "big.npy", np.zeros((64, 64), np.float32))  # 16 KiB
    path = graph_file(inside, "big.npy")
    assert load_graph(path, limits=LoadLimits(max_constant_bytes=16384)).constants["w"].shape == (64, 64)
    with pytest.raises(GraphError, match=r"file 'big.npy' holds \[64, 64\] float32 = 16384 bytes, over the limit of "
                                         r"16383 bytes per constant \(LoadLimits.max_constant_bytes\)"):
        load_graph(path, limits=LoadLimits(max_constant_bytes=16383))
    # A header that claims far more than the file holds is caught before any allocation.
    header = (inside / "big.npy").read_bytes()[:128].replace(b"(64, 64)", b"(64, 65)")
    (inside / "lying.npy").write_bytes(header + b"\0" * 100)
    with pytest.raises(GraphError, match=r"file 'lying.npy' is truncated: its header declares 16640 bytes"):
        load_graph(graph_file(inside, "lying.npy"))


def test_the_total_of_constants_is_capped(layout: tuple[Path, Path]) -> None:
    inside, _ = layout
    path = inside / "two.yaml"
    path.write_text("constants: {a: {file: w.npy}, b: {init: zeros, shape: [6]}}\nnodes: []\noutputs: {}\n")
    assert set(load_graph(path, limits=LoadLimits(max_total_constant_bytes=48)).constants) == {"a", "b"}
    with pytest.raises(GraphError, match=r"constant 'b': init zeros of shape \[6\] float32 = 24 bytes would bring the "
                                         r"constants to 48 bytes, over the limit of 47"):
        load_graph(path, limits=LoadLimits(max_total_constant_bytes=47))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_fifo_named_npy_does_not_hang(layout: tuple[Path, Path]) -> None:
    inside, _ = layout
    os.mkfifo(inside / "pipe.npy")
    with pytest.raises(GraphError, match=r"file 'pipe.npy' is not a regular file"):
        load_graph(graph_file(inside, "pipe.npy"))


def test_the_shared_reader_reads_what_numpy_writes_and_refuses_odd_headers() -> None:
    """read_array serves graph constants and every input file or request body alike."""
    import io

    from aclpipe.graph.npy import read_array

    def roundtrip(array: np.ndarray, version: tuple[int, int] | None = None) -> np.ndarray:
        buffer = io.BytesIO()
        np.lib.format.write_array(buffer, array, version=version)
        data = buffer.getvalue()
        return read_array(io.BytesIO(data), len(data), "t", 1 << 20, GraphError)

    arrays = [np.asfortranarray(np.arange(6, dtype=np.int16).reshape(2, 3)), np.arange(4, dtype=">f8"),
              np.array(2.5), np.zeros((0, 3), np.float32), np.array([True, False])]
    for array in arrays:
        for version in (None, (2, 0), (3, 0)):
            got = roundtrip(array, version)
            assert got.dtype == array.dtype and got.shape == array.shape and np.array_equal(got, array)
            assert got.flags.writeable
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": "|V0", "fortran_order": False, "shape": (1 << 60,)})
    with pytest.raises(GraphError, match="elements of zero bytes"):
        read_array(io.BytesIO(buffer.getvalue()), len(buffer.getvalue()), "t", 1 << 20, GraphError)
    wrong = b"\x93NUMPY\x09\x00" + buffer.getvalue()[8:]
    with pytest.raises(GraphError, match="unknown .npy format version 9.0"):
        read_array(io.BytesIO(wrong), len(wrong), "t", 1 << 20, GraphError)
