"""The operator catalog: op name -> :class:`OpSpec`, filled by the family modules."""

from __future__ import annotations

from ..errors import UnsupportedOpError
from .base import OpSpec

__all__ = ["get_op", "op_names", "register"]

_CATALOG: dict[str, OpSpec] = {}


def register(spec: OpSpec) -> OpSpec:
    """Add ``spec`` to the catalog under ``spec.name`` (a name may be registered once)."""
    if not spec.name:
        raise ValueError(f"{type(spec).__name__} has no name")
    if spec.name in _CATALOG:
        raise ValueError(f"operator {spec.name} is registered twice")
    _CATALOG[spec.name] = spec
    return spec


def get_op(name: str) -> OpSpec:
    """The catalog op named ``name``; raises :class:`UnsupportedOpError` with close names."""
    try:
        return _CATALOG[name]
    except KeyError:
        close = sorted(n for n in _CATALOG if n.lower() == name.lower() or n.lower().startswith(name.lower()[:3]))
        hint = f"; did you mean {', '.join(close[:5])}?" if close else ""
        raise UnsupportedOpError(
            f"operator {name!r} is not in the aclpipe catalog ({len(_CATALOG)} ops){hint}") from None


def op_names() -> list[str]:
    """Every catalog op name, sorted."""
    return sorted(_CATALOG)
