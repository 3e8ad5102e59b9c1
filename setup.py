"""Build hook: compiles the C completion host function and the ascend backend's launch-table
walker with cffi (out-of-line API mode)."""

from setuptools import setup

setup(cffi_modules=["aclpipe/runtime/_hostfunc_build.py:ffibuilder",
                    "aclpipe/backends/ascend/_launch_build.py:ffibuilder"])
