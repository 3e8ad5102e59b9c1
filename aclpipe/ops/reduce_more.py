"""More reductions: ``Amin`` and ``Prod``, rows of :class:`~aclpipe.ops.reduce.ReduceOp`.

- ``Amin(dim, keepdim)``: the smallest element; keeps the input's dtype (bool included) and,
  like ``Amax``, refuses to reduce a dim of size 0 when the result would not be empty.
- ``Prod(dim, keepDim, dtype)``: the product (``torch.prod``; ``dim`` may list several dims,
  None or ``[]`` reduces all).  Floats keep their dtype, integers and bool give int64 unless
  ``dtype`` says otherwise (the input is cast to ``dtype`` first).  The product of nothing is 1.

As in :mod:`aclpipe.ops.reduce`, the kernel accumulates into a workspace buffer shaped like
the kept-dims result (fp32 for float products, int64 for integer ones, the compute dtype for
``Amin``) and rounds once into the output.
"""

from __future__ import annotations

from .reduce import ReduceOp, _max_dtype, _sum_dtype
from .registry import register

__all__: list[str] = []  # the module only registers catalog rows

# Amin's dtype rule is Amax's (the input's); Prod's is ReduceSum's (integers and bool give int64).
for _spec in (ReduceOp("Amin", "min", _max_dtype, dims="dim", keep="keepdim", has_dtype=False),
              ReduceOp("Prod", "prod", _sum_dtype, dims="dim", keep="keepDim", has_dtype=True)):
    register(_spec)
