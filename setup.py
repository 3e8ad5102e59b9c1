"""Build hook: compiles the C completion host function and the ascend backend's launch-table
walker with cffi (out-of-line API mode).

The extensions are optional: without a C compiler the install still succeeds (with a warning
from the build), :mod:`aclpipe.runtime.completion` falls back to a Python callback and the
ascend backend walks its launch tables from Python.
"""

from setuptools import setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that warns instead of failing when an extension does not compile."""

    def build_extensions(self) -> None:
        for extension in self.extensions:
            extension.optional = True  # setuptools then reports a compile failure as a warning
        super().build_extensions()


setup(cffi_modules=["aclpipe/runtime/completion/_hostfunc_build.py:ffibuilder",
                    "aclpipe/backends/ascend/_launch_build.py:ffibuilder"],
      cmdclass={"build_ext": OptionalBuildExt})
