"""The KV cache: one device buffer per layer's keys and values, a slot per sequence.

Each cache input of the model (``past_key_values.{i}.key`` / ``.value``) has one device
buffer of [max_batch, heads, capacity, head_dim] (``capacity`` = ``max_len`` + 1: a decode
step's view holds its cache bucket plus the new position).  A sequence takes a slot (a row of
every buffer) when its prefill starts and gives it back the moment it finishes or is
cancelled; its keys and values are written there by the steps themselves, in place
(:mod:`.kv_append`), and read there by the attention: the cache never crosses to the host,
and no step copies it.

Rows are slots.  A decode step of batch bucket ``B`` runs rows ``0..B-1``, the cache seen
as ``buffer[:B, :, :total, :]`` (a strided view with a fixed address, so every bucket's
program, captured or not, binds it once); row ``r`` is slot ``r``, and a free slot below
``B`` is a padded row (masked, writing nothing).  That layout needs no gather and no copy when
membership changes, at the price of running the free slots below the highest one in use:
slots are taken lowest first (:meth:`KVCache.acquire`), so the running sequences stay packed
at the bottom and the padding is at most what finished meanwhile.  The alternative,
compacting the slots when a sequence leaves, would copy a whole sequence's cache (every
layer) on the device for every departure below the top.  A prefill reads no cache: its rows
are the joining sequences only, each writing its prompt's keys and values into its own slot.
"""

from __future__ import annotations

import heapq

import numpy as np

from ..runtime import Device, DeviceBuffer
from .kv_pattern import KVLayout

__all__ = ["KVCache"]


class KVCache:
    """Device-resident cache slots for ``max_batch`` sequences of up to ``max_len`` positions.

    Parameters
    ----------
    layout:
        The model's layers, heads and head_dim (:func:`~aclpipe.decode.kv_pattern.read_kv_layout`).
    max_batch:
        Sequences held at once.
    max_len:
        Positions per sequence (prompt and generated tokens).
    device:
        Where the buffers live (zeroed once here: masked positions are then finite).
    """

    def __init__(self, layout: KVLayout, max_batch: int, max_len: int, device: Device, dtype: str = "float32"):
        self.layout = layout
        self.max_batch = max_batch
        self.max_len = max_len
        self.capacity = max_len + 1
        self.dtype = dtype
        self.shape = (max_batch, layout.heads, self.capacity, layout.head_dim)
        self.buffers: dict[str, DeviceBuffer] = {}
        zeros = np.zeros(self.shape, dtype)
        try:
            for past, _ in layout.pairs():
                self.buffers[past] = device.upload(zeros, label=f"kv cache {past}")
        except BaseException:
            self.close()
            raise
        self.lengths = np.zeros(max_batch, np.int64)
        self._free = list(range(max_batch))  # a heap: the lowest free slot first

    @property
    def free(self) -> int:
        """Slots free now."""
        return len(self._free)

    @property
    def nbytes(self) -> int:
        return sum(buffer.nbytes for buffer in self.buffers.values())

    @property
    def rows_in_use(self) -> int:
        """One past the highest slot in use (0 when none is): the rows a step must run."""
        taken = np.ones(self.max_batch, bool)
        taken[self._free] = False
        used = np.flatnonzero(taken)
        return int(used[-1]) + 1 if used.size else 0

    def acquire(self) -> int:
        """The lowest free slot, emptied (length 0)."""
        if not self._free:
            raise RuntimeError("no free cache slot: check KVCache.free before acquiring")
        slot = heapq.heappop(self._free)
        self.lengths[slot] = 0
        return slot

    def release(self, slot: int) -> None:
        """Give ``slot`` back (once per acquire: a slot given back twice is a bug)."""
        if slot in self._free:
            raise RuntimeError(f"cache slot {slot} was given back twice")
        heapq.heappush(self._free, slot)

    def close(self) -> None:
        """Free the buffers (after every step that used them has completed)."""
        for buffer in self.buffers.values():
            buffer.close()
        self.buffers.clear()
