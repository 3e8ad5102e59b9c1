"""The blocking one-shot, for scripts and for people coming from onnxruntime.

.. code-block:: python

    out = aclpipe.run("graphs/mlp.onnx", x=batch)          # load, prepare, run, free
    with aclpipe.Pipeline(graph) as pipe:                   # or keep one prepared
        for batch in batches:
            out = pipe.run_sync(x=batch)

:func:`run` loads a graph file (YAML, JSON or ONNX) or takes a :class:`Graph`, opens a
pipeline, runs it once, closes everything and returns ``{output name: array}``.  It prepares
the graph for every call, so a loop should keep a :class:`Pipeline` and call
:meth:`Pipeline.run_sync` instead.  Neither may be called from inside a running event loop
(they would block it): there, ``await pipe.run(...)``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from ..errors import GraphError
from ..graph import Graph, load_graph
from .affinity import refuse_inside_event_loop
from .pipeline import Pipeline

if TYPE_CHECKING:
    import numpy as np

    from ..runtime import Device

__all__ = ["MODEL_SUFFIXES", "load_model", "run"]

#: File types :func:`load_model` reads.
MODEL_SUFFIXES = (".yaml", ".yml", ".json", ".onnx")


def load_model(source: Graph | str | os.PathLike[str]) -> Graph:
    """A :class:`Graph` from a graph file (``.yaml``, ``.yml``, ``.json``), an ONNX model
    (``.onnx``; needs the ``onnx`` extra), or a graph as is."""
    if isinstance(source, Graph):
        return source
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"expected a Graph or the path of a graph file, got {type(source).__name__}")
    path = Path(source)
    suffix = path.suffix.lower()
    if suffix not in MODEL_SUFFIXES:
        raise GraphError(f"{str(path)!r}: unknown graph file type {suffix or '(none)'!r}; expected one of "
                         f"{', '.join(MODEL_SUFFIXES)}")
    if not path.is_file():
        raise GraphError(f"{str(path)!r}: no such graph file")
    if suffix != ".onnx":
        return load_graph(path)
    try:
        from ..onnx.importer import load_onnx
    except ImportError as error:
        raise ImportError(f"{str(path)!r}: reading ONNX models needs the onnx package: "
                          "pip install 'aclpipe[onnx]'") from error
    return load_onnx(path)


def run(graph: Graph | str | os.PathLike[str], inputs: Mapping[str, Any] | None = None, /, *,
        device: Device | str | None = None, **named: Any) -> dict[str, np.ndarray]:
    """Run ``graph`` once on ``device`` and return ``{output name: array}``, blocking.

    Parameters
    ----------
    graph:
        A :class:`Graph`, or the path of a graph file or ONNX model (see :func:`load_model`).
    inputs:
        Inputs as one mapping (for names that are not identifiers, or are ``device``).
    device:
        A :class:`Device`, a device name, or None for the default (``ACLPIPE_DEVICE``, else sim).
    **named:
        Inputs by name: ``aclpipe.run(graph, x=batch)``.

    Raises
    ------
    EventLoopError
        When called from a thread that runs an event loop: use ``await pipe.run(...)`` there.
    """
    refuse_inside_event_loop("aclpipe.run")
    model = load_model(graph)
    merged = {**(inputs or {}), **named}

    async def once() -> dict[str, np.ndarray]:
        async with Pipeline(model, device, streams=4, depth=1) as pipe:
            return await pipe.run(**merged)

    return anyio.run(once)
