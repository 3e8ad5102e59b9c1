"""Real inputs and outputs for ``aclpipe run``: ``.npy``/``.npz`` in, a summary and ``.npz`` out.

``--input x=batch.npy`` feeds one input from a ``.npy`` file; ``--input batch.npz`` feeds every
array of an ``.npz`` file to the input of its name (``np.savez("batch.npz", x=..., mask=...)``).
Files are read with ``allow_pickle=False`` (an object array is refused, never unpickled).  An
array whose dtype differs from the graph's is converted when numpy calls that a same-kind cast
(float64 to float32, int64 to int32), with a note; otherwise it is an error.  ``--output out.npz``
writes the last run's outputs.  Output paths are checked before anything runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table

from ..dtypes import as_dtype
from ..graph import Graph
from .common import CommandError

__all__ = ["input_assignment", "load_inputs", "outputs_table", "save_outputs"]

#: How many values of each output ``aclpipe run`` prints.
SHOWN_VALUES = 6


def input_assignment(text: str) -> tuple[str | None, str]:
    """argparse type: ``NAME=FILE.npy`` (one input) or ``FILE.npz`` (every input it holds)."""
    name, sep, path = text.partition("=")
    if sep and name and path:
        return name, path
    if not sep and text.lower().endswith(".npz"):
        return None, text
    raise argparse.ArgumentTypeError(f"expected NAME=FILE.npy or FILE.npz, got {text!r}")


def _read(path_text: str) -> dict[str, np.ndarray] | np.ndarray:
    path = Path(path_text)
    if not path.is_file():
        raise CommandError(f"--input {path_text}: no such file")
    try:
        loaded = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as error:
        # numpy reads anything that is not .npy/.npz as a pickle, and then suggests unpickling it.
        reason = ("it is not a .npy/.npz file, or holds object (pickled) data, which is never loaded"
                  if "pickle" in str(error) else " ".join(str(error).split()))
        raise CommandError(f"--input {path_text}: cannot read plain arrays from it: {reason}") from error
    if isinstance(loaded, np.lib.npyio.NpzFile):
        with loaded:
            try:
                return {key: loaded[key] for key in loaded.files}
            except ValueError as error:
                raise CommandError(f"--input {path_text}: {error}") from error
    return np.asarray(loaded)


def _as_input(graph: Graph, name: str, array: np.ndarray, origin: str, notes: list[str]) -> np.ndarray:
    if name not in graph.inputs:
        raise CommandError(f"--input {origin}: graph {graph.name!r} has no input {name!r}; its inputs are "
                           f"{', '.join(graph.inputs)}")
    want = as_dtype(graph.inputs[name].dtype).numpy
    if array.dtype == want:
        return array
    if array.dtype.kind in "biuf" and np.can_cast(array.dtype, want, "same_kind"):
        notes.append(f"input {name}: converted {array.dtype} to {want} (as the graph declares)")
        return array.astype(want)
    raise CommandError(f"--input {origin}: input {name!r} is {array.dtype}, the graph takes {want}; save it "
                       f"as {want} (array.astype('{want}'))")


def load_inputs(graph: Graph, specs: Sequence[tuple[str | None, str]]) -> tuple[dict[str, np.ndarray], list[str]]:
    """The arrays ``--input`` names, checked against the graph; and notes about conversions."""
    arrays: dict[str, np.ndarray] = {}
    notes: list[str] = []
    for name, path_text in specs:
        if name is not None and name not in graph.inputs:
            raise CommandError(f"--input {name}={path_text}: graph {graph.name!r} has no input {name!r}; its "
                               f"inputs are {', '.join(graph.inputs)}")
        loaded = _read(path_text)
        if name is None:
            if not isinstance(loaded, dict):
                raise CommandError(f"--input {path_text}: a .npz file of named arrays was expected")
            found = loaded
        elif isinstance(loaded, dict):
            if len(loaded) != 1:
                raise CommandError(f"--input {name}={path_text}: the .npz holds {len(loaded)} arrays "
                                   f"({', '.join(loaded)}); pass it alone (--input {path_text}) or use a .npy")
            found = {name: next(iter(loaded.values()))}
        else:
            found = {name: loaded}
        for input_name, array in found.items():
            if input_name in arrays:
                raise CommandError(f"--input: input {input_name!r} is given twice")
            arrays[input_name] = _as_input(graph, input_name, array, f"{name}={path_text}" if name else path_text,
                                           notes)
    return arrays, notes


def _values(array: np.ndarray) -> str:
    flat = array.reshape(-1)
    shown = np.array2string(flat[:SHOWN_VALUES], precision=4, separator=", ", threshold=SHOWN_VALUES + 1)
    return shown[:-1] + (", ...]" if flat.size > SHOWN_VALUES else "]")


def outputs_table(outputs: Mapping[str, np.ndarray], title: str) -> Table:
    """Each output's name, shape, dtype and first values."""
    table = Table(title=title, header_style="bold")
    for column in ("output", "shape", "dtype", "values"):
        table.add_column(column, overflow="fold")
    for name, array in outputs.items():
        table.add_row(name, str(tuple(array.shape)), str(array.dtype), _values(array))
    return table


def save_outputs(path: Path, outputs: Mapping[str, Any]) -> None:
    """Write ``outputs`` as one ``.npz`` (``np.load(path)[name]`` reads one back)."""
    with path.open("wb") as file:
        np.savez(file, **dict(outputs))
