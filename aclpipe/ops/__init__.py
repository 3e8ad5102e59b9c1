"""The operator catalog: per family one module with OpSpecs and numpy reference kernels."""

from __future__ import annotations

from .base import OpPlan, OpSpec, op_error
from .registry import get_op, op_names, register

__all__ = ["OpPlan", "OpSpec", "op_error", "get_op", "op_names", "register"]
