"""Fuzzing graph-file loading: a typed aclpipe error or a correct graph, within the load caps.

Valid documents are drawn, then damaged (keys dropped or repeated, values swapped for odd
YAML, aliases and deep nesting spliced in) and written as YAML or JSON; raw bytes are tried
too.  Whatever the file, :func:`load_graph` must return a graph whose every reference
resolves, or raise :class:`~aclpipe.AclpipeError`, and stay within a memory budget measured
with ``tracemalloc`` (the caps are small here, so the budget is small).  Loading is linear in
the capped sizes (see ``benchmarks/bench_scaling.py``); a hang would trip pytest's timeout.
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aclpipe.errors import AclpipeError
from aclpipe.graph import Graph, LoadLimits, load_graph

LIMITS = LoadLimits(max_file_bytes=256 << 10, max_depth=32, max_alias_nodes=500, max_nodes=200,
                    max_constant_bytes=64 << 10, max_total_constant_bytes=256 << 10)
MEMORY_BUDGET = 16 << 20  # bytes traced while loading one file under LIMITS

ODD = st.one_of(
    st.none(), st.booleans(), st.integers(-(2 ** 70), 2 ** 70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.lists(st.integers(-3, 10 ** 9), max_size=4), st.dictionaries(st.text(max_size=4),
                                                                                           st.integers(), max_size=3),
)
UNARY = ("Relu", "Neg", "Abs", "Exp")
BINARY = ("Add", "Mul", "Sub", "Maximum")


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    """A valid graph document: one input, a few constants, a chain of elementwise nodes."""
    width = draw(st.integers(1, 8))
    constants = {}
    for k in range(draw(st.integers(0, 3))):
        init = draw(st.sampled_from(["zeros", "ones", "normal", "uniform"]))
        constants[f"c{k}"] = {"init": init, "shape": [width], "seed": draw(st.integers(0, 5)),
                              "scale": draw(st.floats(0, 2))}
    values = ["x", *constants]
    nodes = []
    for index in range(draw(st.integers(1, 12))):
        if draw(st.booleans()):
            op, inputs = draw(st.sampled_from(UNARY)), [draw(st.sampled_from(values))]
        else:
            op, inputs = draw(st.sampled_from(BINARY)), draw(st.lists(st.sampled_from(values), min_size=2, max_size=2))
        nodes.append({"name": f"n{index}", "op": op, "inputs": inputs})
        values.append(f"n{index}")
    if draw(st.booleans()):
        nodes.reverse()  # files may list nodes in any order
    return {"name": "fuzz", "inputs": {"x": {"shape": ["batch", width], "dtype": "float32"}},
            "constants": constants, "nodes": nodes, "outputs": {"y": values[-1]}}


def _paths(document: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    children = document.items() if isinstance(document, dict) else enumerate(document) if isinstance(document, list) \
        else ()
    for key, value in children:
        found += _paths(value, (*prefix, key))
    return found


@st.composite
def damaged(draw: st.DrawFn) -> tuple[dict[str, Any], bool]:
    document = draw(documents())
    changed = False
    for _ in range(draw(st.integers(0, 3))):
        path = draw(st.sampled_from(_paths(document)[1:]))
        parent = document
        for key in path[:-1]:
            parent = parent[key]
        if isinstance(parent, dict) and draw(st.booleans()):
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(ODD)
        changed = True
    return document, changed


def _yaml_with_tricks(document: dict[str, Any], trick: str) -> str:
    text = yaml.safe_dump(document, sort_keys=False)
    if trick == "duplicate":
        return text + "nodes: []\n"
    if trick == "bomb":
        lines = ["b0: &b0 [l, l, l, l, l, l, l, l]"]
        lines += [f"b{k}: &b{k} [{', '.join([f'*b{k - 1}'] * 8)}]" for k in range(1, 6)]
        return "\n".join(lines) + "\n" + text.replace("name: fuzz", "name: *b5")
    if trick == "deep":
        return text.replace("name: fuzz", "name: " + "[" * 40 + "]" * 40)
    if trick == "tag":
        return text.replace("name: fuzz", "name: !!python/object/apply:os.getcwd []")
    return text


def _check(path: Path, document: dict[str, Any] | None) -> None:
    tracemalloc.start()
    try:
        graph = load_graph(path, limits=LIMITS)
    except AclpipeError:
        return
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert peak <= MEMORY_BUDGET, f"loading took {peak} bytes"
    assert isinstance(graph, Graph)
    for node in graph.nodes:
        assert all(value is None or value in graph.values for value in node.inputs)
    assert all(value in graph.values for value in graph.outputs.values())
    assert sum(array.nbytes for array in graph.constants.values()) <= LIMITS.max_total_constant_bytes
    if document is not None:  # an undamaged document loads as written
        assert [n.name for n in sorted(graph.nodes, key=lambda n: int(n.name[1:]))] == \
            sorted((n["name"] for n in document["nodes"]), key=lambda name: int(name[1:]))
        assert set(graph.constants) == set(document["constants"])
        bound = graph.bind(x=(2, document["inputs"]["x"]["shape"][1]))
        assert set(bound.outputs) == {"y"}


@settings(deadline=None, max_examples=120, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damaged(), st.sampled_from(["yaml", "json"]), st.sampled_from(["", "duplicate", "bomb", "deep", "tag"]))
def test_damaged_documents_load_or_raise_typed_errors(tmp_path: Path, case: tuple[dict[str, Any], bool],
                                                      suffix: str, trick: str) -> None:
    document, changed = case
    path = tmp_path / f"graph.{suffix}"
    if suffix == "json":
        try:
            path.write_text(json.dumps(document))
        except ValueError:
            return
        trick = ""
    else:
        path.write_text(_yaml_with_tricks(document, trick))
    _check(path, None if changed or trick else document)


@settings(deadline=None, max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.binary(max_size=400), st.text(max_size=400).map(str.encode)), st.sampled_from(["yaml", "json"]))
def test_arbitrary_bytes_load_or_raise_typed_errors(tmp_path: Path, data: bytes, suffix: str) -> None:
    path = tmp_path / f"graph.{suffix}"
    path.write_bytes(data)
    _check(path, None)


@settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(["w.npy", "../w.npy", "/w.npy", "sub/w.npy", "link.npy", "x/../w.npy", "", ".",
                                 "w.npy\0"]), min_size=1, max_size=3))
def test_npy_entries_load_or_raise_typed_errors(tmp_path: Path, entries: list[str]) -> None:
    folder = tmp_path / "g"
    folder.mkdir(exist_ok=True)
    if not (folder / "w.npy").exists():
        np.save(folder / "w.npy", np.arange(4, dtype=np.float32))
        np.save(tmp_path / "w.npy", np.arange(4, dtype=np.float32))
        (folder / "link.npy").symlink_to(tmp_path / "w.npy")
    constants = {f"c{k}": {"file": entry} for k, entry in enumerate(entries)}
    path = folder / "graph.json"
    path.write_text(json.dumps({"constants": constants, "nodes": [], "outputs": {}}))
    _check(path, None)
