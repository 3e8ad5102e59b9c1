"""``.npy`` initialisers of graph files, read only from one folder and only as plain arrays.

A graph file names its weight files; a file from elsewhere must not make aclpipe read
``/etc/passwd``, follow a symlink out of its folder, or reveal whether some other path exists.
So every entry is resolved (``..`` and symlinks included) against a *root* (the graph file's
folder, or the ``base_dir`` the caller passes) and refused with one message, which echoes
neither the entry nor where it leads, unless it lands inside the root.  The opened file is
checked again through ``/proc/self/fd`` where the system has it, so a path swapped for a
symlink between the check and the open is caught too.

Then the file must be a ``.npy`` array (not an ``.npz`` archive or a pickle renamed, not an
array of Python objects), whole, and within :class:`~aclpipe.graph.limits.LoadLimits`'s
``max_constant_bytes`` as its header declares it, before its data is read.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import IO

import numpy as np

from ..errors import GraphError

__all__ = ["read_npy"]

_NPY_MAGIC = b"\x93NUMPY"
_MAX_HEADER = 10_000


def _inside(path: str | Path, root: Path) -> bool:
    return Path(os.path.realpath(path)).is_relative_to(root)


Problem = Callable[[str], GraphError]


def read_npy(entry: str, folder: Path, root: Path, max_bytes: int, problem: Problem) -> np.ndarray:
    """The array stored in the ``.npy`` file ``entry``, a path relative to ``folder`` that must
    lead into ``root`` once resolved.

    ``problem(text)`` makes the :class:`GraphError` for each refusal; the text names the entry
    only when it lies inside ``root``.
    """
    root = Path(os.path.realpath(root))
    outside = problem(f"its file lies outside {root} once '..' and symlinks are resolved; .npy files must lie in "
                      "the graph file's folder, or pass base_dir= to load_graph to allow another folder")
    target = Path(os.path.realpath(folder)) / entry
    if "\0" in entry or not _inside(target, root):
        raise outside
    resolved = os.path.realpath(target)
    try:
        descriptor = os.open(resolved, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise problem(f"file {entry!r} not found in {root}") from None
    except OSError as error:
        raise problem(f"cannot open {entry!r}: {error.strerror}") from None
    try:
        link = f"/proc/self/fd/{descriptor}"
        if os.path.exists(link) and not _inside(os.readlink(link), root):
            raise outside
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise problem(f"file {entry!r} is not a regular file")
    except BaseException:
        os.close(descriptor)
        raise
    with os.fdopen(descriptor, "rb") as file:
        return _read_array(file, entry, info.st_size, max_bytes, problem)


def _read_array(file: IO[bytes], entry: str, file_size: int, max_bytes: int, problem: Problem) -> np.ndarray:
    head = file.read(len(_NPY_MAGIC))
    if head != _NPY_MAGIC:
        raise problem(f"file {entry!r} is not a .npy array: {_what(head)}; store each constant with numpy.save")
    file.seek(0)
    try:
        version = np.lib.format.read_magic(file)
        reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = reader(file, max_header_size=_MAX_HEADER)
    except (ValueError, OSError, EOFError) as error:
        raise problem(f"cannot read {entry!r} as a .npy array: bad header ({error})") from None
    if dtype.hasobject:
        raise problem(f"file {entry!r} holds Python objects (pickled data), which graph files never load: "
                      "store numbers only")
    nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if nbytes > max_bytes:
        raise problem(f"file {entry!r} holds {list(shape)} {dtype} = {nbytes} bytes, over the limit of "
                      f"{max_bytes} bytes per constant (LoadLimits.max_constant_bytes)")
    if file.tell() + nbytes > file_size:
        raise problem(f"file {entry!r} is truncated: its header declares {nbytes} bytes of data, "
                      f"the file has {file_size - file.tell()}")
    file.seek(0)
    try:
        return np.asarray(np.lib.format.read_array(file, allow_pickle=False, max_header_size=_MAX_HEADER))
    except (ValueError, OSError, EOFError) as error:
        raise problem(f"cannot read {entry!r} as a .npy array: {error}") from None


def _what(head: bytes) -> str:
    if head.startswith(b"PK\x03\x04"):
        return "it is a zip archive (an .npz file renamed?)"
    if head[:1] == b"\x80":
        return "it holds pickled Python data, which graph files never load"
    return "it does not start with the NUMPY magic"
