"""Bucket sizes: the few batch sizes and cache lengths a decoder prepares steps for."""

from __future__ import annotations

import bisect
from collections.abc import Sequence

__all__ = ["bucket_for", "check_buckets", "powers_of_two"]


def powers_of_two(low: int, high: int) -> list[int]:
    """``low, 2*low, ...`` below ``high``, then ``high``."""
    sizes = []
    size = low
    while size < high:
        sizes.append(size)
        size *= 2
    return [*sizes, high]


def check_buckets(label: str, buckets: Sequence[int] | None, top: int, low: int) -> list[int]:
    """Sorted, distinct, positive buckets that reach ``top`` (which is added when missing);
    default: powers of two from ``low``."""
    if buckets is None:
        return powers_of_two(min(low, top), top)
    sizes = sorted(set(buckets))
    if not sizes or any(isinstance(size, bool) or not isinstance(size, int) or size < 1 for size in sizes):
        raise ValueError(f"{label} must be positive ints, got {list(buckets)!r}")
    if sizes[-1] > top:
        raise ValueError(f"{label} go up to {sizes[-1]}, past the decoder's {top}: drop the larger ones")
    return sizes if sizes[-1] == top else [*sizes, top]


def bucket_for(value: int, buckets: Sequence[int]) -> int:
    """The smallest bucket that holds ``value`` (0 stays 0: an empty past needs no bucket)."""
    if value == 0:
        return 0
    return buckets[bisect.bisect_left(buckets, value)]
