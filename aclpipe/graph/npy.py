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

The same bounded reading serves every array aclpipe takes from outside: :func:`read_array`
(a ``.npy`` stream of known size: the CLI's ``--input`` files, Serve's request bodies) and
:class:`NpzArchive` (``.npz``: member names are listed and checked before any member is
inflated, a repeated name is refused, and a member is read only within the size the zip
directory declares for it, checked against the limits first).  One set of limits,
:class:`~aclpipe.graph.limits.LoadLimits`, bounds them all.
"""

from __future__ import annotations

import os
import stat
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO, Self

import numpy as np

from .limits import DEFAULT_LIMITS, LoadLimits

__all__ = ["NpzArchive", "read_array", "read_npy"]

_NPY_MAGIC = b"\x93NUMPY"
_MAX_HEADER = 10_000


def _inside(path: str | Path, root: Path) -> bool:
    return Path(os.path.realpath(path)).is_relative_to(root)


#: Makes the error for one refusal from its text (a GraphError for graph files, an InputFormatError for inputs).
Problem = Callable[[str], Exception]


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
        return read_array(file, info.st_size, f"file {entry!r}", max_bytes, problem,
                          limit_name="per constant (LoadLimits.max_constant_bytes)")


def read_array(file: IO[bytes], size: int, what: str, max_bytes: int, problem: Problem, *,
               limit_name: str = "per array (LoadLimits.max_constant_bytes)") -> np.ndarray:
    """The ``.npy`` array ``file`` holds in its next ``size`` bytes, its header read and checked
    against ``size`` and ``max_bytes`` before any of its data is allocated or read.

    ``what`` names the file in errors (``"file 'x.npy'"``); ``problem(text)`` makes each error.
    """
    try:
        start = file.tell()
        head = file.read(len(_NPY_MAGIC))
    except _READ_ERRORS as error:
        raise problem(f"cannot read {what}: {_reason(error)}") from None
    if head != _NPY_MAGIC:
        raise problem(f"{what} is not a .npy array: {_what(head)}; store each array with numpy.save")
    try:
        major, minor = file.read(2)
        reader = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
        if major not in (1, 2, 3) or minor != 0:
            raise ValueError(f"unknown .npy format version {major}.{minor}")
        shape, fortran_order, dtype = reader(file, max_header_size=_MAX_HEADER)
    except (ValueError, TypeError, SyntaxError, *_READ_ERRORS) as error:
        raise problem(f"cannot read {what} as a .npy array: bad header ({_reason(error)})") from None
    if dtype.hasobject:
        raise problem(f"{what} holds Python objects (pickled data), which is never loaded: store numbers only")
    if dtype.itemsize == 0:
        raise problem(f"{what} holds elements of zero bytes ({dtype}): store numbers")
    count = int(np.prod(shape, dtype=object))
    nbytes = count * dtype.itemsize
    if nbytes > max_bytes:
        raise problem(f"{what} holds {list(shape)} {dtype} = {nbytes} bytes, over the limit of {max_bytes} "
                      f"bytes {limit_name}")
    data_size = size - (file.tell() - start)
    if nbytes > data_size:
        raise problem(f"{what} is truncated: its header declares {nbytes} bytes of data, the file has {data_size}")
    data = _read_exactly(file, nbytes, what, problem)
    array = np.frombuffer(data, dtype=dtype, count=count)
    return array.reshape(shape[::-1]).transpose() if fortran_order else array.reshape(shape)


def _read_exactly(file: IO[bytes], nbytes: int, what: str, problem: Problem) -> bytearray:
    data = bytearray(nbytes)  # writable, so the array made over it is too
    view, done = memoryview(data), 0
    try:
        while done < nbytes:
            got = file.readinto(view[done:])  # type: ignore[attr-defined]
            if not got:
                raise problem(f"{what} is truncated: its header declares {nbytes} bytes of data, it holds {done}")
            done += got
    except _READ_ERRORS as error:
        raise problem(f"cannot read {what}: {_reason(error)}") from None
    return data


#: Failures of reading a file or a zip member: I/O, a damaged zip (bad CRC, truncated), bad deflate data.
_READ_ERRORS = (OSError, EOFError, zipfile.BadZipFile, zlib.error)
#: Failures of opening a malformed zip archive or member (also an unknown compression, encryption).
_ZIP_ERRORS = (zipfile.LargeZipFile, ValueError, NotImplementedError, RuntimeError, *_READ_ERRORS)


class NpzArchive:
    """The arrays of an ``.npz`` archive (``numpy.savez``), read one by one within limits.

    Opening reads the zip directory only: :attr:`names` (each member's name without
    ``.npy``) can then be checked before any member is inflated; a name given twice is
    refused.  :meth:`read` reads one member as :func:`read_array` does, within the size the
    directory declares for it, and counts it against ``limits.max_total_constant_bytes``.

    Parameters
    ----------
    file:
        The archive, open for reading and seekable (a file, ``io.BytesIO``).
    what:
        Names the archive in errors (``"--input batch.npz"``, ``"the request body"``).
    problem:
        Makes the exception for each refusal from its text.
    limits:
        ``max_constant_bytes`` bounds each array, ``max_total_constant_bytes`` all of them.
    """

    def __init__(self, file: IO[bytes], what: str, problem: Problem, limits: LoadLimits = DEFAULT_LIMITS):
        self.what = what
        self.problem = problem
        self.limits = limits
        self.read_bytes = 0
        try:
            self._zip = zipfile.ZipFile(file)
        except _ZIP_ERRORS as error:
            raise problem(f"{what} is not a readable .npz archive: {_reason(error)}") from None
        self._members: dict[str, zipfile.ZipInfo] = {}
        for info in self._zip.infolist():
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            if name in self._members:
                self._zip.close()
                raise problem(f"{what} holds two members named {name!r}; an archive must name each array once")
            self._members[name] = info

    @property
    def names(self) -> list[str]:
        """The arrays' names, in archive order."""
        return list(self._members)

    def read(self, name: str) -> np.ndarray:
        """The array ``name`` (one of :attr:`names`)."""
        info = self._members[name]
        what = f"{self.what}: member {name!r}"
        limit = self.limits.max_constant_bytes
        if info.file_size > limit + _MAX_HEADER + 16:  # the directory's word, before inflating anything
            raise self.problem(f"{what} inflates to {info.file_size} bytes, over the limit of {limit} bytes per "
                               "array (LoadLimits.max_constant_bytes)")
        left = self.limits.max_total_constant_bytes - self.read_bytes
        budget, limit_name = ((limit, "per array (LoadLimits.max_constant_bytes)") if limit <= left else
                              (left, f"left of {self.limits.max_total_constant_bytes} for all arrays together "
                                     "(LoadLimits.max_total_constant_bytes)"))
        try:
            member = self._zip.open(info)
        except _ZIP_ERRORS as error:
            raise self.problem(f"cannot read {what}: {_reason(error)}") from None
        with member:
            array = read_array(member, info.file_size, what, budget, self.problem, limit_name=limit_name)
            try:
                trailing = member.read(1)  # none: at the member's end, where zipfile checks its CRC
            except _READ_ERRORS as error:
                raise self.problem(f"cannot read {what}: {_reason(error)}") from None
        if trailing:
            raise self.problem(f"{what} holds bytes after its array; the archive is damaged")
        self.read_bytes += array.nbytes
        return array

    def close(self) -> None:
        self._zip.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


def _reason(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _what(head: bytes) -> str:
    if head.startswith(b"PK\x03\x04"):
        return "it is a zip archive (an .npz file renamed?)"
    if head[:1] == b"\x80":
        return "it holds pickled Python data, which aclpipe never loads"
    return "it does not start with the NUMPY magic"
