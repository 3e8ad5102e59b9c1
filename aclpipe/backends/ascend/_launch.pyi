# Stub for the cffi extension built from _launch_build.py at install (out-of-line API mode).
from typing import Any

ffi: Any
lib: Any
