"""Check the binding's cffi declarations against real CANN headers with a C++ compiler.

``declarations_source(include_dirs)`` writes a translation unit that includes the CANN headers
and, for every prototype the binding declares (``RUNTIME_CDEF``, ``PEER_CDEF``), binds the
header's function to a pointer of the binding's type (a different parameter or return type is
a compile error in C++, where an enum is not an ``int``), and ``static_assert``s every flag,
enum value and status code the binding names against the header's value.  The binding's types
are named as the headers name them (``aclrtMemcpyKind``, ``aclrtStream``), so the check reads
them through the headers, never through the binding's ``typedef int`` stand-ins.

Where the headers come from: ``$ASCEND_TOOLKIT_HOME/include`` when CANN is installed, else the
``torch_npu`` wheel's copy (``torch_npu/include/third_party/acl/inc``), fetched with
``pip download --no-deps`` into a cache directory.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["TORCH_NPU", "cond_declarations_source", "declarations_source", "fake_codes", "has_cond_declarations",
           "headers_from_toolkit", "headers_from_wheel",
           "prototypes", "run_check", "runtime_codes"]

#: The wheel whose headers the first pass compared against (issue 24).
TORCH_NPU = "torch-npu==2.14.0"
_WHEEL_PREFIX = "torch_npu/include/third_party/acl/inc/"
_PROTOTYPE = re.compile(r"^\s*(?P<ret>[\w\s\*]+?)\s*\b(?P<name>acl\w+)\s*\((?P<params>[^;]*)\)\s*;", re.M | re.S)
#: Codes aclpipe.errors knows that are not the runtime's (opbase's aclnn codes, this project's own).
_NOT_RUNTIME = ("ACLNN_", "ACL_SUCCESS")


def prototypes(cdef: str) -> list[tuple[str, str, str]]:
    """``(return type, name, parameters)`` of each function declared in ``cdef``."""
    text = re.sub(r"/\*.*?\*/", "", cdef, flags=re.S)
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("typedef"))
    return [(" ".join(m["ret"].split()), m["name"], " ".join(m["params"].split()))
            for m in _PROTOTYPE.finditer(text)]


def declarations_source(functions: Iterable[tuple[str, str, str]], constants: dict[str, int]) -> str:
    lines = ["#include <cstddef>", "#include <cstdint>", '#include "acl/acl.h"', '#include "acl/acl_rt.h"',
             '#include "acl/acl_mdl.h"', '#include "acl/error_codes/rt_error_codes.h"', ""]
    for ret, name, params in functions:
        lines.append(f"static {ret} (*const binding_{name})({params}) = &{name};  // {name}")
    for name, value in sorted(constants.items()):
        lines.append(f'static_assert({name} == {value}, "{name}: the binding says {value}");')
    return "\n".join(lines) + "\n"


def headers_from_toolkit() -> Path | None:
    """``$ASCEND_TOOLKIT_HOME/include`` when it holds ``acl/acl_rt.h``."""
    home = os.environ.get("ASCEND_TOOLKIT_HOME")
    if home and (Path(home) / "include" / "acl" / "acl_rt.h").is_file():
        return Path(home) / "include"
    return None


def headers_from_wheel(cache: Path, *, download: bool, timeout: float = 300) -> Path | None:
    """The torch_npu wheel's CANN headers, extracted under ``cache`` (downloaded first when
    ``download`` and not cached yet); None when they cannot be had."""
    include = cache / "include"
    if (include / "acl" / "acl_rt.h").is_file():
        return include
    wheels = sorted(cache.glob("torch_npu-*.whl"))
    if not wheels and download:
        cache.mkdir(parents=True, exist_ok=True)
        result = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                                 "--dest", str(cache), TORCH_NPU], capture_output=True, text=True, timeout=timeout,
                                check=False)
        if result.returncode != 0:
            return None
        wheels = sorted(cache.glob("torch_npu-*.whl"))
    if not wheels:
        return None
    with zipfile.ZipFile(wheels[-1]) as wheel:
        for member in wheel.namelist():
            if member.startswith(_WHEEL_PREFIX + "acl/") and member.endswith(".h"):
                target = include / member[len(_WHEEL_PREFIX):]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(wheel.read(member))
    return include if (include / "acl" / "acl_rt.h").is_file() else None


def run_check(compiler: str, include: Path, source: str, workdir: Path) -> subprocess.CompletedProcess[str]:
    """Compile ``source`` against ``include`` (syntax only); a mismatch is a compile error."""
    path = workdir / "declarations.cpp"
    path.write_text(source)
    return subprocess.run([compiler, "-std=c++17", "-fsyntax-only", f"-I{include}", str(path)],
                          capture_output=True, text=True, check=False)


def fake_codes(header: Path) -> dict[str, int]:
    """The runtime status codes the fake CANN defines (``fake_cann.h``), name -> value."""
    found = re.findall(r"^\s*(ACL_ERROR_\w+)\s*=\s*(\d+),", header.read_text(), flags=re.M)
    return {name: int(value) for name, value in found}


def runtime_codes(table: dict[int, Any]) -> dict[str, int]:
    """The runtime's codes among aclpipe.errors.CODE_TABLE (name -> code)."""
    names = {entry.name: code for code, entry in table.items()}
    return {name: code for name, code in names.items() if not name.startswith(_NOT_RUNTIME)}


# -- the stream-ordered allocator (acl_rt_memory_soma.h) --------------------------------------------
def has_mempool_header(include: Path) -> bool:
    """Whether ``include`` has ``acl/acl_rt_memory_soma.h`` (CANN releases before the stream-ordered
    allocator do not: the binding then resolves none of its calls)."""
    return (include / "acl" / "acl_rt_memory_soma.h").is_file()


def mempool_declarations_source(functions: Iterable[tuple[str, str, str]], constants: dict[str, int],
                                layout: dict[str, int]) -> str:
    """:func:`declarations_source` for ``acl_rt_memory_soma.h``: its prototypes and enum values, and
    ``layout`` (``sizeof``/``offsetof`` expressions of the header's types) against the binding's."""
    lines = ["#include <cstddef>", "#include <cstdint>", '#include "acl/acl_rt.h"',
             '#include "acl/acl_rt_memory_soma.h"', ""]
    for ret, name, params in functions:
        lines.append(f"static {ret} (*const binding_{name})({params}) = &{name};  // {name}")
    for name, value in sorted({**constants, **layout}.items()):
        lines.append(f'static_assert({name} == {value}, "{name}: the binding says {value}");')
    return "\n".join(lines) + "\n"


# -- conditional tasks in captured models (acl_rt.h, a trial feature) -------------------------------
def has_cond_declarations(include: Path) -> bool:
    """Whether ``include``'s ``acl/acl_rt.h`` declares ``aclmdlRICondHandleCreate`` (CANN releases
    before conditional tasks do not: the binding then resolves none of their calls)."""
    header = include / "acl" / "acl_rt.h"
    return header.is_file() and "aclmdlRICondHandleCreate" in header.read_text(errors="replace")


def cond_declarations_source(functions: Iterable[tuple[str, str, str]], constants: dict[str, int],
                             layout: dict[str, int]) -> str:
    """:func:`declarations_source` for the ``aclmdlRICond*`` calls: their prototypes, enum values
    and ``layout`` (``sizeof``/``offsetof`` of ``aclmdlRICondTaskParams``) against the binding's."""
    lines = ["#include <cstddef>", "#include <cstdint>", '#include "acl/acl_rt.h"', ""]
    for ret, name, params in functions:
        lines.append(f"static {ret} (*const binding_{name})({params}) = &{name};  // {name}")
    for name, value in sorted({**constants, **layout}.items()):
        lines.append(f'static_assert({name} == {value}, "{name}: the binding says {value}");')
    return "\n".join(lines) + "\n"
