"""The operator catalog: per family one module with OpSpecs and numpy reference kernels.

Importing this package registers every family; ``get_op(name)`` finds an op by its aclnn
name (``"Add"``, ``"LayerNorm"``, ...).
"""

from __future__ import annotations

import importlib

from .base import OpPlan, OpSpec, op_error
from .registry import get_op, op_names, register

__all__ = ["OpPlan", "OpSpec", "get_op", "op_error", "op_names", "register"]

_FAMILIES = ("elementwise", "activation", "norm", "reduce", "matmul", "conv", "pool", "shape", "index", "views",
             "compare", "piecewise", "select", "pad", "resize", "conv_transpose", "lrn", "rounding",
             "smooth", "scatter", "cumulative", "triangle", "einsum", "group_norm", "pool_nd", "recurrent", "quant",
             "scatter_update")
for _family in _FAMILIES:
    importlib.import_module(f"{__name__}.{_family}")
