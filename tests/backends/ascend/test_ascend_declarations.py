"""The binding's cffi declarations against the real CANN headers (issue 24's declarations check).

Every prototype the binding declares, every flag and enum value it names, every runtime code
``aclpipe.errors`` knows and every code the fake CANN defines must match the headers, compiled
with a C++ compiler (see ``tests/fake_cann/declarations.py``).  The headers come from
``$ASCEND_TOOLKIT_HOME/include``, else from the ``torch-npu`` wheel in a cache directory
(``ACLPIPE_CANN_HEADERS_CACHE``, default ``~/.cache/aclpipe/cann-headers``), downloaded with
``pip download --no-deps`` only when ``ACLPIPE_FETCH_CANN_HEADERS=1`` (CI sets it).  Without a
compiler or headers the tests skip and say why.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from aclpipe.backends.ascend import cdefs
from aclpipe.errors import CODE_TABLE

FAKE_DIR = Path(__file__).resolve().parents[2] / "fake_cann"


def _module() -> Any:
    spec = importlib.util.spec_from_file_location("fake_cann_declarations", FAKE_DIR / "declarations.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


declarations = _module()


def _binding_functions() -> list[tuple[str, str, str]]:
    return (declarations.prototypes(cdefs.RUNTIME_CDEF) + declarations.prototypes(cdefs.PEER_CDEF)
            + declarations.prototypes(cdefs.SYNC_CDEF))


def _binding_constants() -> dict[str, int]:
    return {name: value for name, value in vars(cdefs).items() if name.startswith("ACL_") and isinstance(value, int)}


def test_the_binding_declares_what_the_headers_declare(compiler: str, headers: Path, tmp_path: Path):
    functions = _binding_functions()
    constants = {**_binding_constants(), **declarations.runtime_codes(CODE_TABLE),
                 **declarations.fake_codes(FAKE_DIR / "fake_cann.h")}
    assert len(functions) >= 51 and len(constants) > 60
    assert {"aclrtSetOpWaitTimeout", "aclrtMemcpy", "aclrtMemset"} <= {name for _, name, _ in functions}
    result = declarations.run_check(compiler, headers, declarations.declarations_source(functions, constants), tmp_path)
    assert result.returncode == 0, f"the binding's declarations differ from {headers}:\n{result.stderr[-6000:]}"


def test_the_check_catches_a_wrong_parameter_type_and_a_wrong_code(compiler: str, headers: Path, tmp_path: Path):
    wrong = [("aclError", "aclrtProcessReport", "int64_t timeout"),
             ("aclError", "aclrtMemcpyAsync", "void *dst, size_t destMax, const void *src, size_t count, int kind, "
                                              "aclrtStream stream")]
    source = declarations.declarations_source(wrong, {"ACL_ERROR_RT_REPORT_TIMEOUT": 507013})
    result = declarations.run_check(compiler, headers, source, tmp_path)
    assert result.returncode != 0
    for name in ("binding_aclrtProcessReport", "binding_aclrtMemcpyAsync", "ACL_ERROR_RT_REPORT_TIMEOUT"):
        assert name in result.stderr
