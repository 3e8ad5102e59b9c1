"""YAML graph files from elsewhere: aliases, duplicate keys, tags and nesting are refused early."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from aclpipe.errors import GraphError
from aclpipe.graph import LoadLimits, load_graph
from aclpipe.graph.yaml_reader import read_yaml


def write(tmp_path: Path, text: str, name: str = "graph.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _laughs(levels: int = 9) -> str:
    """A "billion laughs" document: each anchor repeats the previous one nine times."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * 9)}]" for k in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("where", ["name: *a8", "outputs: {y: *a8}",
                                   "attrs: {dims: *a8}"])
def test_an_alias_bomb_is_refused_before_it_is_expanded(tmp_path: Path, where: str) -> None:
    # Before: aliases became shared objects that an error message's repr or attribute freezing
    # expanded to 9**9 strings (30 s and 3 GB).
    body = _laughs()
    if where.startswith("attrs"):
        body += (f"inputs: {{x: {{shape: [2]}}}}\nnodes: [{{name: p, op: Permute, inputs: [x], {where}}}]\n"
                 "outputs: {y: p}\n")
    else:
        body += f"nodes: []\n{where}\n" + ("" if where.startswith("outputs") else "outputs: {}\n")
    with pytest.raises(GraphError, match=r"YAML aliases expand to more than 10000 nodes by alias \*a\d+ at line \d+"):
        load_graph(write(tmp_path, body))


def test_small_aliases_are_fine_and_copied(tmp_path: Path) -> None:
    text = textwrap.dedent("""\
        inputs: {x: {shape: &shape [2, 4]}, z: {shape: *shape}}
        nodes:
          - {name: a, op: Add, inputs: [x, z], attrs: &common {alpha: 1}}
          - {name: b, op: Add, inputs: [a, z], attrs: *common}
        outputs: {y: b}
        """)
    g = load_graph(write(tmp_path, text))
    assert g.inputs["z"].shape == (2, 4) and g.nodes[1].attrs == {"alpha": 1}


def test_the_alias_budget_is_a_limit(tmp_path: Path) -> None:
    text = "inputs: {x: {shape: &s [2, 4]}, z: {shape: *s}}\nnodes: []\noutputs: {}\n"
    load_graph(write(tmp_path, text), limits=LoadLimits(max_alias_nodes=3))
    with pytest.raises(GraphError, match=r"more than 2 nodes.*LoadLimits.max_alias_nodes"):
        load_graph(write(tmp_path, text), limits=LoadLimits(max_alias_nodes=2))


def test_a_recursive_alias_is_refused(tmp_path: Path) -> None:
    with pytest.raises(GraphError, match=r"alias \*a at line 1, column \d+ refers to no complete anchor"):
        load_graph(write(tmp_path, "name: &a [*a]\nnodes: []\noutputs: {}\n"))
    with pytest.raises(GraphError, match=r"alias \*nothing at line 1"):
        load_graph(write(tmp_path, "name: *nothing\nnodes: []\noutputs: {}\n"))


@pytest.mark.parametrize(("text", "key"), [
    ("nodes: []\noutputs: {}\nnodes: []\n", "'nodes'"),
    ("inputs: {x: {shape: [2]}, x: {shape: [3]}}\nnodes: []\noutputs: {}\n", "'x'"),
    ("inputs: {x: {shape: [2], shape: [3]}}\nnodes: []\noutputs: {}\n", "'shape'"),
    ("inputs: {x: {shape: [2]}}\nnodes: [{name: a, op: Relu, inputs: [x], name: b}]\noutputs: {}\n", "'name'"),
])
def test_duplicate_keys_are_refused(tmp_path: Path, text: str, key: str) -> None:
    # Before: the last one won silently.
    with pytest.raises(GraphError, match=rf"duplicate key {key} at line \d+, column \d+ \(first at line \d+"):
        load_graph(write(tmp_path, text))


def test_merge_keys_may_be_overridden(tmp_path: Path) -> None:
    # A merge is how YAML shares most of a mapping; an explicit key overrides a merged one.
    text = ("inputs:\n  x: {<<: {shape: [2, 4], dtype: float16}, dtype: float32}\n"
            "  z: {<<: [{shape: [3]}, {shape: [5], dtype: int32}]}\nnodes: []\noutputs: {}\n")
    g = load_graph(write(tmp_path, text))
    assert g.inputs["x"].shape == (2, 4) and g.inputs["x"].dtype.name == "float32"
    assert g.inputs["z"].shape == (3,) and g.inputs["z"].dtype.name == "int32"
    with pytest.raises(GraphError, match=r"merge key '<<' at line \d+.* needs a mapping"):
        load_graph(write(tmp_path, "inputs: {x: {<<: [1, 2]}}\nnodes: []\noutputs: {}\n"))


@pytest.mark.parametrize("tag", ["!!python/object/apply:os.system ['true']", "!!binary aGVsbG8=", "!custom 3",
                                 "!!set {a, b}", "!!timestamp 2001-12-14"])
def test_tags_beyond_plain_data_are_refused(tmp_path: Path, tag: str) -> None:
    with pytest.raises(GraphError, match=r"YAML tag '.*' at line 1, column \d+ is not allowed in graph files"):
        load_graph(write(tmp_path, f"name: {tag}\nnodes: []\noutputs: {{}}\n"))


def test_plain_scalars_keep_yaml_types_and_timestamps_stay_text(tmp_path: Path) -> None:
    text = ("name: 2024-01-02\ninputs: {x: {shape: [0x10, 1_000]}}\n"
            "nodes: [{name: a, op: Muls, inputs: [x], attrs: {other: .inf}}]\noutputs: {y: a}\n")
    g = load_graph(write(tmp_path, text))
    assert g.name == "2024-01-02" and g.inputs["x"].shape == (16, 1000)
    assert g.nodes[0].attrs["other"] == float("inf")


@pytest.mark.parametrize("depth", [70, 100_000])
def test_deep_nesting_is_a_graph_error_not_a_crash(tmp_path: Path, depth: int) -> None:
    # Before: RecursionError, or a segmentation fault in libyaml's composer at 100,000 levels.
    text = "name: " + "[" * depth + "]" * depth + "\nnodes: []\noutputs: {}\n"
    with pytest.raises(GraphError, match=r"(nesting deeper than 64 levels at line 1|brackets nest \d+ deep)"):
        load_graph(write(tmp_path, text))
    block = "".join(f"{'  ' * level}k{level}:\n" for level in range(70)) + "  " * 70 + "leaf: 1\n"
    with pytest.raises(GraphError, match=r"nesting deeper than 64 levels"):
        load_graph(write(tmp_path, block))


def test_one_document_only_and_syntax_errors(tmp_path: Path) -> None:
    with pytest.raises(GraphError, match=r"a second document starts at line 3"):
        load_graph(write(tmp_path, "nodes: []\noutputs: {}\n---\nnodes: []\n"))
    with pytest.raises(GraphError, match=r"YAML syntax error at line \d+, column \d+"):
        load_graph(write(tmp_path, "nodes: [\n"))
    with pytest.raises(GraphError, match=r"top level: expected a mapping, got NoneType"):
        load_graph(write(tmp_path, ""))


def test_an_integer_too_long_to_read_is_a_graph_error(tmp_path: Path) -> None:
    with pytest.raises(GraphError, match=r"cannot read '1111.*' at line 1, column \d+ as int"):
        load_graph(write(tmp_path, f"name: {'1' * 5000}\nnodes: []\noutputs: {{}}\n"))


def test_the_same_text_reads_by_how_it_is_written_each_time() -> None:
    # Plain scalars are resolved once per text: a quoted copy of the same text stays a string,
    # and repeated numbers, booleans and nulls keep their types wherever they appear.
    text = "a: [8, '8', 8, true, 'true', true, ~, null, '~', 1.5, 1.5]\nb: {8: x, '8': y, true: z}\n"
    data = read_yaml(text, GraphError, LoadLimits())
    assert data["a"] == [8, "8", 8, True, "true", True, None, None, "~", 1.5, 1.5]
    assert [type(v) for v in data["a"][:3]] == [int, str, int]
    assert data["b"] == {8: "x", "8": "y", True: "z"}


def test_a_repeated_key_that_is_not_text_is_refused_too(tmp_path: Path) -> None:
    with pytest.raises(GraphError, match=r"duplicate key 8 at line 4, column 17 \(first at line 4, column 11\)"):
        load_graph(write(tmp_path, "constants: {}\ninputs: {x: {shape: [2]}}\nnodes: []\noutputs: {8: x, 8: x}\n"))
