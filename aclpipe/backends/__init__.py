"""Backends, found by name: ``"sim"`` (default), ``"ascend"``.

``parse_device("sim:1")`` gives ``("sim", 1)``; ``parse_device_list("ascend:0-7")`` the eight
devices of a list, each index checked against the backend's device count before the list is
expanded (a typo such as ``"sim:0-99999999999"`` is refused at once, not expanded to 10^11
entries); :func:`get_backend_class` imports
``aclpipe.backends.<name>``, reads its ``backend_class`` and caches it, the way anyio finds
its async backends.  A missing backend raises :class:`LookupError` saying what to install
or set.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from typing import Any

from ..errors import AclpipeError, error_from_code

__all__ = ["DEFAULT_DEVICE", "KNOWN_BACKENDS", "get_backend_class", "is_device_list", "parse_device",
           "parse_device_list"]

DEFAULT_DEVICE = "sim"
KNOWN_BACKENDS = {
    "sim": "built in; always available",
    "ascend": "needs a CANN installation: set ASCEND_HOME_PATH (source set_env.sh) or ACLPIPE_ASCEND_LIB",
}
#: The most devices a list may name when its backend cannot say how many it has (it cannot be
#: loaded here): a bound on what a range expands to, far above any machine's NPUs.
MAX_LISTED_DEVICES = 1024
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


def is_device_list(spec: object) -> bool:
    """Whether ``spec`` names several devices: a list or tuple of names, or ``"sim:0,1"`` /
    ``"ascend:0-7"``."""
    if isinstance(spec, (list, tuple)):
        return True
    return isinstance(spec, str) and any(mark in spec.partition(":")[2] for mark in ",-")


def parse_device_list(spec: str | Sequence[str]) -> list[tuple[str, int]]:
    """``"sim:0,1"``, ``"ascend:0-7"``, ``"sim:0,2-3"`` or ``["sim:0", "sim:1"]`` ->
    ``[("sim", 0), ("sim", 1), ...]``; every device once, one backend for all.

    Raises
    ------
    InvalidArgumentError
        An index the backend does not have (checked before a range is expanded).
    ValueError
        A malformed, empty or repeated entry, or backends mixed.
    """
    if isinstance(spec, str):
        name, _, indices = spec.strip().partition(":")
        backend = parse_device(f"{name}:0")[0]
        parts = [part.strip() for part in (indices or "0").split(",")]
        ranges = [_index_range(spec, part) for part in parts]
        _check_indices(spec, backend, max(index_range[-1] for index_range in ranges),
                       sum(len(index_range) for index_range in ranges))
        devices = [(parse_device(f"{name}:{index}")) for index_range in ranges for index in index_range]
    elif isinstance(spec, (list, tuple)):
        devices = [parse_device(item) for item in spec]
        for backend in {name for name, _ in devices}:
            listed = [index for name, index in devices if name == backend]
            _check_indices(spec, backend, max(listed), len(listed))
    else:
        raise TypeError(f"devices must be a list of names or a string such as 'sim:0,1', got {type(spec).__name__}")
    if not devices:
        raise ValueError("the device list is empty: name at least one device, e.g. 'sim:0'")
    if len({name for name, _ in devices}) > 1:
        raise ValueError(f"devices {spec!r} mix backends; a pipeline drives devices of one backend")
    seen = set()
    for device in devices:
        if device in seen:
            raise ValueError(f"devices {spec!r} name {device[0]}:{device[1]} twice; list every device once")
        seen.add(device)
    return devices


def _index_range(spec: str, part: str) -> range:
    first, dash, last = part.partition("-")
    try:
        low, high = int(first), int(last) if dash else int(first)
    except ValueError:
        raise ValueError(f"devices {spec!r}: {part!r} is not an index or a range such as 0-7") from None
    if low < 0 or high < low:
        raise ValueError(f"devices {spec!r}: the range {part!r} must count up from a non-negative index")
    return range(low, high + 1)


def _check_indices(spec: object, backend: str, highest: int, listed: int) -> None:
    """Refuse a list whose ``highest`` index ``backend`` does not have, or that names more
    devices (``listed``) than it could have."""
    count = _device_count(backend)
    if count is not None:
        if highest >= count:
            raise error_from_code(107001, f"devices {spec!r}: {backend}:{highest} does not exist: {backend} has "
                                          f"{count} device(s), {backend}:0 to {backend}:{count - 1}")
    elif listed > MAX_LISTED_DEVICES:
        raise ValueError(f"devices {spec!r} name {listed} devices; at most {MAX_LISTED_DEVICES} may be listed "
                         f"while {backend!r} cannot say how many it has")


def _device_count(backend: str) -> int | None:
    """How many devices ``backend`` has; None when it cannot be loaded or asked here (opening
    the devices then says why)."""
    try:
        return int(get_backend_class(backend).device_count())
    except (LookupError, AclpipeError):
        return None


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
