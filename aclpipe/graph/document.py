"""A graph file's text to plain Python data, under :class:`~aclpipe.graph.limits.LoadLimits`.

The file is read once, at most ``max_file_bytes`` of it, as UTF-8; a bracket scan refuses
flow nesting far past ``max_depth`` before a parser sees it (libyaml takes quadratic time on
deep ``[[[[...`` nesting); then YAML goes to :func:`~aclpipe.graph.yaml_reader.read_yaml` and
JSON to :func:`json.loads` with duplicate keys refused.  Every problem is a
:class:`~aclpipe.GraphError` that names the file (:class:`Where` builds the messages).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import GraphError
from .limits import LoadLimits
from .messages import short
from .yaml_reader import read_yaml

__all__ = ["SUFFIXES", "Where", "read_document"]

SUFFIXES = (".yaml", ".yml", ".json")

class Where:
    """Builds messages that name the file and the entry being read."""

    def __init__(self, path: Path):
        self.path = path

    def error(self, where: str, problem: str) -> GraphError:
        return GraphError(f"{self.path}: {where}: {problem}" if where else f"{self.path}: {problem}")

    def mapping(self, value: Any, where: str, allowed: set[str], required: tuple[str, ...] = ()) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.error(where, f"expected a mapping, got {type(value).__name__} {short(value)}")
        unknown = sorted(short(key) if not isinstance(key, str) else key for key in value if key not in allowed)
        if unknown:
            raise self.error(where, f"unknown key(s) {', '.join(unknown)} (expected {', '.join(sorted(allowed))})")
        for key in required:
            if key not in value:
                raise self.error(where, f"missing key {key!r}")
        return value

    def typed(self, value: Any, types: type | tuple[type, ...], where: str, expected: str) -> Any:
        allowed = types if isinstance(types, tuple) else (types,)
        if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
            raise self.error(where, f"expected {expected}, got {type(value).__name__} {short(value)}")
        return value


def read_document(path: Path, where: Where, limits: LoadLimits) -> Any:
    """The data in the graph file at ``path`` (YAML or JSON by suffix)."""
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise where.error("", f"unknown graph file type {suffix!r}: use .yaml, .yml or .json")
    text = _decode(_read_capped(path, where, limits.max_file_bytes), where)
    _check_flow_nesting(text, where, limits)
    if suffix == ".json":
        return _read_json(text, where, limits)
    return read_yaml(text, lambda problem: where.error("", problem), limits)


def _read_capped(path: Path, where: Where, limit: int) -> bytes:
    try:
        # O_NONBLOCK: opening a FIFO put in the graph's place must not hang the loader.
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        raise where.error("", f"cannot open the graph file: {error.strerror}") from None
    info = os.fstat(descriptor)
    if not stat.S_ISREG(info.st_mode):
        os.close(descriptor)
        raise where.error("", "is not a regular file")
    with os.fdopen(descriptor, "rb") as file:
        if info.st_size > limit:
            raise where.error("", f"the file is {info.st_size} bytes, over the limit of {limit} bytes "
                                  "(LoadLimits.max_file_bytes)")
        data = file.read(limit + 1)
    if len(data) > limit:
        raise where.error("", f"the file grew past the limit of {limit} bytes while being read "
                              "(LoadLimits.max_file_bytes)")
    return data


def _decode(data: bytes, where: Where) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise where.error("", f"is not UTF-8 text (byte {data[error.start]:#04x} at offset {error.start}): "
                              "a graph file is YAML or JSON text") from None


#: Per byte: +1 opens a flow collection, -1 closes one (a table lookup per byte).
_BRACKET_STEPS = np.zeros(256, np.int8)
_BRACKET_STEPS[[ord("["), ord("{")]] = 1
_BRACKET_STEPS[[ord("]"), ord("}")]] = -1


def _check_flow_nesting(text: str, where: Where, limits: LoadLimits) -> None:
    """Refuse bracket nesting far deeper than the limit before any parser runs.

    Brackets inside quoted strings count too, so the threshold leaves a wide margin; the
    parsers check the real nesting against ``max_depth`` exactly.
    """
    data = np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    if data.size == 0:
        return
    steps = _BRACKET_STEPS[data]
    steps = steps[steps != 0]  # the brackets alone: a graph file is mostly other text
    depth = int(np.cumsum(steps, dtype=np.int32).max(initial=0))
    threshold = 4 * limits.max_depth + 64
    if depth > threshold:
        raise where.error("", f"brackets nest {depth} deep, far past the nesting limit of {limits.max_depth} "
                              "(LoadLimits.max_depth)")


def _unique_keys(where: Where) -> Any:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in pairs:
            if key in result:
                raise where.error("", f"JSON: duplicate key {short(key)} in one object: each key may appear once")
            result[key] = value
        return result
    return hook


def _read_json(text: str, where: Where, limits: LoadLimits) -> Any:
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys(where))
    except GraphError:
        raise
    except json.JSONDecodeError as error:
        raise where.error("", f"JSON syntax error at line {error.lineno}, column {error.colno}: {error.msg}") from None
    except RecursionError:
        raise where.error("", f"JSON nesting too deep (the limit is LoadLimits.max_depth = {limits.max_depth})") \
            from None
    except ValueError as error:  # an integer with too many digits
        raise where.error("", f"JSON: {error}") from None
    if type(data) is list or type(data) is dict:
        _check_depth(data, where, limits.max_depth)
    return data


def _check_depth(data: Any, where: Where, limit: int) -> None:
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if depth >= limit:
            raise where.error("", f"nesting deeper than {limit} levels (LoadLimits.max_depth)")
        for child in value.values() if isinstance(value, dict) else value:
            if type(child) is list or type(child) is dict:
                stack.append((child, depth + 1))
