"""Graph files: YAML (``.yaml``/``.yml``, read with PyYAML ``safe_load``) or JSON (``.json``).

The format::

    name: mlp                                    # optional, defaults to the file's stem
    inputs:                                      # name -> shape and dtype (default float32)
      x: {shape: [batch, 784], dtype: float32}   # a dim: an int, a name, or null (fixed at bind)
    constants:                                   # optional; exactly one of init / file
      w1: {init: normal, shape: [784, 256], dtype: float32, seed: 0, scale: 0.05}
      b1: {init: zeros, shape: [256]}            # init: zeros | ones | normal | uniform
      w2: {file: w2.npy}                         # .npy relative to this file; dtype: casts
    nodes:                                       # any order: they are sorted by their inputs
      - {name: fc1, op: Matmul, inputs: [x, w1], attrs: {cubeMathType: 1}}
      - {name: act1, op: Relu, inputs: [fc1]}    # a single output is named after its node
      - {name: halves, op: Split, inputs: [act1], attrs: {splitSections: [128, 128], dim: 1},
         outputs: [left, right]}                 # several outputs: name them (null skips an
                                                 # optional one, e.g. LayerNorm's meanOutOptional)
    outputs: {y: act1}                           # output name -> value name

``normal`` draws from N(0, scale^2) and ``uniform`` from U(-scale, scale) with
``numpy.random.default_rng(seed)`` (seed 0 and scale 1.0 by default).  An input list may hold
``null`` for an optional op argument that is not given.

Every problem raises :class:`GraphError` naming the file, the node or entry, and what is wrong.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ..dtypes import DType, as_dtype
from ..errors import GraphError
from .builder import is_list_argument, resolve_op, thaw
from .graph import Graph

__all__ = ["INITS", "load_graph", "save_graph"]

INITS = ("zeros", "ones", "normal", "uniform")
_TOP_KEYS = {"name", "inputs", "constants", "nodes", "outputs"}
_INPUT_KEYS = {"shape", "dtype"}
_CONSTANT_KEYS = {"init", "shape", "dtype", "seed", "scale", "file"}
_NODE_KEYS = {"name", "op", "inputs", "outputs", "attrs"}


class _Where:
    """Builds messages that name the file and the entry being read."""

    def __init__(self, path: Path):
        self.path = path

    def error(self, where: str, problem: str) -> GraphError:
        return GraphError(f"{self.path}: {where}: {problem}" if where else f"{self.path}: {problem}")

    def mapping(self, value: Any, where: str, allowed: set[str], required: tuple[str, ...] = ()) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.error(where, f"expected a mapping, got {type(value).__name__} {value!r}")
        unknown = sorted(str(key) for key in value if key not in allowed)
        if unknown:
            raise self.error(where, f"unknown key(s) {', '.join(unknown)} (expected {', '.join(sorted(allowed))})")
        for key in required:
            if key not in value:
                raise self.error(where, f"missing key {key!r}")
        return value

    def typed(self, value: Any, types: type | tuple[type, ...], where: str, expected: str) -> Any:
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in _tuple(types)):
            raise self.error(where, f"expected {expected}, got {type(value).__name__} {value!r}")
        return value


def _tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


def _parse(path: Path, where: _Where) -> Any:
    text = path.read_text(encoding="utf-8")
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            problem = getattr(error, "problem", None) or str(error)
            raise where.error("", f"YAML syntax error{at}: {problem}") from None
    if suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            raise where.error("", f"JSON syntax error at line {error.lineno}, column {error.colno}: "
                                  f"{error.msg}") from None
    raise where.error("", f"unknown graph file type {suffix!r}: use .yaml, .yml or .json")


def load_graph(path: str | Path) -> Graph:
    """Read a graph file (format in this module's docstring) into a :class:`Graph`."""
    path = Path(path)
    where = _Where(path)
    data = where.mapping(_parse(path, where), "top level", _TOP_KEYS, ("nodes", "outputs"))
    name = where.typed(data.get("name", path.stem), str, "name", "a string")
    graph = Graph(name)
    try:
        for input_name, spec in where.typed(data.get("inputs") or {}, dict, "inputs", "a mapping").items():
            _load_input(graph, str(input_name), spec, where)
        for constant, spec in where.typed(data.get("constants") or {}, dict, "constants", "a mapping").items():
            _load_constant(graph, str(constant), spec, where)
        nodes = [_node_record(record, index, where) for index, record in
                 enumerate(where.typed(data["nodes"], list, "nodes", "a list of node mappings"))]
        for record in _sorted_nodes(nodes, set(graph.values), where):
            spec = resolve_op(record["op"], record["name"])
            inputs = [None if value is None else graph.values[value] for value in record["inputs"]]
            graph._add_node(spec, inputs, {}, record["name"], record.get("outputs"),
                            record.get("attrs") or {})
        for output, value in where.typed(data["outputs"], dict, "outputs", "a mapping").items():
            value = where.typed(value, str, f"output {output!r}", "a value name")
            if value not in graph.values:
                raise where.error(f"output {output!r}", f"value {value!r} is not defined "
                                  "(no input, constant or node output has that name)")
            graph.output(str(output), graph.values[value])
    except GraphError as error:
        if str(error).startswith(str(path)):
            raise
        raise where.error("", str(error)) from None
    return graph


def _load_input(graph: Graph, name: str, spec: Any, where: _Where) -> None:
    spec = where.mapping(spec, f"input {name!r}", _INPUT_KEYS, ("shape",))
    shape = where.typed(spec["shape"], list, f"input {name!r} shape", "a list of dims")
    graph.input(name, shape, spec.get("dtype", "float32"))


def _load_constant(graph: Graph, name: str, spec: Any, where: _Where) -> None:
    at = f"constant {name!r}"
    spec = where.mapping(spec, at, _CONSTANT_KEYS)
    if ("init" in spec) == ("file" in spec):
        raise where.error(at, "give exactly one of 'init' (zeros, ones, normal, uniform) or 'file' (a .npy)")
    dtype = _dtype(spec.get("dtype"), at, where)
    if "file" in spec:
        array = _load_npy(spec, dtype, at, where)
    else:
        array = _initialize(spec, dtype or DType.float32, at, where)
    graph._add_constant(name, array, dict(spec))


def _dtype(value: Any, at: str, where: _Where) -> DType | None:
    if value is None:
        return None
    try:
        return as_dtype(where.typed(value, str, f"{at} dtype", "a dtype name"))
    except TypeError as error:
        raise where.error(at, str(error)) from None


def _shape(spec: dict[str, Any], at: str, where: _Where) -> tuple[int, ...]:
    if "shape" not in spec:
        raise where.error(at, "missing key 'shape'")
    shape = where.typed(spec["shape"], list, f"{at} shape", "a list of ints")
    for dim in shape:
        where.typed(dim, int, f"{at} shape", "a list of ints >= 0")
        if dim < 0:
            raise where.error(f"{at} shape", f"expected a list of ints >= 0, got {shape}")
    return tuple(shape)


def _initialize(spec: dict[str, Any], dtype: DType, at: str, where: _Where) -> np.ndarray:
    init = spec["init"]
    if init not in INITS:
        raise where.error(at, f"unknown init {init!r} (expected one of {', '.join(INITS)})")
    shape = _shape(spec, at, where)
    seed = where.typed(spec.get("seed", 0), int, f"{at} seed", "an int")
    scale = float(where.typed(spec.get("scale", 1.0), (int, float), f"{at} scale", "a number"))
    rng = np.random.default_rng(seed)
    if init == "zeros":
        data = np.zeros(shape)
    elif init == "ones":
        data = np.ones(shape)
    elif init == "normal":
        data = rng.normal(0.0, scale, shape)
    else:
        data = rng.uniform(-scale, scale, shape)
    return data.astype(dtype.numpy)


def _load_npy(spec: dict[str, Any], dtype: DType | None, at: str, where: _Where) -> np.ndarray:
    relative = where.typed(spec["file"], str, f"{at} file", "a path to a .npy file")
    file = (where.path.parent / relative).resolve()
    if not file.is_file():
        raise where.error(at, f"file {relative!r} not found (looked for {file})")
    try:
        array = np.load(file, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise where.error(at, f"cannot read {relative!r} as a .npy array: {error}") from None
    if dtype == DType.bfloat16 and array.dtype.kind == "V" and array.dtype.itemsize == 2:
        array = array.view(DType.bfloat16.numpy)  # np.save stores ml_dtypes' bfloat16 as raw 2-byte records
    if "shape" in spec and tuple(array.shape) != _shape(spec, at, where):
        raise where.error(at, f"{relative!r} holds shape {list(array.shape)}, the file says {spec['shape']}")
    return np.asarray(array.astype(dtype.numpy) if dtype is not None and array.dtype != dtype.numpy else array)


def _node_record(record: Any, index: int, where: _Where) -> dict[str, Any]:
    label = f"node {record.get('name')!r}" if isinstance(record, dict) and "name" in record else f"node #{index}"
    record = where.mapping(record, label, _NODE_KEYS, ("name", "op"))
    where.typed(record["name"], str, f"{label} name", "a string")
    where.typed(record["op"], str, f"{label} op", "an op name")
    inputs = where.typed(record.get("inputs", []), list, f"{label} inputs", "a list of value names")
    for entry in inputs:
        if entry is not None:
            where.typed(entry, str, f"{label} inputs", "value names (or null)")
    if "outputs" in record:
        for entry in where.typed(record["outputs"], list, f"{label} outputs", "a list of names"):
            if entry is not None:
                where.typed(entry, str, f"{label} outputs", "value names (or null)")
    if "attrs" in record and record["attrs"] is not None:
        where.typed(record["attrs"], dict, f"{label} attrs", "a mapping")
    return {**record, "inputs": inputs}


def _sorted_nodes(nodes: list[dict[str, Any]], defined: set[str], where: _Where) -> list[dict[str, Any]]:
    """Nodes in an order where every input is written first (file order where possible)."""
    producer: dict[str, int] = {}
    for index, record in enumerate(nodes):
        for value in record.get("outputs") or [record["name"]]:
            if value is None:
                continue
            if value in producer or value in defined:
                raise where.error(f"node {record['name']!r}", f"duplicate name {value!r}")
            producer[value] = index
    preds: list[set[int]] = []
    for record in nodes:
        needs = set()
        for value in record["inputs"]:
            if value is None or value in defined:
                continue
            if value not in producer:
                raise where.error(f"node {record['name']!r}", f"dangling input {value!r}: no input, constant or "
                                  "node output has that name")
            needs.add(producer[value])
        preds.append(needs)
    return [nodes[i] for i in _stable_topological(preds, [r["name"] for r in nodes], where)]


def _stable_topological(preds: list[set[int]], names: list[str], where: _Where) -> list[int]:
    done: set[int] = set()
    order: list[int] = []
    while len(order) < len(preds):
        ready = next((i for i in range(len(preds)) if i not in done and preds[i] <= done), None)
        if ready is None:
            raise where.error("", f"the nodes form a cycle: {' -> '.join(_cycle(preds, done, names))}")
        done.add(ready)
        order.append(ready)
    return order


def _cycle(preds: list[set[int]], done: set[int], names: list[str]) -> list[str]:
    """Follow unfinished predecessors from an unfinished node until one repeats."""
    node = next(i for i in range(len(preds)) if i not in done)
    path: list[int] = []
    while node not in path:
        path.append(node)
        node = min(p for p in preds[node] if p not in done)
    cycle = path[path.index(node):] + [node]
    return [names[i] for i in reversed(cycle)]


# -- saving ---------------------------------------------------------------------------------
def save_graph(graph: Graph, path: str | Path) -> None:
    """Write ``graph`` to ``path`` (YAML or JSON by extension); array constants go to .npy
    files beside it (``<stem>.<constant>.npy``)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".yaml", ".yml", ".json"):
        raise GraphError(f"{path}: unknown graph file type {suffix!r}: use .yaml, .yml or .json")
    data = {
        "name": graph.name,
        "inputs": {name: {"shape": list(spec.shape), "dtype": spec.dtype.name} for name, spec in graph.inputs.items()},
        "constants": {name: _constant_entry(graph, name, path) for name in graph.constants},
        "nodes": [_node_entry(node) for node in graph.nodes],
        "outputs": dict(graph.outputs),
    }
    if suffix == ".json":
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    else:
        path.write_text(yaml.safe_dump(data, sort_keys=False, default_flow_style=None), encoding="utf-8")


def _constant_entry(graph: Graph, name: str, path: Path) -> dict[str, Any]:
    source = graph._constant_sources.get(name)
    if source is not None and "init" in source:
        return dict(source)
    # Arrays, and constants read from .npy files elsewhere, are written beside the new file so
    # that the saved graph does not depend on where the original came from.
    array = graph.constants[name]
    file_name = f"{path.stem}.{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.npy"
    np.save(path.parent / file_name, array, allow_pickle=False)
    return {"file": file_name, "dtype": as_dtype(array.dtype).name}


def _node_entry(node: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": node.name, "op": node.op, "inputs": list(node.inputs)}
    produced = [name for name in node.outputs if name is not None]
    spec = resolve_op(node.op, node.name)
    listed = bool(spec.outputs) and is_list_argument(spec.outputs[0])
    if listed or produced != [node.name] or node.outputs[0] != node.name:
        entry["outputs"] = list(node.outputs)
    if node.attrs:
        entry["attrs"] = {key: thaw(value) for key, value in node.attrs.items()}
    return entry
