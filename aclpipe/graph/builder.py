"""What a builder call needs from the operator catalog: op lookup, argument shapes, output structure.

A builder call (``g.matmul(a, b)``, ``g.op("Split", x, splitSections=[2, 2])``) must know, before
any shape is fixed, how many values a node produces and, when it can, their dtype and shape.
When every input shape is concrete the op's own ``infer`` answers and its errors surface at the
call.  When an input has a dimension fixed only at prepare time (``None`` or a named dim), the
op is *probed*: ``infer`` runs twice with the symbolic dims replaced by two different sets of
sizes; a dim that follows a symbol in both probes is that symbol, one that stays put is
concrete.  Probing decides structure only: its errors are left for :meth:`Graph.bind`, which
runs ``infer`` on the real shapes and names the node.

Catalog conventions this module relies on (see ``aclpipe/ops``): an input named ``tensors`` or
ending in ``List`` is an aclTensorList (``Cat``), an output named ``outs`` is a list whose
length ``infer`` decides (``Split``), and outputs whose names end in ``Optional`` are produced
only when the caller names them.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..dtypes import DType
from ..errors import GraphError, InvalidArgumentError, UnsupportedOpError
from ..ops.base import OpSpec
from ..ops.registry import get_op, op_names
from ..tensor import TensorDesc

__all__ = [
    "COPYABLE_VIEWS",
    "Dim",
    "Shape",
    "ValueInfo",
    "builder_names",
    "freeze_attrs",
    "infer_descs",
    "infer_outputs",
    "is_list_argument",
    "node_error",
    "resolve_op",
    "snake_case",
    "thaw",
    "view_or_copy_desc",
]

#: A dimension of a graph value: a size, a symbol fixed at prepare time, or unknown (None).
Dim = int | str | None
Shape = tuple[Dim, ...]

#: View ops that, on an input they cannot view, get a contiguous copy inserted before them.
COPYABLE_VIEWS = frozenset({"Reshape", "Flatten", "View"})

# Two probe size sets, large primes so that a probed dim is unlikely to equal a real one.
_PROBES = ((10007, 10009, 10037, 10039, 10061, 10067, 10069, 10079),
           (10091, 10093, 10099, 10103, 10111, 10133, 10139, 10141))


@functools.lru_cache(maxsize=1024)
def snake_case(op_name: str) -> str:
    """``"LayerNorm"`` -> ``"layer_norm"``, ``"BatchMatMul"`` -> ``"batch_mat_mul"``."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", op_name)
    return spaced.lower()


_builder_names: tuple[int, dict[str, str]] = (-1, {})


def builder_names() -> dict[str, str]:
    """Builder method name -> op name for every op in the catalog now."""
    global _builder_names
    names = op_names()
    # The catalog only grows (a name registers once), so its size says whether the table is current;
    # rebuilding it on every ``g.relu`` lookup cost more than adding the node.
    if _builder_names[0] != len(names):
        _builder_names = (len(names), {snake_case(name): name for name in names})
    return _builder_names[1]


def resolve_op(op_name: str, node: str | None = None) -> OpSpec:
    """The catalog entry for ``op_name``, or a :class:`GraphError` listing close names."""
    try:
        return get_op(op_name)
    except UnsupportedOpError:
        names = op_names()
        lowered = {name.lower(): name for name in names}
        close = difflib.get_close_matches(op_name.lower(), list(lowered), n=5, cutoff=0.6)
        hint = f"; did you mean {', '.join(lowered[c] for c in close)}?" if close else \
            f"; known ops: {', '.join(names[:12])}{', ...' if len(names) > 12 else ''}"
        where = f"node {node!r}: " if node else ""
        raise GraphError(f"{where}unknown op {op_name!r}: it is not in the aclpipe catalog{hint}") from None


def is_list_argument(name: str) -> bool:
    """Whether the op argument ``name`` is a tensor list (``Cat``'s inputs, ``Split``'s outputs)."""
    return name in ("tensors", "outs") or name.endswith("List")


def freeze_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Attributes as hashable plain Python: lists become tuples, numpy scalars Python numbers."""
    return {str(key): _freeze(value) for key, value in attrs.items()}


def _freeze(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return _freeze(value.tolist())
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(item) for item in value)
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    return value


def thaw(value: Any) -> Any:
    """The JSON/YAML form of a frozen attribute: tuples become lists."""
    if isinstance(value, tuple):
        return [thaw(item) for item in value]
    return value


def node_error(node: str, op: str, error: BaseException) -> GraphError:
    """A :class:`GraphError` naming the node for an op's phase-one complaint."""
    detail = error.detail if isinstance(error, InvalidArgumentError) and error.detail else str(error)
    return GraphError(f"node {node!r} ({op}): {detail}")


@dataclass(frozen=True)
class ValueInfo:
    """What the builder knows of a value: its dtype and symbolic shape, and a descriptor when the
    shape is concrete (for views: the descriptor over the base's storage)."""

    dtype: DType | None
    shape: Shape | None
    desc: TensorDesc | None = None


class Described(Protocol):
    """What inference reads of an input: a :class:`ValueInfo`, or a graph's value itself."""

    @property
    def dtype(self) -> DType | None: ...
    @property
    def shape(self) -> Shape | None: ...
    @property
    def desc(self) -> TensorDesc | None: ...


def view_or_copy_desc(spec: OpSpec, node: str, source: TensorDesc, attrs: Mapping[str, Any]
                      ) -> tuple[TensorDesc, bool]:
    """The view's descriptor and whether a contiguous copy must precede it.

    ``spec.view`` first; when it refuses and the op is one that may copy (Reshape, Flatten),
    the op's ``infer`` on a contiguous copy of the source gives a fresh contiguous descriptor.
    """
    try:
        return spec.view(source, attrs), False
    except (InvalidArgumentError, TypeError, ValueError) as error:
        if spec.name not in COPYABLE_VIEWS:
            raise node_error(node, spec.name, error) from error
    contiguous = TensorDesc.contiguous(source.shape, source.dtype)
    try:
        return spec.view(contiguous, attrs), True
    except (InvalidArgumentError, TypeError, ValueError) as error:
        raise node_error(node, spec.name, error) from error


def infer_outputs(spec: OpSpec, node: str, inputs: Sequence[Described | None],
                  attrs: Mapping[str, Any]) -> list[ValueInfo | None] | None:
    """Output infos in the op's output order (None for an output the op does not produce).

    Returns None when the structure cannot be told before shapes are fixed (probing failed).
    Raises :class:`GraphError` naming the node when every shape is concrete and the op refuses.
    """
    if all(info is None or info.desc is not None for info in inputs):
        descs = [info.desc if info else None for info in inputs]
        return [None if desc is None else ValueInfo(desc.dtype, desc.shape, desc)
                for desc in _concrete(spec, node, descs, attrs)]
    return _probe(spec, inputs, attrs)


def infer_descs(spec: OpSpec, node: str, descs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
    """:func:`infer_outputs` when every input's descriptor is known (binding): the output
    descriptors, ``None`` for an output the op does not produce."""
    return _concrete(spec, node, descs, attrs)


def _concrete(spec: OpSpec, node: str, descs: Sequence[TensorDesc | None],
              attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
    """The op's output descriptors, remembered per op, input descriptors and attributes (a
    graph repeats its layers; refusals are not remembered, their messages name the node)."""
    key = (spec.name, tuple(descs), tuple(sorted(attrs.items())))
    try:
        found = _INFERRED.get(key)
    except TypeError:  # an unhashable attribute value
        return _concrete_once(spec, node, descs, attrs)
    if found is None:
        found = tuple(_concrete_once(spec, node, descs, attrs))
        if len(_INFERRED) >= _PROBED_LIMIT:
            _INFERRED.pop(next(iter(_INFERRED)))
        _INFERRED[key] = found
    return list(found)


_INFERRED: dict[Any, tuple[TensorDesc | None, ...]] = {}


def _concrete_once(spec: OpSpec, node: str, descs: Sequence[TensorDesc | None],
                   attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
    try:
        if spec.is_view:
            source = descs[0] if descs else None
            if source is None:
                return list(spec.infer(descs, attrs))
            return [view_or_copy_desc(spec, node, source, attrs)[0]]
        return list(spec.infer(descs, attrs))
    except (InvalidArgumentError, TypeError, ValueError) as error:
        if isinstance(error, GraphError):
            raise
        raise node_error(node, spec.name, error) from error


def _probe(spec: OpSpec, inputs: Sequence[Described | None], attrs: Mapping[str, Any]
           ) -> list[ValueInfo | None] | None:
    """:func:`_probe_once`, remembered per op, input dtypes and shapes, and attributes: graphs
    repeat the same layer many times, and each probe runs ``infer`` twice."""
    key = (spec.name, tuple(None if info is None else (info.dtype, info.shape) for info in inputs),
           tuple(sorted(attrs.items())))
    try:
        hash(key)
    except TypeError:
        return _probe_once(spec, inputs, attrs)
    if key not in _PROBED:
        if len(_PROBED) >= _PROBED_LIMIT:
            _PROBED.pop(next(iter(_PROBED)))
        result = _probe_once(spec, inputs, attrs)
        _PROBED[key] = None if result is None else tuple(result)
    found = _PROBED[key]
    return None if found is None else list(found)


_PROBED: dict[Any, tuple[ValueInfo | None, ...] | None] = {}
_PROBED_LIMIT = 4096


def _probe_once(spec: OpSpec, inputs: Sequence[Described | None], attrs: Mapping[str, Any]
                ) -> list[ValueInfo | None] | None:
    symbols = sorted({dim for info in inputs if info and info.shape for dim in info.shape
                      if isinstance(dim, str)})
    if any(info is not None and (info.shape is None or info.dtype is None or None in info.shape)
           for info in inputs) or len(symbols) > len(_PROBES[0]):
        return None
    results = []
    for sizes in _PROBES:
        table = dict(zip(symbols, sizes))
        descs = [None if info is None else TensorDesc.contiguous(
            tuple(table[d] if isinstance(d, str) else int(d or 0) for d in info.shape or ()), info.dtype)
            for info in inputs]
        try:
            results.append(list(spec.infer(descs, attrs)))
        except Exception:  # noqa: BLE001 - a failed probe only means "not known yet"
            return None
    first, second = results
    if [d is None for d in first] != [d is None for d in second]:
        return None
    return [None if a is None or b is None else _symbolic(a, b, symbols) for a, b in zip(first, second)]


def _symbolic(first: TensorDesc, second: TensorDesc, symbols: Sequence[str]) -> ValueInfo:
    if first.ndim != second.ndim:
        return ValueInfo(first.dtype, None)
    by_probe = {(a, b): symbol for symbol, a, b in zip(symbols, _PROBES[0], _PROBES[1])}
    shape: list[Dim] = []
    for a, b in zip(first.shape, second.shape):
        shape.append(a if a == b else by_probe.get((a, b)))
    return ValueInfo(first.dtype, tuple(shape))
