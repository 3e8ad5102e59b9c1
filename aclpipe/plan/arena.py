"""How the pieces of one device allocation are sized and aligned (CANN's sub-allocation rule).

A slot's activations live in one device allocation, the *arena*, cut into pieces by the
memory planner.  CANN states what a program that carves up one large block itself must give
each piece (the constraints of ``aclrtMalloc`` in the CANN runtime documentation, page
``docs/zh/api_ref/11-01_device_memory_malloc_and_free.md`` of the public repository
``hicann/runtime``):

- its size rounded up to 32 bytes *plus 32 bytes* (``ALIGN_UP(len, 32) + 32``) on the Atlas A2
  and A3 series, the Atlas inference series (310P), Atlas 200I/500 A2 and the Atlas training
  series; rounded up to 32 bytes only on the Ascend 950 series;
- a start address aligned to 64 bytes.

Kernels may touch the padding, so a piece without it can clobber its neighbour.  The arena
itself comes from ``aclrtMalloc``, whose addresses are 64-byte aligned, so 64-byte aligned
offsets give 64-byte aligned addresses.  A piece therefore takes its *footprint*: the padded
size rounded up to the offset alignment, so that the next piece starts aligned.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["A2_RULE", "ASCEND_950_RULE", "ArenaRule", "aligned"]


def aligned(nbytes: int, alignment: int) -> int:
    """``nbytes`` rounded up to a multiple of ``alignment``."""
    return -(-nbytes // alignment) * alignment


@dataclass(frozen=True)
class ArenaRule:
    """Sizes and alignment of the pieces of an arena.

    Parameters
    ----------
    size_alignment:
        Each piece's length is first rounded up to a multiple of this (bytes).
    padding:
        Then this many bytes are added (kernels may touch them).
    offset_alignment:
        Every piece starts at a multiple of this offset (a power of two).
    """

    size_alignment: int = 32
    padding: int = 32
    offset_alignment: int = 64

    def __post_init__(self) -> None:
        for name in ("size_alignment", "offset_alignment"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1 or value & (value - 1):
                raise ValueError(f"ArenaRule.{name} must be a power of two (bytes), got {value!r}")
        if isinstance(self.padding, bool) or not isinstance(self.padding, int) or self.padding < 0:
            raise ValueError(f"ArenaRule.padding must be an int >= 0 (bytes), got {self.padding!r}")

    def footprint(self, nbytes: int) -> int:
        """Bytes a piece of ``nbytes`` occupies, up to where the next piece may start (0 for 0)."""
        if nbytes <= 0:
            return 0
        return aligned(aligned(nbytes, self.size_alignment) + self.padding, self.offset_alignment)


#: Atlas A2/A3 series, Atlas inference series (310P), Atlas 200I/500 A2, Atlas training series.
A2_RULE = ArenaRule(size_alignment=32, padding=32, offset_alignment=64)
#: Ascend 950PR/950DT: sizes rounded to 32 bytes, no padding.
ASCEND_950_RULE = ArenaRule(size_alignment=32, padding=0, offset_alignment=64)
