"""The KV cache: one slot of ``max_len`` positions per sequence, for every layer's keys and values.

A sequence takes a slot when its prefill starts and gives it back the moment it finishes or
is cancelled.  A step reads the past of its sequences as one [batch, heads, past, head_dim]
array per cache input (``past`` is the step's cache bucket; positions a sequence has not
filled are masked by its ``attention_mask`` row) and appends each sequence's new positions to
its slot, in place: the ``Concat(past, new)`` behind every present (:mod:`.kv_pattern`)
guarantees that the present is the past followed by ``new``, so the step reads back ``new``
alone (:func:`~aclpipe.decode.kv_pattern.step_model`), never the whole present.

Where the cache lives.  Here it is host memory, and each step copies its sequences' past
to the device with the step's inputs (through the pipeline's staging) and reads the presents
back: correct, and cheap for small models, but the cache crosses the host every step.  Keeping
it on the device with no copy needs two things the prepared programs do not offer yet: (1) an
input bound to a caller's device view instead of the slot's staging (phase one then runs on
``cache[:batch, :, :past, :]``, a strided view of one [slots, heads, max_len, head_dim]
buffer per cache input; a step running rows ``0..batch`` with finished slots masked needs no
gather), and (2) the ``Concat(past, new)`` behind each present rewritten to an in-place
scatter of ``new`` at each row's length (``aclnnScatterNdUpdate``), its readers reading that
view.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .kv_pattern import KVLayout

__all__ = ["KVCache"]


class KVCache:
    """Cache slots for ``max_batch`` sequences of up to ``max_len`` positions.

    Parameters
    ----------
    layout:
        The model's layers, heads and head_dim (:func:`~aclpipe.decode.kv_pattern.read_kv_layout`).
    max_batch:
        Sequences held at once.
    max_len:
        Positions per sequence (prompt and generated tokens).
    """

    def __init__(self, layout: KVLayout, max_batch: int, max_len: int, dtype: str = "float32"):
        self.layout = layout
        self.max_batch = max_batch
        self.max_len = max_len
        shape = (max_batch, layout.heads, max_len, layout.head_dim)
        self._store = {past: np.zeros(shape, dtype) for past, _ in layout.pairs()}
        self.lengths = np.zeros(max_batch, np.int64)
        self._free = list(range(max_batch - 1, -1, -1))  # popped from the end: slot 0 first

    @property
    def free(self) -> int:
        """Slots free now."""
        return len(self._free)

    @property
    def nbytes(self) -> int:
        return sum(array.nbytes for array in self._store.values())

    def acquire(self) -> int:
        """A free slot, emptied (length 0)."""
        if not self._free:
            raise RuntimeError("no free cache slot: check KVCache.free before acquiring")
        slot = self._free.pop()
        self.lengths[slot] = 0
        return slot

    def release(self, slot: int) -> None:
        """Give ``slot`` back (idempotent per acquire: a slot given back twice is a bug)."""
        if slot in self._free:
            raise RuntimeError(f"cache slot {slot} was given back twice")
        self._free.append(slot)

    def past(self, slots: Sequence[int], past_len: int, rows: int) -> dict[str, np.ndarray]:
        """Past input name -> [rows, heads, past_len, head_dim]: the slots' first ``past_len``
        positions, then zero rows up to the batch bucket's ``rows``."""
        index = np.asarray(slots, np.int64)
        out = {}
        for name, store in self._store.items():
            array = np.zeros((rows, *store.shape[1:2], past_len, store.shape[3]), store.dtype)
            array[:len(slots)] = store[index, :, :past_len]
            out[name] = array
        return out

    def append(self, slots: Sequence[int], news: Mapping[str, np.ndarray], counts: Sequence[int]) -> None:
        """Write each slot's first ``counts[i]`` new positions (``news``: past input name ->
        [rows, heads, seq, head_dim], the step's new keys or values) after its current length."""
        index = np.asarray(slots, np.int64)
        starts = self.lengths[index]
        one_each = all(count == 1 for count in counts)  # a decode step: one fancy-indexed write per cache input
        heads = np.arange(self.layout.heads)
        for past, store in self._store.items():
            new = news[past]
            if one_each:
                store[index[:, None], heads[None, :], starts[:, None]] = new[:len(slots), :, 0]
                continue
            for row, (slot, count) in enumerate(zip(slots, counts)):
                start = int(starts[row])
                store[slot, :, start:start + count] = new[row, :, :count]
        self.lengths[index] += np.asarray(counts, np.int64)
