# Stub for the cffi extension built from _hostfunc_build.py at install (out-of-line API mode).
from typing import Any

ffi: Any
lib: Any
