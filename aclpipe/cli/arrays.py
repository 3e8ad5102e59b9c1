"""Real inputs and outputs for ``aclpipe run``: ``.npy``/``.npz`` in, a summary and ``.npy``/``.npz`` out.

``--input x=batch.npy`` feeds one input from a ``.npy`` file; ``--input batch.npz`` feeds every
array of an ``.npz`` file to the input of its name (``np.savez("batch.npz", x=..., mask=...)``).
Input files are untrusted: each ``.npy`` header, and each ``.npz`` member's name and size in
the zip directory, is checked against the file and :class:`~aclpipe.graph.limits.LoadLimits`
before any data is read (:mod:`aclpipe.graph.npy`); a member that feeds no input, a repeated
member, a pickle, a damaged archive: one :class:`~aclpipe.InputFormatError` line, exit 2.
Values are never changed silently: another dtype of numbers is converted only when every value
survives (:func:`aclpipe.pipeline.batches.as_input`), with a note; else
:class:`~aclpipe.InputCastError`.  Inputs that ``--input`` leaves out (an empty ``.npz``, say)
are refused unless ``--random`` asks for seeded random values.

``--output out.npz`` writes the last run's outputs as an archive; ``--output out.npy`` writes
the one output of a graph that has one (a graph with several refuses it before running).
"""

from __future__ import annotations

import argparse
import os
import stat
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np
from rich.table import Table

from ..dtypes import DType, as_dtype
from ..errors import InputCastError, InputFormatError
from ..graph import Graph
from ..graph.limits import DEFAULT_LIMITS, LoadLimits
from ..graph.npy import NpzArchive, read_array
from ..pipeline.batches import as_input
from .common import CommandError

__all__ = ["OUTPUT_SUFFIXES", "check_output_format", "input_assignment", "load_inputs", "outputs_table",
           "save_outputs"]

#: How many values of each output ``aclpipe run`` prints.
SHOWN_VALUES = 6

#: What ``--output`` writes, by the file name's suffix.
OUTPUT_SUFFIXES = (".npz", ".npy")


def input_assignment(text: str) -> tuple[str | None, str]:
    """argparse type: ``NAME=FILE.npy`` (one input) or ``FILE.npz`` (every input it holds)."""
    name, sep, path = text.partition("=")
    if sep and name and path:
        return name, path
    if not sep and text.lower().endswith(".npz"):
        return None, text
    raise argparse.ArgumentTypeError(f"expected NAME=FILE.npy or FILE.npz, got {text!r}")


@contextmanager
def _opened(path_text: str) -> Iterator[tuple[IO[bytes], int]]:
    """The file, open for reading, and its size; a FIFO or device is refused, not waited on."""
    try:
        descriptor = os.open(path_text, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise CommandError(f"--input {path_text}: no such file") from None
    except OSError as error:
        raise CommandError(f"--input {path_text}: cannot open it: {error.strerror}") from None
    info = os.fstat(descriptor)
    if not stat.S_ISREG(info.st_mode):
        os.close(descriptor)
        raise CommandError(f"--input {path_text}: not a regular file")
    with os.fdopen(descriptor, "rb") as file:
        yield file, info.st_size


def _read(graph: Graph, name: str | None, path_text: str, limits: LoadLimits) -> dict[str, np.ndarray]:
    """The arrays one ``--input`` gives, by input name; names are checked before data is read."""
    origin = f"--input {name}={path_text}" if name else f"--input {path_text}"
    with _opened(path_text) as (file, size):
        head = file.read(4)
        file.seek(0)
        if not head.startswith(b"PK"):  # not a zip: a .npy array, or refused as one
            if name is None:
                raise CommandError(f"{origin}: a .npz file of named arrays was expected")
            return {name: read_array(file, size, origin, limits.max_constant_bytes, InputFormatError)}
        with NpzArchive(file, origin, InputFormatError, limits) as archive:
            if name is not None:
                if len(archive.names) != 1:
                    raise CommandError(f"{origin}: the .npz holds {len(archive.names)} arrays "
                                       f"({', '.join(archive.names)}); pass it alone (--input {path_text}) or use "
                                       "a .npy")
                return {name: archive.read(archive.names[0])}
            unknown = [member for member in archive.names if member not in graph.inputs]
            if unknown:
                raise CommandError(f"{origin}: graph {graph.name!r} has no input {unknown[0]!r}; its inputs are "
                                   f"{', '.join(graph.inputs)} (arrays that feed no input are not read)")
            return {member: archive.read(member) for member in archive.names}


def _as_input(graph: Graph, name: str, array: np.ndarray, origin: str, notes: list[str]) -> np.ndarray:
    want = as_dtype(graph.inputs[name].dtype)
    if want == DType.bfloat16 and array.dtype.kind == "V" and array.dtype.itemsize == 2:
        array = array.view(want.numpy)  # np.save stores ml_dtypes' bfloat16 as raw 2-byte records
    try:
        converted = as_input(name, array, want)
    except InputCastError as error:
        raise InputCastError(f"{origin}: {error}", input=name) from None
    if converted.dtype != array.dtype:
        notes.append(f"input {name}: converted {array.dtype} to {want.name} (as the graph declares; every value "
                     "fits)")
    return converted


def load_inputs(graph: Graph, specs: Sequence[tuple[str | None, str]], *, random_rest: bool = False,
                limits: LoadLimits = DEFAULT_LIMITS) -> tuple[dict[str, np.ndarray], list[str]]:
    """The arrays ``--input`` names, checked against the graph; and notes about conversions.

    When ``specs`` leave inputs out, they are refused unless ``random_rest`` (``--random``)
    says seeded random values may stand in for them.
    """
    arrays: dict[str, np.ndarray] = {}
    notes: list[str] = []
    for name, path_text in specs:
        if name is not None and name not in graph.inputs:
            raise CommandError(f"--input {name}={path_text}: graph {graph.name!r} has no input {name!r}; its "
                               f"inputs are {', '.join(graph.inputs)}")
        origin = f"{name}={path_text}" if name else path_text
        found = _read(graph, name, path_text, limits)
        if not found and not random_rest:
            raise CommandError(f"--input {path_text}: the .npz holds no arrays; give the inputs it should hold, or "
                               "pass --random to run on seeded random values")
        for input_name, array in found.items():
            if input_name in arrays:
                raise CommandError(f"--input: input {input_name!r} is given twice")
            arrays[input_name] = _as_input(graph, input_name, array, f"--input {origin}", notes)
    missing = [name for name in graph.inputs if name not in arrays]
    if specs and missing and not random_rest:
        raise CommandError(f"--input gives no value for input(s) {', '.join(missing)}; give them with --input, or "
                           "pass --random to feed them seeded random values")
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


def check_output_format(path: Path, output_names: Sequence[str]) -> None:
    """Refuse, before anything runs, an ``--output`` whose suffix does not say what is written:
    ``.npz`` (every output), or ``.npy`` for a graph with one output."""
    suffix = path.suffix.lower()
    if suffix not in OUTPUT_SUFFIXES:
        raise CommandError(f"--output {path}: unknown suffix {suffix or '(none)'!r}; give OUT.npz (every output) "
                           "or OUT.npy (a graph with one output)")
    if suffix == ".npy" and len(output_names) != 1:
        raise CommandError(f"--output {path}: a .npy file holds one array, the graph has {len(output_names)} outputs "
                           f"({', '.join(output_names)}); give OUT.npz")


def save_outputs(path: Path, outputs: Mapping[str, Any]) -> None:
    """Write ``outputs``: one ``.npz`` (``np.load(path)[name]`` reads one back), or, for a path
    ending in ``.npy``, the one output as a ``.npy`` (:func:`check_output_format` made sure)."""
    with path.open("wb") as file:
        if path.suffix.lower() == ".npy":
            (array,) = outputs.values()
            np.save(file, np.asarray(array), allow_pickle=False)
        else:
            np.savez(file, **dict(outputs))
