"""Build the fake CANN libraries (a test fixture) with the system C compiler.

``build_fake_cann(directory)`` writes ``libascendcl.so``, ``libnnopbase.so`` and
``libopapi.so`` into ``directory`` and returns it; point ``ACLPIPE_ASCEND_LIB`` there.
With ``launch_host_func=False`` the runtime lacks ``aclrtLaunchHostFunc`` (like CANN
releases before 8.3), which makes the binding fall back to ``aclrtLaunchCallback``; with
``mem_pool=False`` it lacks the stream-ordered allocator (``acl_rt_memory_soma.h``, CANN releases
before it), which turns the binding's ``capabilities.stream_ordered_alloc`` off; with
``conditional=False`` it lacks the conditional tasks of captured models (``aclmdlRICond*``,
``acl_cond.c``), which turns ``capabilities.conditional_models`` off.

Each library links its dependency by absolute path and has no soname, so two builds in two
directories can be loaded into one process side by side without the dynamic loader mixing
them up.  Run as a script: ``python tests/fake_cann/build.py OUT_DIR [--no-launch-host-func]``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["SOURCE_DIR", "build_fake_cann", "find_compiler"]

SOURCE_DIR = Path(__file__).resolve().parent
FLAGS = ["-O2", "-Wall", "-Wextra", "-Werror", "-pthread", "-fPIC", "-shared"]


def find_compiler() -> str | None:
    """The C compiler to use: ``$CC``, else ``cc``, ``gcc`` or ``clang`` on the PATH."""
    candidates = [os.environ.get("CC", ""), "cc", "gcc", "clang"]
    return next((path for name in candidates if name and (path := shutil.which(name))), None)


def _compile(compiler: str, output: Path, sources: list[str], extra: list[str]) -> None:
    command = [compiler, *FLAGS, f"-I{SOURCE_DIR}", "-o", str(output),
               *(str(SOURCE_DIR / source) for source in sources), *extra]
    result = subprocess.run(command, check=False, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"building {output.name} failed:\n{' '.join(command)}\n{result.stderr}")


def build_fake_cann(directory: Path | str, *, launch_host_func: bool = True, compiler: str | None = None,
                    mem_pool: bool = True, conditional: bool = True) -> Path:
    """Compile the three fake libraries into ``directory`` (created if needed)."""
    compiler = compiler or find_compiler()
    if compiler is None:
        raise RuntimeError("no C compiler found: set CC or install gcc")
    directory = Path(directory).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    runtime, nnopbase = directory / "libascendcl.so", directory / "libnnopbase.so"
    defines = ["-DFAKE_HAVE_LAUNCH_HOST_FUNC"] if launch_host_func else []
    runtime_sources = ["acl_core.c", "acl_stream.c", "acl_capture.c", "acl_peer.c"]
    optional = (["acl_mempool.c"] if mem_pool else []) + (["acl_cond.c"] if conditional else [])
    _compile(compiler, runtime, runtime_sources + optional, defines)
    _compile(compiler, nnopbase, ["nnopbase.c"], [str(runtime)])
    _compile(compiler, directory / "libopapi.so", ["opapi.c"], [str(nnopbase), str(runtime), "-lm"])
    return directory


if __name__ == "__main__":
    arguments = sys.argv[1:]
    if not arguments or arguments[0].startswith("-"):
        sys.exit("usage: build.py OUT_DIR [--no-launch-host-func]")
    print(build_fake_cann(arguments[0], launch_host_func="--no-launch-host-func" not in arguments))
