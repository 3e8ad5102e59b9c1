"""Graphs that travel to another process: a graph file with its arrays, or ONNX bytes.

A :class:`~aclpipe.graph.Graph` holds numpy constants and is not pickled as it is.  A
:class:`GraphBundle` is what crosses to a Ray actor instead: the graph saved as YAML plus its
constants as numpy arrays (which Ray's object store hands over without copies), or the bytes
of an ONNX model.  :meth:`GraphBundle.load` rebuilds the graph on the other side.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..graph import Graph, load_graph

__all__ = ["GraphBundle"]

_ONNX_SUFFIXES = (".onnx",)


@dataclass(frozen=True)
class GraphBundle:
    """A graph packed to travel: ``kind`` is ``"graph"`` (``text`` is a YAML graph file and
    ``arrays`` its ``.npy`` files by name) or ``"onnx"`` (``text`` is the model)."""

    kind: str
    name: str
    text: bytes
    arrays: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def of(cls, graph: Graph | GraphBundle | str | Path | bytes) -> GraphBundle:
        """Pack a :class:`Graph`, a graph file (YAML, JSON or ONNX) or ONNX model bytes."""
        if isinstance(graph, GraphBundle):
            return graph
        if isinstance(graph, (bytes, bytearray)):
            return cls("onnx", "model", bytes(graph))
        if isinstance(graph, (str, Path)):
            path = Path(graph)
            if path.suffix.lower() in _ONNX_SUFFIXES:
                return cls("onnx", path.stem, path.read_bytes())
            return cls.of(load_graph(path))  # its .npy constants come along as arrays
        if isinstance(graph, Graph):
            with tempfile.TemporaryDirectory(prefix="aclpipe-bundle-") as folder:
                target = Path(folder) / "graph.yaml"
                graph.save(target)
                arrays = {path.name: np.load(path) for path in Path(folder).glob("*.npy")}
                return cls("graph", graph.name, target.read_bytes(), arrays)
        raise TypeError(f"a graph travels as a Graph, a graph file path or ONNX bytes; got {type(graph).__name__}")

    def load(self, **onnx_options: Any) -> Graph:
        """The graph again (ONNX needs the ``onnx`` extra); ``onnx_options`` go to ``load_onnx``."""
        if self.kind == "onnx":
            from ..onnx.importer import load_onnx

            return load_onnx(self.text, **onnx_options)
        with tempfile.TemporaryDirectory(prefix="aclpipe-bundle-") as folder:
            for name, array in self.arrays.items():
                np.save(Path(folder) / name, array)
            target = Path(folder) / "graph.yaml"
            target.write_bytes(self.text)
            return load_graph(target)
