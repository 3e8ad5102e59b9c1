"""Graphs: build a DAG of catalog ops (:class:`Graph`), bind it to shapes (:class:`BoundGraph`),
and read or write it as YAML/JSON (:func:`load_graph`, :meth:`Graph.save`)."""

from __future__ import annotations

from .bound import BoundGraph, BoundNode, BoundValue
from .files import load_graph, save_graph
from .graph import Graph, InputSpec, Node, Value
from .limits import LoadLimits

__all__ = [
    "BoundGraph",
    "BoundNode",
    "BoundValue",
    "Graph",
    "InputSpec",
    "LoadLimits",
    "Node",
    "Value",
    "load_graph",
    "save_graph",
]
