"""Exact integer matrix products on float32 BLAS.

numpy multiplies integer matrices in plain C loops, tens of times slower than BLAS, so the
integer products (``MatmulInteger``) run on float32 BLAS, which is exact as long as every
partial sum is an integer float32 holds exactly: ``|s| <= 2**24``.  Operands bounded by ``L``
(left) and ``R`` (right) keep the partial sums of ``D`` terms below ``D * L * R``, so a product
of depth ``K`` is cut into chunks of ``D = 2**24 // (L * R)`` terms (514 for uint8 x int8, 258
for uint8 x uint8), each multiplied exactly in float32 and the chunks summed in int64
(:class:`ExactProduct`, chosen in phase one from the dtypes alone).  Chunking the depth costs
no arithmetic, where float64 or splitting an operand into two halves would double it.

The products of quantized models are mostly a few rows against a large weight, bound by
memory, not arithmetic: the weight is converted a block of columns at a time
(:func:`column_block`), each block multiplied while it is still in the core's cache (a T5
``lm_head``, 10 rows against 512 x 32,128 int8, runs in 6 ms instead of 10 ms when converted
whole).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["COLUMN_BLOCK_BYTES", "FEW_ROWS", "FLOAT32_EXACT", "WHOLE_BYTES", "ExactProduct", "column_block"]

#: The largest magnitude up to which every integer is a float32.
FLOAT32_EXACT = 2 ** 24
#: The converted right operand's bytes per block of columns: within a core's L2 cache.
COLUMN_BLOCK_BYTES = 384 * 1024
#: Products of more rows convert a right operand of up to this many bytes whole.
WHOLE_BYTES = 8 * 1024 * 1024
FEW_ROWS = 16


def column_block(rows: int, depth: int, columns: int) -> int:
    """Columns of a ``depth``-row right operand converted to float32 at a time (a multiple of
    32, or all of them).  Blocks pay where BLAS is bound by reading the right operand: few
    ``rows`` (a 10 x 512 x 1,024 product in 165 us instead of 320), or a right operand past
    :data:`WHOLE_BYTES`; with more rows, narrow blocks cost BLAS more than they save
    (24 x 512 x 1,024: 410 us against 370)."""
    if rows > FEW_ROWS and 4 * depth * columns <= WHOLE_BYTES:
        return max(1, columns)
    fitting = COLUMN_BLOCK_BYTES // max(4 * depth, 1) // 32 * 32
    return max(1, min(columns, max(fitting, 32)))


@dataclass(frozen=True)
class ExactProduct:
    """An exact product of ``depth`` terms, multiplied in float32 ``chunk`` terms at a time."""

    depth: int
    chunk: int

    @classmethod
    def choose(cls, depth: int, left_bound: int, right_bound: int) -> ExactProduct:
        """The product of ``depth`` terms whose left operand's magnitudes are at most
        ``left_bound`` and right operand's at most ``right_bound`` (each product of two
        must itself be a float32 integer: operands of up to 12 bits)."""
        if left_bound * right_bound > FLOAT32_EXACT:
            raise ValueError(f"operands bounded by {left_bound} and {right_bound}: expected a product of at most "
                             f"2**24, for float32 to hold each term exactly")
        return cls(depth, max(1, min(depth, FLOAT32_EXACT // (left_bound * right_bound))))

    @property
    def chunks(self) -> int:
        """How many float32 products make the whole one."""
        return max(1, -(-self.depth // self.chunk))

    @property
    def name(self) -> str:
        """``float32``, or ``float32-by-N`` for ``N`` chunks (a plan's variant names it)."""
        return "float32" if self.chunks == 1 else f"float32-by-{self.chunks}"

    def multiply(self, left: np.ndarray, right: np.ndarray, converted: np.ndarray, product: np.ndarray,
                 total: np.ndarray, block: int) -> None:
        """``total = left @ right`` exactly, in int64.

        ``left`` is float32 (``[..., rows, depth]``), ``right`` an integer ``[..., depth,
        columns]`` converted into ``converted`` ``block`` columns at a time; each chunk of
        the depth is multiplied into ``product`` and summed into ``total`` (``[..., rows,
        columns]``).  ``converted`` and ``product`` are 1-D float32 scratch, at least a
        block's worth of ``right`` and of ``total``."""
        columns = right.shape[-1]
        for start in range(0, columns, block):
            width = min(block, columns - start)
            part = right[..., start:start + width]
            block_in = converted[:part.size].reshape(part.shape)
            np.copyto(block_in, part, casting="unsafe")
            sums = total[..., start:start + width]
            block_out = product[:sums.size].reshape(sums.shape)
            for first in range(0, max(self.depth, 1), self.chunk):
                terms = slice(first, first + self.chunk)
                np.matmul(left[..., terms], block_in[..., terms, :], out=block_out)
                if first == 0:
                    np.copyto(sums, block_out, casting="unsafe")
                else:
                    np.add(sums, block_out, out=sums, casting="unsafe")  # in float64: exact
