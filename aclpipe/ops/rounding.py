"""Rounding and integer-valued math: ``Floor``, ``Ceil``, ``Round``, ``Sign``, ``Remainder``, ``Fmod``.

Rows of the elementwise tables (:class:`~aclpipe.ops.elementwise.UnaryOp`,
:class:`~aclpipe.ops.elementwise.BinaryOp`), named after aclnn's ops:

- ``Floor``, ``Ceil``, ``Round`` (half to even, like ``torch.round``): floats keep their dtype;
  integers pass through unchanged.
- ``Sign``: -1, 0 or 1 in the input's dtype (NaN stays NaN); floats and integers.
- ``Remainder`` (aclnnRemainderTensorTensor): ``self - floor(self / other) * other``, the sign of
  ``other`` (Python's ``%``, ``torch.remainder``); ``Fmod`` (aclnnFmodTensor): the sign of
  ``self`` (C's ``fmod``, ``torch.fmod``).  Tensors promote and broadcast like ``Add``.  An
  integer divisor of 0 gives 0 (the device raises nothing); a float one gives NaN.

No workspace.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .checks import NUMERIC
from .elementwise import BinaryOp, UnaryOp, keep_dtype
from .registry import register

__all__: list[str] = []


def _keep_integers(function: Any) -> Any:
    """Apply ``function`` to floats; integers are already whole."""
    return lambda x, params: function(x) if x.dtype.kind == "f" else x


def _remainder(a: Any, b: Any, params: Any) -> Any:
    return np.where(np.asarray(b) == 0, 0, np.mod(a, b)) if np.asarray(a).dtype.kind in "iu" else np.mod(a, b)


def _fmod(a: Any, b: Any, params: Any) -> Any:
    return np.where(np.asarray(b) == 0, 0, np.fmod(a, b)) if np.asarray(a).dtype.kind in "iu" else np.fmod(a, b)


_OPS = (
    UnaryOp("Floor", _keep_integers(np.floor), NUMERIC, keep_dtype),
    UnaryOp("Ceil", _keep_integers(np.ceil), NUMERIC, keep_dtype),
    UnaryOp("Round", _keep_integers(np.round), NUMERIC, keep_dtype),
    UnaryOp("Sign", lambda x, params: np.sign(x), NUMERIC, keep_dtype),
    BinaryOp("Remainder", _remainder, NUMERIC, flops=4.0),
    BinaryOp("Fmod", _fmod, NUMERIC, flops=4.0),
)

for _spec in _OPS:
    register(_spec)
