"""Finding and loading the CANN libraries, ``aclInit``/``aclFinalize``, and error reporting.

The directory comes from ``ACLPIPE_ASCEND_LIB``, else ``$ASCEND_HOME_PATH/lib64``, else
``$ASCEND_TOOLKIT_HOME/lib64`` (both set by CANN's ``set_env.sh``).  The operator library is
found the way op-plugin finds it (reference/acl_api.md section 3, "Which library exports
what"): every per-repo ``libopapi_*.so`` in the directory if there is any, else the
all-in-one ``libopapi.so``; never both, which the CANN docs forbid.

One :class:`CannLibrary` exists per directory and process.  It counts its open devices:
the first calls ``aclInit`` (an ``ACL_ERROR_REPEAT_INITIALIZE`` means someone else, e.g.
torch_npu, initialized ACL, and then aclpipe never finalizes it), the last calls
``aclFinalize``.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from ...errors import BackendError, error_from_code
from .cdefs import (
    ACL_ERROR_REPEAT_INITIALIZE,
    NNOPBASE_OPTIONAL,
    NNOPBASE_REQUIRED,
    RUNTIME_CAPTURE,
    RUNTIME_COND,
    RUNTIME_MEMPOOL,
    RUNTIME_OP_TIMEOUT,
    RUNTIME_OPTIONAL,
    RUNTIME_PEER,
    RUNTIME_REQUIRED,
    RUNTIME_RULES,
    ffi,
)

__all__ = ["INSTALL_HINT", "CannLibrary", "library_directory", "load_library", "opapi_libraries"]

INSTALL_HINT = ("install the CANN toolkit and run its set_env.sh (which sets ASCEND_HOME_PATH), "
                "or set ACLPIPE_ASCEND_LIB to the directory holding libascendcl.so, libnnopbase.so "
                "and libopapi*.so")

_LIBRARIES: dict[Path, CannLibrary] = {}
_LOAD_LOCK = threading.Lock()


def library_directory() -> Path:
    """The directory to load CANN from; :class:`LookupError` when nothing says where."""
    explicit = os.environ.get("ACLPIPE_ASCEND_LIB")
    if explicit:
        return Path(explicit).expanduser()
    for variable in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        home = os.environ.get(variable)
        if home:
            return Path(home).expanduser() / "lib64"
    raise LookupError(f"the ascend backend cannot find CANN: none of ACLPIPE_ASCEND_LIB, ASCEND_HOME_PATH, "
                      f"ASCEND_TOOLKIT_HOME is set; {INSTALL_HINT}")


def opapi_libraries(directory: Path) -> list[Path]:
    """The operator libraries op-plugin would load from ``directory`` (see the module doc)."""
    per_repo = sorted(path for path in directory.glob("libopapi_*.so") if path.is_file())
    if per_repo:
        return per_repo
    legacy = directory / "libopapi.so"
    return [legacy] if legacy.is_file() else []


def _open(path: Path) -> Any:
    try:
        return ffi.dlopen(str(path))
    except OSError as error:
        raise LookupError(f"the ascend backend could not load {path}: {error}; its dependencies are found through "
                          f"LD_LIBRARY_PATH, which CANN's set_env.sh sets; {INSTALL_HINT}") from None


def _missing(library: Any, names: tuple[str, ...]) -> list[str]:
    return [name for name in names if not hasattr(library, name)]


class CannLibrary:
    """The loaded ``libascendcl``, ``libnnopbase`` and ``libopapi*`` of one directory."""

    def __init__(self, directory: Path):
        self.directory = directory
        files = {"runtime": directory / "libascendcl.so", "nnopbase": directory / "libnnopbase.so"}
        absent = [str(path) for path in files.values() if not path.is_file()]
        self.opapi_paths = opapi_libraries(directory)
        if not self.opapi_paths:
            absent.append(str(directory / "libopapi.so (or libopapi_*.so)"))
        if absent:
            raise LookupError(f"the ascend backend found no {', '.join(absent)}; {INSTALL_HINT}")
        self.runtime = _open(files["runtime"])
        self.nnopbase = _open(files["nnopbase"])
        self.opapi = [_open(path) for path in self.opapi_paths]
        missing = _missing(self.runtime, RUNTIME_REQUIRED) + _missing(self.nnopbase, NNOPBASE_REQUIRED)
        if missing:
            raise LookupError(f"the CANN libraries in {directory} lack {', '.join(missing)}: this CANN release is "
                              f"older than the API aclpipe binds (aclpipe/backends/ascend/cdefs.py); {INSTALL_HINT}")
        self.has_launch_host_func = hasattr(self.runtime, RUNTIME_OPTIONAL[0])
        self.has_event_sync_timeout = hasattr(self.runtime, RUNTIME_OPTIONAL[1])
        self.has_stream_sync_timeout = hasattr(self.runtime, RUNTIME_OPTIONAL[2])
        self.has_repeatable_executors = not _missing(self.nnopbase, NNOPBASE_OPTIONAL)
        self.has_reusable_events = hasattr(self.runtime, "aclrtCreateEventExWithFlag")
        self.has_event_reset = hasattr(self.runtime, "aclrtResetEvent")
        self.has_failure_mode = hasattr(self.runtime, "aclrtSetStreamFailureMode")
        self.has_stream_abort = hasattr(self.runtime, "aclrtStreamAbort")
        self.has_capture = not _missing(self.runtime, RUNTIME_CAPTURE)
        self.has_soc_name = hasattr(self.runtime, RUNTIME_RULES[-1])
        self.has_peer_access = not _missing(self.runtime, RUNTIME_PEER)
        self.has_op_execute_timeout = hasattr(self.runtime, RUNTIME_OP_TIMEOUT[0])
        self.has_op_execute_timeout_v2 = hasattr(self.runtime, RUNTIME_OP_TIMEOUT[1])
        #: The stream-ordered allocator (acl_rt_memory_soma.h): all seven calls, or none is used.
        self.has_mem_pool = not _missing(self.runtime, RUNTIME_MEMPOOL)
        #: Conditional tasks in captured models (aclmdlRICond*, acl_rt.h): all four calls, or none is used.
        self.has_conditional_models = self.has_capture and not _missing(self.runtime, RUNTIME_COND)
        self._lock = threading.Lock()
        self._users = 0
        self._owns_init = False

    # -- init / finalize ---------------------------------------------------------------------
    def acquire(self) -> None:
        """Count one more user; the first one initializes ACL."""
        with self._lock:
            if self._users == 0:
                code = self.runtime.aclInit(ffi.NULL)
                if code not in (0, ACL_ERROR_REPEAT_INITIALIZE):
                    raise self.error(code, "aclInit")
                self._owns_init = code == 0
            self._users += 1

    def release(self) -> None:
        """Count one user less; the last one finalizes ACL if aclpipe initialized it."""
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._owns_init:
                self._owns_init = False
                self.check(self.runtime.aclFinalize(), "aclFinalize")

    # -- symbols -----------------------------------------------------------------------------
    def opapi_function(self, name: str) -> Any | None:
        """``name`` from the first operator library that exports it, else None."""
        for library in self.opapi:
            function = getattr(library, name, None)
            if function is not None:
                return function
        return None

    # -- errors ------------------------------------------------------------------------------
    def recent_message(self) -> str:
        """``aclGetRecentErrMsg()`` of the calling thread ("" when it has none: it may be NULL)."""
        message = self.runtime.aclGetRecentErrMsg()
        if message == ffi.NULL:
            return ""
        text = ffi.string(message)
        return (text.decode("utf-8", errors="replace") if isinstance(text, bytes) else str(text)).strip()

    def failure(self, what: str) -> str:
        """``what`` and the runtime's message about it: read right after the failing call."""
        message = self.recent_message()
        return f"{what}: {message}" if message else f"{what} failed"

    def error(self, code: int, what: str, context: dict[str, Any] | None = None, **fields: Any) -> BackendError:
        """The exception for status ``code`` returned by the call ``what``."""
        return error_from_code(int(code), self.failure(what), context, **fields)

    def check(self, code: int, what: str, context: dict[str, Any] | None = None, **fields: Any) -> None:
        """Raise the exception for ``code`` unless it is 0 (ACL_SUCCESS)."""
        if code:
            raise self.error(code, what, context, **fields)

    def __repr__(self) -> str:
        return f"<CannLibrary {self.directory}>"


def load_library(directory: Path | None = None) -> CannLibrary:
    """The (cached) libraries of ``directory`` (default: :func:`library_directory`)."""
    directory = (directory or library_directory()).resolve()
    with _LOAD_LOCK:
        library = _LIBRARIES.get(directory)
        if library is None:
            if not directory.is_dir():
                raise LookupError(f"the ascend backend's library directory {directory} does not exist; "
                                  f"{INSTALL_HINT}")
            library = _LIBRARIES[directory] = CannLibrary(directory)
        return library
