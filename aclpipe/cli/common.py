"""What the ``aclpipe`` subcommands share: reading a graph file, fixing its dynamic dims,
seeded inputs, argument types, and turning failures into one ``aclpipe: error: ...`` line.

Exit status, as :mod:`aclpipe.cli` defines it: 0 success, 1 the command ran and found
failures (a device fault, a hazard, mismatching outputs), 2 bad arguments or an error before
anything ran (a missing or malformed file, a graph that cannot be bound).
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import stat
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..dtypes import as_dtype
from ..errors import AclpipeError, BackendError, ExecutionError, GraphError, HazardError
from ..graph import BoundGraph, Graph, load_graph

__all__ = [
    "EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "MAX_DEPTH", "MAX_STREAMS", "CommandError", "add_command",
    "add_graph_arguments", "add_sanitizer_argument", "bind_inputs", "bind_shapes", "check_writable",
    "describe_shapes", "dim_assignment", "find_load_onnx", "int_at_most", "load_any_graph", "load_graph_arguments",
    "open_device_for", "positive_float", "positive_int", "random_inputs", "reporting_errors", "sanitizer_option",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
GRAPH_SUFFIXES = (".yaml", ".yml", ".json", ".onnx")


class CommandError(ValueError):
    """A problem with what the user asked for; printed as one line, exit status 2."""


# -- errors --------------------------------------------------------------------------------------------
def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    if isinstance(error, OSError) and error.filename is not None and error.strerror:
        return f"{error.filename}: {error.strerror}"
    return text


def reporting_errors(run: Callable[..., int]) -> Callable[..., int]:
    """Print any failure of ``run`` as ``aclpipe: error: ...`` on stderr and return its exit status
    (1 for failures found while running, 2 for the rest), never a traceback."""

    @functools.wraps(run)
    def wrapper(*args: Any, **kwargs: Any) -> int:
        try:
            return int(run(*args, **kwargs))
        except MemoryError as error:  # DeviceOutOfMemory too: what was asked for does not fit
            print(f"aclpipe: error: out of memory: {_one_line(error)}; use a smaller --batch, --depth or "
                  "--runs", file=sys.stderr)
            return EXIT_USAGE
        except (ExecutionError, HazardError, BackendError) as error:
            print(f"aclpipe: error: {_one_line(error)}", file=sys.stderr)
            return EXIT_FAILED
        except (AclpipeError, ValueError, TypeError, LookupError, OSError, ImportError,
                NotImplementedError) as error:
            print(f"aclpipe: error: {_one_line(error)}", file=sys.stderr)
            return EXIT_USAGE

    return wrapper


# -- arguments -----------------------------------------------------------------------------------------
def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


#: Upper bounds of ``--streams`` and ``--depth``: more compute streams than a device offers (the
#: simulator's 64, less the two copy streams) fail at open, and each slot of depth is a prepared
#: copy of the graph's memory, so thousands would only spend minutes preparing.
MAX_STREAMS, MAX_DEPTH = 62, 64


def int_at_most(limit: int) -> Callable[[str], int]:
    """argparse type: an integer from 1 to ``limit``."""

    def parse(text: str) -> int:
        value = positive_int(text)
        if value > limit:
            raise argparse.ArgumentTypeError(f"expected at most {limit}, got {value}")
        return value

    parse.__name__ = f"int_at_most_{limit}"
    return parse


def check_writable(path_text: str, option: str) -> Path:
    """``path_text`` as a path that can be written, or a CommandError naming ``option`` now, before
    anything runs: it must be a regular file, or a new file in an existing folder, once
    symlinks are followed (a FIFO would block the write after the run, a folder or a symlink
    into a missing folder would fail it), and writable."""
    path = Path(path_text)
    target = Path(os.path.realpath(path))  # where writing goes: a symlink's target, dangling or not
    shown = f"{option} {path_text}" + (f" (a symlink to {target})" if path.is_symlink() else "")
    try:
        mode: int | None = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as error:
        raise CommandError(f"{shown}: cannot check it: {error.strerror}") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise CommandError(f"{shown}: is a folder; give a file name")
    if mode is not None and not stat.S_ISREG(mode):
        raise CommandError(f"{shown}: is not a regular file (a FIFO, socket or device); give a file name")
    if mode is None and not target.parent.is_dir():
        raise CommandError(f"{shown}: the folder {str(target.parent)!r} does not exist")
    if not os.access(target.parent, os.W_OK) or (mode is not None and not os.access(target, os.W_OK)):
        raise CommandError(f"{shown}: not writable")
    return path


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite positive number, got {text!r}")
    return value


def dim_assignment(text: str) -> tuple[str, int]:
    """argparse type: ``NAME=SIZE``."""
    name, sep, size = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=SIZE (e.g. seq=128), got {text!r}")
    return name, positive_int(size)


def add_graph_arguments(parser: argparse.ArgumentParser, batch: int = 8) -> None:
    """GRAPH, ``--batch`` and ``--dim``: what every command that reads a graph takes."""
    parser.add_argument("graph", metavar="GRAPH", help="graph file: .yaml, .yml, .json or .onnx")
    parser.add_argument("--batch", type=positive_int, default=batch,
                        help=f"size for every dynamic (named or null) input dim (default {batch})")
    parser.add_argument("--dim", type=dim_assignment, action="append", default=[], metavar="NAME=SIZE",
                        help="size for one named dim, overriding --batch (repeatable)")


def add_sanitizer_argument(parser: argparse.ArgumentParser, default: bool | None = None) -> None:
    """``--sanitizer/--no-sanitizer``: what every command that opens a simulated device takes.

    ``default`` None leaves the choice to the simulator (on, unless ``ACLPIPE_SANITIZER=0``), so
    that both flags change something whatever the environment says.
    """
    when = "on, unless $ACLPIPE_SANITIZER=0" if default is None else "on" if default else "off"
    parser.add_argument("--sanitizer", action=argparse.BooleanOptionalAction, default=default,
                        help=f"sim: check every device access for happens-before ordering (default: {when})")


def sanitizer_option(args: argparse.Namespace) -> dict[str, bool]:
    """The ``sanitizer=`` device option ``--sanitizer``/``--no-sanitizer`` asked for; none when
    neither was given and the command leaves it to the simulator."""
    return {} if args.sanitizer is None else {"sanitizer": bool(args.sanitizer)}


def add_command(subparsers: Any, name: str, help_text: str, configure: Callable[[argparse.ArgumentParser], None],
                run: Callable[..., int]) -> argparse.ArgumentParser:
    """Add one subcommand to an argparse subparsers object: its parser (``help_text`` as help and
    description), the arguments ``configure`` adds, and ``run`` as ``args.run``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(name, help=help_text, description=help_text)
    configure(parser)
    parser.set_defaults(run=run)
    return parser


# -- graphs --------------------------------------------------------------------------------------------
def find_load_onnx() -> Callable[[Any], Graph] | None:
    """``aclpipe.load_onnx`` when this version has it (and ``onnx`` is installed), else None."""
    import aclpipe

    try:
        loader = getattr(aclpipe, "load_onnx", None)
    except ImportError:  # aclpipe has the importer, but the onnx extra is not installed
        return None
    if loader is not None:
        return loader  # type: ignore[no-any-return]
    import importlib

    for module in ("aclpipe.onnx", "aclpipe.onnx.importer"):
        try:
            loader = getattr(importlib.import_module(module), "load_onnx", None)
        except ImportError:  # onnx not installed, or no importer in this version
            return None
        if loader is not None:
            return loader  # type: ignore[no-any-return]
    return None


def load_any_graph(path_text: str) -> Graph:
    """Read a YAML/JSON graph file or an ONNX model; a clear :class:`CommandError` otherwise."""
    path = Path(path_text)
    if not path.exists():
        raise CommandError(f"graph file {path_text!r} not found")
    if not path.is_file():
        raise CommandError(f"{path_text!r} is not a file")
    suffix = path.suffix.lower()
    if suffix not in GRAPH_SUFFIXES:
        raise CommandError(f"{path_text!r}: unknown graph file type {suffix or '(none)'!r}; "
                           f"expected {', '.join(GRAPH_SUFFIXES)}")
    if suffix != ".onnx":
        return load_graph(path)
    loader = find_load_onnx()
    if loader is None:
        raise CommandError(f"{path_text!r}: reading ONNX models needs aclpipe.load_onnx and the onnx "
                           "package (pip install 'aclpipe[onnx]'); this installation has no ONNX importer")
    try:
        return loader(path)
    except (AclpipeError, ValueError, TypeError, NotImplementedError):
        raise
    except Exception as error:  # onnx's own parse errors: one line, not a traceback
        raise CommandError(f"{path_text!r}: cannot read the ONNX model: {_one_line(error)}") from error


def bind_shapes(graph: Graph, batch: int, dims: Mapping[str, int] | None = None) -> dict[str, tuple[int, ...]]:
    """Concrete input shapes: named dims from ``dims``, every other dynamic dim ``batch``."""
    dims = dict(dims or {})
    known = {d for spec in graph.inputs.values() for d in spec.shape if isinstance(d, str)}
    unknown = sorted(set(dims) - known)
    if unknown:
        raise CommandError(f"--dim {', '.join(unknown)}: graph {graph.name!r} has no dim of that name "
                           f"(its named dims: {', '.join(sorted(known)) or 'none'})")
    if not graph.inputs:
        raise CommandError(f"graph {graph.name!r} has no inputs: nothing to feed it")
    return {name: tuple(d if isinstance(d, int) else dims.get(d, batch) if isinstance(d, str) else batch
                        for d in spec.shape) for name, spec in graph.inputs.items()}


def load_graph_arguments(args: argparse.Namespace) -> tuple[Graph, dict[str, tuple[int, ...]], BoundGraph]:
    """The graph GRAPH names, its input shapes from ``--batch`` and ``--dim`` (the arguments
    :func:`add_graph_arguments` declares), and the graph bound to them: shape errors surface
    here, as one line, before a command opens a device or runs anything."""
    graph = load_any_graph(args.graph)
    shapes = bind_shapes(graph, args.batch, dict(args.dim))
    return graph, shapes, graph.bind(**shapes)


def bind_inputs(graph: Graph, batch: int, dims: Mapping[str, int], given: Mapping[str, np.ndarray]
                ) -> tuple[dict[str, tuple[int, ...]], dict[str, Any], BoundGraph]:
    """Input shapes (from ``--batch`` and ``--dim``; arrays ``--input`` gave fix their own shapes
    and the named dims they carry), what ``graph.bind`` and ``Pipeline.prepare`` take for them
    (the shapes, with the given inputs as their arrays), and the bound graph.

    A host value (an input whose contents decide the graph, see :mod:`aclpipe.graph.signature`:
    an ONNX Reshape's shape, say) is taken as the array that was given, not as its shape; one that
    was not given is a usage error naming ``--input``, since random contents would decide the graph.
    """
    dims = dict(dims)
    for input_name, array in given.items():
        for dim, size in zip(graph.inputs[input_name].shape, array.shape):
            if isinstance(dim, str):
                dims.setdefault(dim, int(size))
    shapes = bind_shapes(graph, batch, dims)
    shapes.update({input_name: tuple(array.shape) for input_name, array in given.items()})
    arguments = {**shapes, **given}  # given inputs as arrays: a host value's contents are its part of the signature
    try:
        return shapes, arguments, graph.bind(**arguments)
    except GraphError:
        missing = sorted(graph.host_inputs - given.keys())
        if not missing:
            raise
        reasons = getattr(graph, "host_reasons", {})
        needs = "; ".join(f"{name}: {reasons.get(name, 'read on the host')}" for name in missing)
        which = (f"input {missing[0]!r} is a host value" if len(missing) == 1
                 else f"inputs {', '.join(map(repr, missing))} are host values")
        raise CommandError(f"{which} of {graph.name!r}, whose contents decide the graph ({needs}): give "
                           f"{'it' if len(missing) == 1 else 'them'} with --input {missing[0]}=FILE.npy or in "
                           "an .npz") from None


def open_device_for(spec: str | None, **options: Any) -> Any:
    """Open the device ``--device`` names; a name that does not exist is a usage error (exit 2)."""
    from ..runtime import open_device

    try:
        return open_device(spec, **options)
    except (BackendError, LookupError, ValueError) as error:
        raise CommandError(f"--device {spec or '(default)'}: {_one_line(error)}") from error


def random_inputs(graph: Graph, shapes: Mapping[str, tuple[int, ...]], rng: np.random.Generator,
                  names: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """Seeded inputs (for ``names``, default every input): N(0, 1) for floats, 0 or 1 for
    integers (valid indices for any table), random booleans."""
    arrays = {}
    wanted = set(graph.inputs if names is None else names)
    for name, spec in graph.inputs.items():
        if name not in wanted:
            continue
        dtype = as_dtype(spec.dtype).numpy
        shape = shapes[name]
        if np.issubdtype(dtype, np.bool_):
            arrays[name] = rng.random(shape) < 0.5
        elif np.issubdtype(dtype, np.integer):
            arrays[name] = rng.integers(0, 2, shape).astype(dtype)
        else:
            arrays[name] = rng.standard_normal(shape).astype(dtype)
    return arrays


def describe_shapes(shapes: Mapping[str, tuple[int, ...]]) -> str:
    """``x[4, 784], y[4]``: input shapes for one line of output."""
    return ", ".join(f"{name}[{', '.join(map(str, shape))}]" for name, shape in shapes.items())


def say(console: Any, text: str, style: str | None = None) -> None:
    """Print plain text: no markup, no highlighting, no wrapping (paths and plans stay intact)."""
    console.print(text, style=style, markup=False, highlight=False, soft_wrap=True)


def output_console(console: Any | None) -> Any:
    """``console``, or a new rich Console; when the output is not a terminal (a file, a pipe) it is
    widened to 120 columns, since nothing then limits the width and tables read better unwrapped."""
    if console is None:
        from rich.console import Console

        console = Console()
    if not console.is_terminal and console.width < 120:
        console.width = 120
    return console
