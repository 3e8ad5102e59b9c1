"""Build hook: compiles the C completion host function with cffi (out-of-line API mode)."""

from setuptools import setup

setup(cffi_modules=["aclpipe/runtime/_hostfunc_build.py:ffibuilder"])
