"""YAML to plain Python data, built from PyYAML's event stream under caps.

``yaml.safe_load`` refuses Python tags, but it still expands aliases into shared objects that
any later walk (an error message's ``repr``, attribute freezing) expands exponentially, keeps
the last of two equal keys, and composes nested nodes recursively (libyaml's composer crashes
the process on deep nesting).  This reader takes the parser's events one at a time (libyaml's
``CParser`` when PyYAML has it) and builds lists, dicts and scalars with an explicit stack:

- nesting deeper than ``max_depth`` is refused where it starts;
- an alias is copied, and the YAML nodes aliases add in all are counted against
  ``max_alias_nodes`` before the copy is made ("billion laughs" files stop at the first alias
  over budget); an alias to an anchor still being built (a recursive structure) is refused;
- a key that appears twice in one mapping is refused (merge keys ``<<`` may be overridden, as
  the YAML merge rule says);
- scalars are resolved and converted by PyYAML's safe resolver and constructor; tags beyond
  the core schema (``!!python/...``, ``!!binary``, ``!!set``, custom ``!tags``) are refused.

Every refusal is a :class:`~aclpipe.GraphError` from ``where`` with the line and column.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import yaml

from ..errors import GraphError
from .limits import LoadLimits
from .messages import short

__all__ = ["read_yaml"]

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_CORE = "tag:yaml.org,2002:"
_SCALAR_TAGS = {_CORE + name for name in ("str", "int", "float", "bool", "null")}
_MERGE = _CORE + "merge"
_CONTAINER_TAGS = {_CORE + "seq", _CORE + "map"}


def _at(event: Any) -> str:
    mark = getattr(event, "start_mark", None)
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "the document"


class _Frame:
    """A list or mapping being built."""

    __slots__ = ("anchor", "event", "has_key", "is_list", "key", "lines", "merges", "size", "value")

    def __init__(self, value: list[Any] | dict[Any, Any], anchor: str | None, event: Any):
        self.value = value
        self.is_list = isinstance(value, list)
        self.anchor = anchor
        self.size = 1  # YAML nodes inside, aliases expanded
        self.key: Any = None
        self.has_key = False
        self.merges: list[dict[Any, Any]] | None = None  # made at the first merge key
        # key -> the event that set it (mappings only; the two are made per container, and a
        # graph file has tens of thousands)
        self.lines: dict[Any, Any] = {} if not self.is_list else _NO_LINES
        self.event = event


class _Builder:
    def __init__(self, text: str, error: Callable[[str], GraphError], limits: LoadLimits):
        self.loader: Any = _Loader(text)  # PyYAML's loaders are untyped
        self.error = error
        self.limits = limits
        self.anchors: dict[str, tuple[Any, int]] = {}
        self.aliased = 0
        self.stack: list[_Frame] = []
        self.implicit: dict[str, Any] = self.loader.yaml_implicit_resolvers
        self._plain: dict[str, Any] = {}  # text of a plain untagged scalar -> its value (all immutable)

    def document(self) -> Any:
        get = self.loader.get_event
        get()  # StreamStart
        if isinstance(self.loader.peek_event(), yaml.StreamEndEvent):
            return None
        get()  # DocumentStart
        result: list[Any] = []
        stack, add, end = self.stack, self._add, (yaml.SequenceEndEvent, yaml.MappingEndEvent)
        plain, scalar_event, miss = self._plain, yaml.ScalarEvent, _MISS
        while True:
            event = get()
            kind = type(event)
            if kind is scalar_event:  # the common case first: most events are scalars
                if event.tag is None and event.anchor is None and stack:
                    # An untagged scalar's value depends only on its text and on being plain
                    # (unquoted); a graph repeats the same few texts (op names, dims) many times.
                    value = event.value
                    if event.implicit[0]:
                        found = plain.get(value, miss)
                        value = plain[value] = self._scalar(event) if found is miss else found
                    frame = stack[-1]
                    frame.size += 1
                    if frame.is_list:
                        frame.value.append(value)  # type: ignore[union-attr]
                    elif not frame.has_key:
                        if type(value) is str and value not in frame.lines:  # a new text key: the common case
                            frame.key, frame.has_key = value, True
                            frame.lines[value] = event
                        else:
                            self._key(frame, value, event)
                    elif frame.key is not _MergeKey:
                        frame.value[frame.key] = value
                        frame.has_key = False
                    else:
                        self._set(frame, value, event)
                else:
                    add(self._scalar(event), 1, event, event.anchor, result)
            elif kind in end:
                frame = stack.pop()
                if frame.merges is not None:
                    frame.value = _merged(frame.merges, frame.value)  # type: ignore[arg-type]
                add(frame.value, frame.size, frame.event, frame.anchor, result)
            elif kind is yaml.DocumentEndEvent:
                break
            elif kind is yaml.AliasEvent:
                self._alias(event, result)
            else:
                self._open(event)
        if not isinstance(self.loader.peek_event(), yaml.StreamEndEvent):
            raise self.error(f"YAML: a second document starts at {_at(self.loader.peek_event())}: "
                             "a graph file holds one document")
        return result[0] if result else None

    def _open(self, event: Any) -> None:
        if len(self.stack) >= self.limits.max_depth:
            raise self.error(f"YAML nesting deeper than {self.limits.max_depth} levels at {_at(event)} "
                             f"(the limit is LoadLimits.max_depth = {self.limits.max_depth})")
        if event.tag is not None and event.tag != "!" and event.tag not in _CONTAINER_TAGS:
            raise self.error(f"YAML tag {event.tag!r} at {_at(event)} is not allowed in graph files "
                             "(only plain lists, mappings and scalars)")
        value: list[Any] | dict[Any, Any] = [] if isinstance(event, yaml.SequenceStartEvent) else {}
        self.stack.append(_Frame(value, event.anchor, event))

    def _scalar(self, event: Any) -> Any:
        tag = event.tag
        if tag is None or tag == "!":
            value = event.value
            if not event.implicit[0] or not self.implicit.get(value[:1]):
                return value  # quoted, or no implicit type starts with this character: text
            tag = self.loader.resolve(yaml.ScalarNode, value, event.implicit)
        elif tag not in _SCALAR_TAGS:
            raise self.error(f"YAML tag {tag!r} at {_at(event)} is not allowed in graph files "
                             "(only plain lists, mappings and scalars)")
        if tag == _MERGE:
            return _MergeKey
        if tag not in _SCALAR_TAGS or tag == _CORE + "str":
            return event.value  # timestamps and the like stay text
        node = yaml.ScalarNode(tag, event.value, event.start_mark, event.end_mark)
        try:
            return self.loader.yaml_constructors[tag](self.loader, node)
        except (ValueError, OverflowError, yaml.YAMLError) as error:
            raise self.error(f"YAML: cannot read {event.value[:40]!r} at {_at(event)} as {tag[len(_CORE):]}: "
                             f"{error}") from None

    def _alias(self, event: Any, result: list[Any]) -> None:
        if event.anchor not in self.anchors:
            raise self.error(f"YAML: alias *{event.anchor} at {_at(event)} refers to no complete anchor "
                             "(undefined, or an anchor that contains its own alias)")
        value, size = self.anchors[event.anchor]
        self.aliased += size
        if self.aliased > self.limits.max_alias_nodes:
            raise self.error(f"YAML aliases expand to more than {self.limits.max_alias_nodes} nodes by alias "
                             f"*{event.anchor} at {_at(event)} (the limit is LoadLimits.max_alias_nodes): "
                             "refused, as a file that grows when expanded")
        self._add(copy.deepcopy(value), size, event, None, result)

    def _add(self, value: Any, size: int, event: Any, anchor: str | None, result: list[Any]) -> None:
        if anchor is not None:
            self.anchors[anchor] = (value, size)
        if not self.stack:
            result.append(value)
            return
        frame = self.stack[-1]
        frame.size += size
        if frame.is_list:
            frame.value.append(value)  # type: ignore[union-attr]
        elif not frame.has_key:
            self._key(frame, value, event)
        else:
            self._set(frame, value, event)

    def _key(self, frame: _Frame, key: Any, event: Any) -> None:
        if isinstance(key, (list, dict)):
            raise self.error(f"YAML: a mapping key at {_at(event)} is a {type(key).__name__}: keys must be scalars")
        if key is not _MergeKey and key in frame.lines:
            raise self.error(f"YAML: duplicate key {short(key)} at {_at(event)} (first at {_at(frame.lines[key])}): "
                             "each key may appear once in a mapping")
        frame.key, frame.has_key = key, True
        if key is not _MergeKey:
            frame.lines[key] = event

    def _set(self, frame: _Frame, value: Any, event: Any) -> None:
        assert isinstance(frame.value, dict)
        frame.has_key = False
        if frame.key is not _MergeKey:
            frame.value[frame.key] = value
            return
        merged = value if isinstance(value, list) else [value]
        if not all(isinstance(item, dict) for item in merged):
            raise self.error(f"YAML: the merge key '<<' at {_at(event)} needs a mapping or a list of mappings")
        if frame.merges is None:
            frame.merges = []
        frame.merges.extend(merged)


class _MergeKey:
    """The ``<<`` key of a YAML merge."""


_MISS = object()
_NO_LINES: dict[Any, Any] = {}  # a sequence's: never written


def _merged(merges: list[dict[Any, Any]], explicit: dict[Any, Any]) -> dict[Any, Any]:
    result: dict[Any, Any] = {}
    for mapping in merges:  # earlier mappings win, explicit keys win over all
        for key, value in mapping.items():
            result.setdefault(key, value)
    result.update(explicit)
    return result


def read_yaml(text: str, error: Callable[[str], GraphError], limits: LoadLimits) -> Any:
    """The one document in ``text`` as lists, dicts and scalars; ``error(problem)`` makes the
    :class:`GraphError` for each refusal (PyYAML's syntax errors included)."""
    builder = _Builder(text, error, limits)
    try:
        return builder.document()
    except yaml.YAMLError as problem:
        mark = getattr(problem, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        detail = getattr(problem, "problem", None) or str(problem)
        raise error(f"YAML syntax error{at}: {detail}") from None
    finally:
        builder.loader.dispose()
