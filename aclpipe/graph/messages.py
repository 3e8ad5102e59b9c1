"""Bounded ``repr`` for error messages: a value read from a file may be huge."""

from __future__ import annotations

import reprlib
from typing import Any

__all__ = ["short"]

_repr = reprlib.Repr()
_repr.maxstring = 60
_repr.maxother = 60
_repr.maxlist = _repr.maxtuple = _repr.maxdict = _repr.maxset = 6
_repr.maxlevel = 3


def short(value: Any) -> str:
    """``repr(value)``, cut to a few dozen characters and a few items per level."""
    return _repr.repr(value)
