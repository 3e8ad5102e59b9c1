"""Backends, found by name: ``"sim"`` (default), ``"ascend"``.

``parse_device("sim:1")`` gives ``("sim", 1)``; :func:`get_backend_class` imports
``aclpipe.backends.<name>``, reads its ``backend_class`` and caches it, the way anyio finds
its async backends.  A missing backend raises :class:`LookupError` saying what to install
or set.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

__all__ = ["DEFAULT_DEVICE", "KNOWN_BACKENDS", "get_backend_class", "parse_device"]

DEFAULT_DEVICE = "sim"
KNOWN_BACKENDS = {
    "sim": "built in; always available",
    "ascend": "needs a CANN installation: set ASCEND_HOME_PATH (source set_env.sh) or ACLPIPE_ASCEND_LIB",
}
_CACHE: dict[str, Any] = {}


def parse_device(spec: str | None) -> tuple[str, int]:
    """``"sim"`` -> ``("sim", 0)``; ``"ascend:1"`` -> ``("ascend", 1)``; ``None`` -> ``ACLPIPE_DEVICE``."""
    if spec is None:
        spec = os.environ.get("ACLPIPE_DEVICE") or DEFAULT_DEVICE
    if not isinstance(spec, str):
        raise TypeError(f"device must be a string such as 'sim' or 'ascend:0', got {type(spec).__name__}")
    name, _, index_text = spec.strip().partition(":")
    if not name:
        raise ValueError(f"device {spec!r} has no backend name: expected e.g. 'sim' or 'ascend:0'")
    try:
        index = int(index_text) if index_text else 0
    except ValueError:
        raise ValueError(f"device {spec!r}: the index after ':' must be an integer") from None
    if index < 0:
        raise ValueError(f"device {spec!r}: the index must be non-negative")
    return name.lower(), index


def get_backend_class(name: str) -> Any:
    """The backend class registered as ``name`` (imported once, then cached); raises
    :class:`LookupError` saying what to install or set when it cannot be loaded."""
    if name in _CACHE:
        return _CACHE[name]
    if name not in KNOWN_BACKENDS:
        raise LookupError(f"no backend named {name!r}: available are {', '.join(sorted(KNOWN_BACKENDS))}")
    try:
        module = importlib.import_module(f"aclpipe.backends.{name}")
    except ImportError as exc:
        raise LookupError(f"backend {name!r} could not be loaded ({exc}); {KNOWN_BACKENDS[name]}") from exc
    _CACHE[name] = module.backend_class
    return module.backend_class
