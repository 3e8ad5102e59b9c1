"""Graph files: YAML (``.yaml``/``.yml``) or JSON (``.json``).

The format::

    name: mlp                                    # optional, defaults to the file's stem
    inputs:                                      # name -> shape and dtype (default float32)
      x: {shape: [batch, 784], dtype: float32}   # a dim: an int, a name, or null (fixed at bind)
    constants:                                   # optional; exactly one of init / file
      w1: {init: normal, shape: [784, 256], dtype: float32, seed: 0, scale: 0.05}
      b1: {init: zeros, shape: [256]}            # init: zeros | ones | normal | uniform
      w2: {file: w2.npy}                         # .npy in this file's folder; dtype: casts
    nodes:                                       # any order: they are sorted by their inputs
      - {name: fc1, op: Matmul, inputs: [x, w1], attrs: {cubeMathType: 1}}
      - {name: act1, op: Relu, inputs: [fc1]}    # a single output is named after its node
      - {name: halves, op: Split, inputs: [act1], attrs: {splitSections: [128, 128], dim: 1},
         outputs: [left, right]}                 # several outputs: name them (null skips an
                                                 # optional one, e.g. LayerNorm's meanOutOptional)
    outputs: {y: act1}                           # output name -> value name

``normal`` draws from N(0, scale^2) and ``uniform`` from U(-scale, scale) with
``numpy.random.default_rng(seed)`` (seed an int >= 0, default 0; scale a finite number >= 0,
default 1.0).  An input list may hold ``null`` for an optional op argument that is not given.

Loading is safe on files from elsewhere: see :mod:`.document` (size, encoding, nesting,
duplicate keys, YAML aliases and tags), :mod:`.npy` (``.npy`` files confined to one folder,
plain arrays only) and :class:`~aclpipe.graph.limits.LoadLimits` (every cap, configurable).
Every problem raises :class:`GraphError` naming the file, the node or entry, and what is wrong.
"""

from __future__ import annotations

import heapq
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ..dtypes import DType, as_dtype
from ..errors import GraphError
from ..gc_pause import paused_gc
from .builder import is_list_argument, resolve_op, thaw
from .document import Where, read_document
from .graph import Graph
from .limits import DEFAULT_LIMITS, LoadLimits
from .messages import short
from .npy import read_npy

__all__ = ["INITS", "load_graph", "save_graph"]

INITS = ("zeros", "ones", "normal", "uniform")
_TOP_KEYS = {"name", "inputs", "constants", "nodes", "outputs"}
_INPUT_KEYS = {"shape", "dtype"}
_CONSTANT_KEYS = {"init", "shape", "dtype", "seed", "scale", "file"}
_NODE_KEYS = {"name", "op", "inputs", "outputs", "attrs"}
_MAX_RANK = 32


class _Loading:
    """One load: where messages point, the caps, the folder ``.npy`` files come from, and the
    constant bytes made so far."""

    def __init__(self, path: Path, base_dir: str | Path | None, limits: LoadLimits):
        self.where = Where(path)
        self.limits = limits
        self.folder = path.parent
        self.root = Path(base_dir) if base_dir is not None else path.parent
        self.constant_bytes = 0

    def claim(self, at: str, nbytes: int, what: str) -> None:
        """Count ``nbytes`` of constants, refusing them past either cap before they are made."""
        limits = self.limits
        if nbytes > limits.max_constant_bytes:
            raise self.where.error(at, f"{what} = {nbytes} bytes, over the limit of {limits.max_constant_bytes} "
                                       "bytes per constant (LoadLimits.max_constant_bytes)")
        if self.constant_bytes + nbytes > limits.max_total_constant_bytes:
            raise self.where.error(at, f"{what} = {nbytes} bytes would bring the constants to "
                                       f"{self.constant_bytes + nbytes} bytes, over the limit of "
                                       f"{limits.max_total_constant_bytes} (LoadLimits.max_total_constant_bytes)")
        self.constant_bytes += nbytes


def load_graph(path: str | Path, *, base_dir: str | Path | None = None, limits: LoadLimits | None = None) -> Graph:
    """Read a graph file (format in this module's docstring) into a :class:`Graph`.

    Parameters
    ----------
    path:
        A ``.yaml``, ``.yml`` or ``.json`` file.
    base_dir:
        The folder ``.npy`` constants may be read from (after resolving ``..`` and symlinks);
        default: the graph file's own folder.  Entries stay relative to the graph file.
    limits:
        Caps on the file, its nesting and aliases, the node count and the constants
        (:class:`~aclpipe.graph.limits.LoadLimits`; default ``LoadLimits()``).

    Raises
    ------
    GraphError
        For every problem with the file, naming the file and the entry.
    """
    with paused_gc():  # a node or more per entry, all kept: no garbage cycles to look for meanwhile
        return _load_graph(Path(path), base_dir, limits)


def _load_graph(path: Path, base_dir: str | Path | None, limits: LoadLimits | None) -> Graph:
    loading = _Loading(path, base_dir, limits if limits is not None else DEFAULT_LIMITS)
    where = loading.where
    data = where.mapping(read_document(path, where, loading.limits), "top level", _TOP_KEYS, ("nodes", "outputs"))
    name = where.typed(data.get("name", path.stem), str, "name", "a string")
    graph = Graph(name)
    try:
        _load_body(graph, data, loading)
    except GraphError as error:
        if str(error).startswith(str(path)):
            raise
        raise where.error("", str(error)) from None
    return graph


def _load_body(graph: Graph, data: dict[str, Any], loading: _Loading) -> None:
    where = loading.where
    for input_name, spec in where.typed(data.get("inputs") or {}, dict, "inputs", "a mapping").items():
        _load_input(graph, str(input_name), spec, where)
    for constant, spec in where.typed(data.get("constants") or {}, dict, "constants", "a mapping").items():
        _load_constant(graph, str(constant), spec, loading)
    records = where.typed(data["nodes"], list, "nodes", "a list of node mappings")
    if len(records) > loading.limits.max_nodes:
        raise where.error("nodes", f"{len(records)} nodes, over the limit of {loading.limits.max_nodes} "
                                   "(LoadLimits.max_nodes)")
    nodes = [_node_record(record, index, where) for index, record in enumerate(records)]
    values = graph.values  # a live view: one for all nodes
    for record in _sorted_nodes(nodes, set(values), where):
        spec = resolve_op(record["op"], record["name"])
        inputs = [None if value is None else values[value] for value in record["inputs"]]
        graph._add_node(spec, inputs, {}, record["name"], record.get("outputs"), record.get("attrs") or {})
    for output, value in where.typed(data["outputs"], dict, "outputs", "a mapping").items():
        value = where.typed(value, str, f"output {short(output)}", "a value name")
        if value not in graph.values:
            raise where.error(f"output {short(output)}", f"value {short(value)} is not defined "
                              "(no input, constant or node output has that name)")
        graph.output(str(output), graph.values[value])


def _load_input(graph: Graph, name: str, spec: Any, where: Where) -> None:
    spec = where.mapping(spec, f"input {short(name)}", _INPUT_KEYS, ("shape",))
    shape = where.typed(spec["shape"], list, f"input {short(name)} shape", "a list of dims")
    if len(shape) > _MAX_RANK:
        raise where.error(f"input {short(name)} shape", f"{len(shape)} dims, more than {_MAX_RANK}")
    graph.input(name, shape, spec.get("dtype", "float32"))


def _load_constant(graph: Graph, name: str, spec: Any, loading: _Loading) -> None:
    where = loading.where
    at = f"constant {short(name)}"
    spec = where.mapping(spec, at, _CONSTANT_KEYS)
    if ("init" in spec) == ("file" in spec):
        raise where.error(at, "give exactly one of 'init' (zeros, ones, normal, uniform) or 'file' (a .npy)")
    dtype = _dtype(spec.get("dtype"), at, where)
    if "file" in spec:
        array = _load_npy(spec, dtype, at, loading)
    else:
        array = _initialize(spec, dtype or DType.float32, at, loading)
    graph._add_constant(name, array, dict(spec))


def _dtype(value: Any, at: str, where: Where) -> DType | None:
    if value is None:
        return None
    try:
        return as_dtype(where.typed(value, str, f"{at} dtype", "a dtype name"))
    except TypeError as error:
        raise where.error(at, str(error)) from None


def _shape(spec: dict[str, Any], at: str, where: Where) -> tuple[int, ...]:
    if "shape" not in spec:
        raise where.error(at, "missing key 'shape'")
    shape = where.typed(spec["shape"], list, f"{at} shape", "a list of ints")
    if len(shape) > _MAX_RANK:
        raise where.error(f"{at} shape", f"{len(shape)} dims, more than {_MAX_RANK}")
    for dim in shape:
        where.typed(dim, int, f"{at} shape", "a list of ints >= 0")
        if dim < 0:
            raise where.error(f"{at} shape", f"expected a list of ints >= 0, got {short(shape)}")
    return tuple(shape)


def _init_arguments(spec: dict[str, Any], at: str, where: Where) -> tuple[int, float]:
    seed = where.typed(spec.get("seed", 0), int, f"{at} seed", "an int >= 0")
    if seed < 0:
        raise where.error(f"{at} seed", f"expected an int >= 0, got {seed}")
    raw = where.typed(spec.get("scale", 1.0), (int, float), f"{at} scale", "a finite number >= 0")
    try:
        scale = float(raw)
    except OverflowError:
        scale = math.inf
    if not math.isfinite(scale) or scale < 0:
        raise where.error(f"{at} scale", f"expected a finite number >= 0, got {short(raw)}")
    return seed, scale


def _initialize(spec: dict[str, Any], dtype: DType, at: str, loading: _Loading) -> np.ndarray:
    where = loading.where
    init = spec["init"]
    if not isinstance(init, str) or init not in INITS:
        raise where.error(at, f"unknown init {short(init)} (expected one of {', '.join(INITS)})")
    shape = _shape(spec, at, where)
    seed, scale = _init_arguments(spec, at, where)
    count = math.prod(shape)
    drawn = init in ("normal", "uniform")
    # Random values are drawn as float64 and then cast, so drawing takes 8 bytes an element.
    loading.claim(at, count * max(dtype.numpy.itemsize, 8 if drawn else 0),
                  f"init {init} of shape {list(shape)} {dtype.name}{' (drawn as float64)' if drawn else ''}")
    if init == "zeros":
        return np.zeros(shape, dtype.numpy)
    if init == "ones":
        return np.ones(shape, dtype.numpy)
    rng = np.random.default_rng(seed)
    data = rng.normal(0.0, scale, shape) if init == "normal" else rng.uniform(-scale, scale, shape)
    return data.astype(dtype.numpy)


def _load_npy(spec: dict[str, Any], dtype: DType | None, at: str, loading: _Loading) -> np.ndarray:
    where = loading.where
    entry = where.typed(spec["file"], str, f"{at} file", "a path to a .npy file")
    array = read_npy(entry, loading.folder, loading.root, loading.limits.max_constant_bytes,
                     lambda problem: where.error(at, problem))
    loading.claim(at, array.nbytes, f"file {entry!r} of shape {list(array.shape)} {array.dtype}")
    if dtype == DType.bfloat16 and array.dtype.kind == "V" and array.dtype.itemsize == 2:
        array = array.view(DType.bfloat16.numpy)  # np.save stores ml_dtypes' bfloat16 as raw 2-byte records
    if "shape" in spec and tuple(array.shape) != _shape(spec, at, where):
        raise where.error(at, f"{entry!r} holds shape {list(array.shape)}, the file says {short(spec['shape'])}")
    return np.asarray(array.astype(dtype.numpy) if dtype is not None and array.dtype != dtype.numpy else array)


def _names(entries: Any) -> bool:
    return type(entries) is list and all(type(entry) is str or entry is None for entry in entries)


def _node_record(record: Any, index: int, where: Where) -> dict[str, Any]:
    """The node entry, checked; the common well-formed case is told apart at once."""
    if (type(record) is dict and record.keys() <= _NODE_KEYS and type(record.get("name")) is str
            and type(record.get("op")) is str and _names(record.get("inputs", []))
            and ("outputs" not in record or _names(record["outputs"]))
            and type(record.get("attrs") or {}) is dict):
        return record if "inputs" in record else {**record, "inputs": []}
    return _checked_node_record(record, index, where)


def _checked_node_record(record: Any, index: int, where: Where) -> dict[str, Any]:
    named = isinstance(record, dict) and isinstance(record.get("name"), str)
    label = f"node {_name(record['name'])}" if named else f"node #{index}"
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


def _name(name: str) -> str:
    return repr(name) if len(name) <= 60 else short(name)


def _sorted_nodes(nodes: list[dict[str, Any]], defined: set[str], where: Where) -> list[dict[str, Any]]:
    """Nodes in an order where every input is written first (file order where possible)."""
    producer: dict[str, int] = {}
    for index, record in enumerate(nodes):
        for value in record.get("outputs") or [record["name"]]:
            if value is None:
                continue
            if value in producer or value in defined:
                raise where.error(f"node {short(record['name'])}", f"duplicate name {short(value)}")
            producer[value] = index
    preds: list[set[int]] = []
    for record in nodes:
        needs = set()
        for value in record["inputs"]:
            if value is None or value in defined:
                continue
            if value not in producer:
                raise where.error(f"node {short(record['name'])}", f"dangling input {short(value)}: no input, "
                                  "constant or node output has that name")
            needs.add(producer[value])
        preds.append(needs)
    return [nodes[i] for i in _stable_topological(preds, [r["name"] for r in nodes], where)]


def _stable_topological(preds: list[set[int]], names: list[str], where: Where) -> list[int]:
    """Kahn's algorithm taking the ready node that comes first in the file: ``O(n log n)``."""
    missing = [len(p) for p in preds]
    succs: list[list[int]] = [[] for _ in preds]
    for node, before in enumerate(preds):
        for pred in before:
            succs[pred].append(node)
    ready = [node for node, count in enumerate(missing) if count == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        node = heapq.heappop(ready)
        order.append(node)
        for succ in succs[node]:
            missing[succ] -= 1
            if missing[succ] == 0:
                heapq.heappush(ready, succ)
    if len(order) < len(preds):
        done = set(order)
        raise where.error("", f"the nodes form a cycle: {' -> '.join(_cycle(preds, done, names))}")
    return order


def _cycle(preds: list[set[int]], done: set[int], names: list[str]) -> list[str]:
    """Follow unfinished predecessors from an unfinished node until one repeats."""
    node = next(i for i in range(len(preds)) if i not in done)
    seen: dict[int, int] = {}
    path: list[int] = []
    while node not in seen:
        seen[node] = len(path)
        path.append(node)
        node = min(p for p in preds[node] if p not in done)
    cycle = path[seen[node]:] + [node]
    return [short(names[i]) if len(names[i]) > 60 else names[i] for i in reversed(cycle)]


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
