"""Graphs: build a DAG of catalog ops (:class:`Graph`), bind it to shapes (:class:`BoundGraph`),
and read or write it as YAML/JSON (:func:`load_graph`, :meth:`Graph.save`)."""

from __future__ import annotations

from .bound import BoundGraph, BoundNode, BoundValue
from .files import load_graph, save_graph
from .graph import Graph, InputSpec, Node, Value
from .limits import LoadLimits
from .signature import HostValue, Signature

__all__ = [
    "BoundGraph",
    "BoundNode",
    "BoundValue",
    "Graph",
    "HostValue",
    "InputSpec",
    "LoadLimits",
    "Node",
    "Signature",
    "Value",
    "load_graph",
    "save_graph",
]
