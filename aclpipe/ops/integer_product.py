"""Exact integer matrix products on floating-point BLAS.

numpy multiplies integer matrices in plain C loops, tens of times slower than BLAS, so the
integer products (``MatmulInteger``, ``ConvolutionInteger``) run on float BLAS, which is exact
as long as every partial sum is an integer the float type holds exactly: ``|s| <= 2**24`` in
float32, ``2**53`` in float64.  A product of depth ``K`` whose operands are bounded by ``L``
(left) and ``R`` (right) has partial sums below ``K * L * R``, known in phase one from the
dtypes alone, so the strategy is chosen once per plan (:meth:`ExactProduct.choose`):

- ``float32``: one float32 product, when ``K * L * R <= 2**24``;
- ``split``: the left operand split as ``16 * high + low`` (``low`` in ``[0, 15]``, ``high``
  bounded by ``ceil(L / 16)``) and both halves multiplied in one float32 product (twice the
  rows: cheap where the right operand, a weight, dominates the bytes), recombined in int64,
  when ``K * max(ceil(L / 16), 15) * R <= 2**24``;
- ``float64``: one float64 product otherwise (exact for any depth that fits in memory).

Halving the operands' bytes against float64 is what pays: the products of quantized models
are mostly a few rows against a large weight, bound by memory, not arithmetic.  For the same
reason a 2-D right operand is converted a block of columns at a time (:func:`column_block`),
each block multiplied while it is still in the core's cache (a T5 ``lm_head``, 10 rows against
512 x 32,128 int8, runs in 5 ms instead of 11 ms when converted whole).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["COLUMN_BLOCK_BYTES", "FLOAT32_EXACT", "ExactProduct", "column_block"]

#: The largest magnitude up to which every integer is a float32.
FLOAT32_EXACT = 2 ** 24
#: The converted right operand's bytes per block of columns: within a core's L2 cache.
COLUMN_BLOCK_BYTES = 384 * 1024
_SPLIT = 16  # the left operand is 16 * high + low, low in [0, 15]


def column_block(depth: int, columns: int, itemsize: int) -> int:
    """Columns of a ``depth``-row right operand converted at a time (a multiple of 32, all of
    them when they fit in :data:`COLUMN_BLOCK_BYTES`)."""
    fitting = COLUMN_BLOCK_BYTES // max(depth * itemsize, 1) // 32 * 32
    return max(1, min(columns, max(fitting, 32)))


@dataclass(frozen=True)
class ExactProduct:
    """One exact strategy: the float ``dtype`` BLAS runs in and how many ``pieces`` the left
    operand is split into (1, or 2 for ``16 * high + low``)."""

    dtype: type[np.floating]
    pieces: int

    @classmethod
    def choose(cls, depth: int, left_bound: int, right_bound: int) -> ExactProduct:
        """The cheapest exact strategy for a product of ``depth`` terms whose left operand's
        magnitudes are at most ``left_bound`` and right operand's at most ``right_bound``."""
        if depth * left_bound * right_bound <= FLOAT32_EXACT:
            return cls(np.float32, 1)
        if depth * max(-(-left_bound // _SPLIT), _SPLIT - 1) * right_bound <= FLOAT32_EXACT:
            return cls(np.float32, 2)
        return cls(np.float64, 1)

    @property
    def name(self) -> str:
        """``float32``, ``split`` or ``float64`` (a plan's variant names it)."""
        return "split" if self.pieces == 2 else np.dtype(self.dtype).name

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize

    def load_left(self, shifted: np.ndarray, pieces: np.ndarray) -> None:
        """Write the integer left operand ``shifted`` into ``pieces`` (``(self.pieces,) +
        shifted.shape``, of :attr:`dtype`): itself, or its high and low halves."""
        if self.pieces == 1:
            np.copyto(pieces[0], shifted, casting="unsafe")
            return
        np.right_shift(shifted, 4, out=pieces[0], casting="unsafe")  # floor division: low >= 0
        np.bitwise_and(shifted, _SPLIT - 1, out=pieces[1], casting="unsafe")

    def combine(self, products: np.ndarray, total: np.ndarray) -> None:
        """Write the exact integer product into the int64 ``total`` from ``products`` (one
        product per piece, exact integers in :attr:`dtype`)."""
        np.copyto(total, products[0], casting="unsafe")
        if self.pieces == 2:
            np.left_shift(total, 4, out=total)
            np.add(total, products[1], out=total, casting="unsafe")  # in float64: exact

    def multiply(self, left: np.ndarray, right: np.ndarray, scratch: np.ndarray, products: np.ndarray,
                 block: int) -> None:
        """``products = left @ right`` for a 2-D integer ``right``, converted into ``scratch``
        (1-D, of :attr:`dtype`, at least ``depth * block`` elements) ``block`` columns at a time."""
        depth, columns = right.shape
        for start in range(0, columns, block):
            width = min(block, columns - start)
            converted = scratch[:depth * width].reshape(depth, width)
            np.copyto(converted, right[:, start:start + width], casting="unsafe")
            np.matmul(left, converted, out=products[:, start:start + width])
