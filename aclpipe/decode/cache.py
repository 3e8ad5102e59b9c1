"""The KV cache: one device buffer per layer's keys and values, a slot per sequence.

Each cache input of the model (``past_key_values.{i}.key`` / ``.value``) has one device
buffer of [max_batch + 1, heads, capacity, head_dim] (``capacity``: ``max_len`` + 1, a decode
step's view holding its cache bucket plus the new position, rounded up to 16 positions).  A
sequence takes a slot (a row of every buffer) when its prefill starts and gives it back the
moment it finishes or is cancelled; its keys and values are written there by the steps
themselves, in place (CANN's ``aclnnInplaceScatterUpdate``: :mod:`.cache_graph`), and read
there by the attention: the cache never crosses to the host, and no step copies it.  The
last slot, :attr:`KVCache.scratch_slot`, is no sequence's: a step's rows that have nothing
of their own to write write there (the op takes no negative "no write" index), and no step
reads it.

Rows are slots.  A decode step of batch bucket ``B`` runs rows ``0..B-1``, the cache seen
as ``buffer[:B, :, :total, :]`` (a strided view with a fixed address, so every bucket's
program, captured or not, binds it once); row ``r`` is slot ``r``, and a free slot below
``B`` is a padded row (masked, writing to the scratch slot).  So no step gathers or scatters slots.
Slots are taken lowest first (:meth:`KVCache.acquire`), and when sequences leave from below,
the decoder moves the highest ones down into the free slots (:meth:`KVCache.move`: one
device-to-device copy of the slot per cache input) once the running ones fit a smaller batch
bucket than the highest slot in use: a copy only when membership changes, and only when it
shrinks the steps that follow.  Without it a long sequence left alone in a high slot would
keep every step at the batch of the busiest moment (the benchmark's 16 requests: 728 rows
computed over the decode steps instead of 423).  A prefill reads no cache: its rows are the
joining sequences only, each writing its prompt's keys and values into its own slot.
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
        self.capacity = self.capacity_for(max_len)
        self.dtype = dtype
        #: The slot past the sequences' that rows without a write of their own write to.
        self.scratch_slot = max_batch
        self.shape = (max_batch + 1, layout.heads, self.capacity, layout.head_dim)
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

    @staticmethod
    def capacity_for(max_len: int) -> int:
        """Positions per slot: a decode step's view holds its cache bucket plus the new
        position; whole 16-position blocks keep every slot 64-byte aligned, as device-to-device
        copies want (:meth:`move`)."""
        return -(-(max_len + 1) // 16) * 16

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

    def move(self, slot: int) -> int:
        """Move the sequence in ``slot`` to the lowest free slot below it (a device-to-device
        copy of the slot in every buffer, waited for: call between steps) and free ``slot``;
        returns the new slot."""
        if not self._free or self._free[0] >= slot:
            raise RuntimeError(f"no free cache slot below {slot} to move its sequence to")
        target = heapq.heappop(self._free)
        per_slot = int(np.prod(self.shape[1:])) * np.dtype(self.dtype).itemsize
        for buffer in self.buffers.values():
            buffer.device.copy(buffer, buffer, per_slot, dst_offset=target * per_slot, src_offset=slot * per_slot)
        self.lengths[target] = self.lengths[slot]
        heapq.heappush(self._free, slot)
        return target

    def close(self) -> None:
        """Free the buffers (after every step that used them has completed)."""
        for buffer in self.buffers.values():
            buffer.close()
        self.buffers.clear()
