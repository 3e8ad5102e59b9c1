"""Fixtures: the fake CANN (tests/fake_cann) built once per session, devices opened on it, and
what the declarations checks compile with (a C++ compiler, the real CANN headers).

Two builds: one whose runtime exports ``aclrtLaunchHostFunc`` and one without it, which makes
the binding fall back to ``aclrtLaunchCallback`` and its report thread.  The fake is only ever
loaded here, through ``ACLPIPE_ASCEND_LIB`` set per test.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from cffi import FFI

import aclpipe
from aclpipe.runtime import Device

FAKE_DIR = Path(__file__).resolve().parents[2] / "fake_cann"
VARIANTS = ("launch_host_func", "callback")


def load_fake_module(name: str) -> Any:
    """``tests/fake_cann/{name}.py`` (``build``, ``declarations``): not a package, loaded by path."""
    spec = importlib.util.spec_from_file_location(f"fake_cann_{name}", FAKE_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build_module() -> Any:
    return load_fake_module("build")


@pytest.fixture(scope="session")
def fake_build() -> Any:
    """The fake CANN's build script (``build_fake_cann``, ``find_compiler``)."""
    return _build_module()


@pytest.fixture(scope="session")
def fake_declarations() -> Any:
    """The declarations check's helpers (``tests/fake_cann/declarations.py``)."""
    return load_fake_module("declarations")


@pytest.fixture(scope="session")
def compiler() -> str:
    """A C++ compiler for the declarations checks (``CXX``, else c++, g++, clang++), or skip."""
    found = next((path for name in (os.environ.get("CXX", ""), "c++", "g++", "clang++")
                  if name and (path := shutil.which(name))), None)
    if found is None:
        pytest.skip("no C++ compiler to check the declarations with (set CXX or install g++)")
    return found


@pytest.fixture(scope="session")
def headers(fake_declarations: Any) -> Path:
    """The real CANN headers: ``$ASCEND_TOOLKIT_HOME/include``, else the torch-npu wheel's in a
    cache (downloaded only with ``ACLPIPE_FETCH_CANN_HEADERS=1``), or skip saying why."""
    toolkit = fake_declarations.headers_from_toolkit()
    if toolkit is not None:
        return Path(toolkit)
    cache = Path(os.environ.get("ACLPIPE_CANN_HEADERS_CACHE", Path.home() / ".cache" / "aclpipe" / "cann-headers"))
    download = os.environ.get("ACLPIPE_FETCH_CANN_HEADERS") == "1"
    found = fake_declarations.headers_from_wheel(cache, download=download)
    if found is None:
        pytest.skip(f"no CANN headers: set ASCEND_TOOLKIT_HOME, or ACLPIPE_FETCH_CANN_HEADERS=1 to fetch the "
                    f"{fake_declarations.TORCH_NPU} wheel's into {cache}"
                    + (" (the download failed)" if download else ""))
    return Path(found)


@pytest.fixture(scope="session")
def fake_cann(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Directory of each fake build, by host-function variant."""
    build = _build_module()
    if build.find_compiler() is None:
        pytest.skip("no C compiler to build the fake CANN (set CC or install gcc)")
    root = tmp_path_factory.mktemp("fake_cann")
    with ThreadPoolExecutor(2) as pool:
        with_hostfunc = pool.submit(build.build_fake_cann, root / "with_launch_host_func")
        without = pool.submit(build.build_fake_cann, root / "without_launch_host_func", launch_host_func=False)
        return {"launch_host_func": with_hostfunc.result(), "callback": without.result()}


def _point_at(monkeypatch: pytest.MonkeyPatch, directory: Path) -> Path:
    monkeypatch.setenv("ACLPIPE_ASCEND_LIB", str(directory))
    monkeypatch.delenv("ACLPIPE_ASCEND_HOST_FUNC", raising=False)
    return directory


@pytest.fixture
def fake_lib(fake_cann: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    """ACLPIPE_ASCEND_LIB pointing at the build with aclrtLaunchHostFunc."""
    return _point_at(monkeypatch, fake_cann["launch_host_func"])


@pytest.fixture(params=VARIANTS)
def any_fake_lib(request: pytest.FixtureRequest, fake_cann: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each build in turn (host functions through aclrtLaunchHostFunc, then the fallback)."""
    return _point_at(monkeypatch, fake_cann[request.param])


@pytest.fixture
def ascend(fake_lib: Path) -> Iterator[Device]:
    device = aclpipe.open_device("ascend:0")
    yield device
    device.close()


@pytest.fixture
def any_ascend(any_fake_lib: Path) -> Iterator[Device]:
    device = aclpipe.open_device("ascend:0")
    yield device
    device.close()


class FakeHooks:
    """The fake runtime's test-only exports: the lifecycle call trace and live-object counts."""

    def __init__(self, directory: Path):
        self._ffi = FFI()
        self._ffi.cdef("const char *fakecann_trace(void); void fakecann_trace_clear(void);"
                       "int64_t fakecann_live(const char *kind);")
        self._lib = self._ffi.dlopen(str(directory / "libascendcl.so"))  # the already-loaded copy

    def trace(self) -> list[str]:
        return self._ffi.string(self._lib.fakecann_trace()).decode().splitlines()

    def clear_trace(self) -> None:
        self._lib.fakecann_trace_clear()

    def live(self, kind: str) -> int:
        return int(self._lib.fakecann_live(kind.encode()))


@pytest.fixture
def hooks(fake_lib: Path) -> FakeHooks:
    return FakeHooks(fake_lib)


@pytest.fixture
def any_hooks(any_fake_lib: Path) -> FakeHooks:
    return FakeHooks(any_fake_lib)
