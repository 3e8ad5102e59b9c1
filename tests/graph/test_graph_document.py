"""Reading a graph file's text: size, encoding, nesting and duplicate keys, as GraphErrors naming the file."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from aclpipe.errors import GraphError
from aclpipe.graph import LoadLimits, load_graph

SMALL = "nodes: []\noutputs: {}\n"


def write(tmp_path: Path, text: str | bytes, name: str = "graph.yaml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def test_the_file_size_is_capped_before_reading(tmp_path: Path) -> None:
    path = write(tmp_path, SMALL + "# " + "x" * 1000 + "\n")
    load_graph(path, limits=LoadLimits(max_file_bytes=2000))
    with pytest.raises(GraphError, match=rf"^{path}: the file is 1025 bytes, over the limit of 1000 bytes "
                                         r"\(LoadLimits.max_file_bytes\)"):
        load_graph(path, limits=LoadLimits(max_file_bytes=1000))


@pytest.mark.parametrize("name", ["graph.yaml", "graph.json"])
def test_a_binary_file_is_a_graph_error(tmp_path: Path, name: str) -> None:
    # Before: UnicodeDecodeError.
    path = write(tmp_path, b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe binary", name)
    with pytest.raises(GraphError, match=rf"^{path}: is not UTF-8 text \(byte 0x89 at offset 0\)"):
        load_graph(path)


def test_a_utf8_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    assert load_graph(write(tmp_path, "\ufeff" + SMALL)).nodes == ()


@pytest.mark.parametrize("depth", [100, 5_000, 200_000])
def test_deep_json_is_a_graph_error(tmp_path: Path, depth: int) -> None:
    # Before: RecursionError from json (or from code walking what it returned).
    text = '{"nodes": [], "outputs": {}, "name": ' + "[" * depth + "]" * depth + "}"
    with pytest.raises(GraphError, match=r"(nesting deeper than 64 levels|brackets nest \d+ deep)"):
        load_graph(write(tmp_path, text, "deep.json"))


def test_json_refuses_duplicate_keys(tmp_path: Path) -> None:
    with pytest.raises(GraphError, match=r"JSON: duplicate key 'outputs' in one object"):
        load_graph(write(tmp_path, '{"nodes": [], "outputs": {}, "outputs": {}}', "dup.json"))


def test_json_numbers_too_long_to_read(tmp_path: Path) -> None:
    with pytest.raises(GraphError, match=r"JSON: .*(digits|limit)"):
        load_graph(write(tmp_path, '{"nodes": [], "outputs": {}, "name": ' + "1" * 5000 + "}", "long.json"))


def test_a_missing_or_odd_graph_file(tmp_path: Path) -> None:
    with pytest.raises(GraphError, match=r"cannot open the graph file: No such file"):
        load_graph(tmp_path / "absent.yaml")
    (tmp_path / "folder.yaml").mkdir()
    with pytest.raises(GraphError, match=r"(is not a regular file|cannot open the graph file)"):
        load_graph(tmp_path / "folder.yaml")


@pytest.mark.skipif(not hasattr(os, "mkfifo") or sys.platform == "win32", reason="needs named pipes")
def test_a_fifo_does_not_hang_the_loader(tmp_path: Path) -> None:
    pipe = tmp_path / "pipe.yaml"
    os.mkfifo(pipe)
    with pytest.raises(GraphError, match=r"is not a regular file"):
        load_graph(pipe)


def test_the_node_count_is_capped(tmp_path: Path) -> None:
    text = "inputs: {x: {shape: [2]}}\nnodes:\n" + "".join(
        f"  - {{name: n{i}, op: Relu, inputs: [{'x' if i == 0 else f'n{i - 1}'}]}}\n" for i in range(5)
    ) + "outputs: {y: n4}\n"
    path = write(tmp_path, text)
    assert len(load_graph(path, limits=LoadLimits(max_nodes=5)).nodes) == 5
    with pytest.raises(GraphError, match=r"nodes: 5 nodes, over the limit of 4 \(LoadLimits.max_nodes\)"):
        load_graph(path, limits=LoadLimits(max_nodes=4))


def test_limits_refuse_bad_values() -> None:
    with pytest.raises(ValueError, match=r"LoadLimits.max_depth must be an int >= 0"):
        LoadLimits(max_depth=-1)
    with pytest.raises(ValueError, match=r"LoadLimits.max_file_bytes must be an int >= 0"):
        LoadLimits(max_file_bytes=1.5)  # type: ignore[arg-type]


def test_a_long_sorted_file_loads_in_file_order_where_it_can(tmp_path: Path) -> None:
    # Nodes listed backwards: the loader sorts them (a heap now; before, a quadratic scan).
    count = 300
    lines = [f"  - {{name: n{i}, op: Neg, inputs: [{'x' if i == 0 else f'n{i - 1}'}]}}\n" for i in range(count)]
    text = "inputs: {x: {shape: [2]}}\nnodes:\n" + "".join(reversed(lines)) + f"outputs: {{y: n{count - 1}}}\n"
    g = load_graph(write(tmp_path, text))
    assert [node.name for node in g.nodes] == [f"n{i}" for i in range(count)]
