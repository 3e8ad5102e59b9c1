"""A decoder over several devices: one :class:`~aclpipe.decode.Decoder` per device.

A sequence's KV cache lives on one device (:mod:`.cache`), so a request stays on the device
it started on: :class:`DecoderReplicas` makes a decoder per device (each with its cache, its
step programs and its continuous batching) and starts each request on the one with the
fewest requests at that moment.  The replicas step independently: the readers of one
device's requests run its steps while the others run theirs.  ``Decoder(model,
device="sim:0,1")`` (or a list of devices, as :class:`~aclpipe.Pipeline` takes them) makes
one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..onnx.importer import load_onnx
from ..onnx.onnx_graph import OnnxGraph
from ..pipeline.several.devices import open_devices
from ..runtime import Device
from .budget import CapturePlan
from .decoder import Decoder, DecoderModel
from .request import Generation

__all__ = ["DecoderReplicas"]


class DecoderReplicas(Decoder):
    """One decoder per device, requests spread over them (see the module doc).  Takes what
    :class:`Decoder` takes; ``device`` names several devices."""

    def __init__(self, model: DecoderModel, *, device: str | Sequence[Device | str] | None = None,
                 **options: Any):
        if device is None:
            raise ValueError("name the devices, e.g. device=['sim:0', 'sim:1'] or 'ascend:0-7'")
        graph = model if isinstance(model, OnnxGraph) else load_onnx(model)
        devices, self._opened = open_devices(device)
        self.replicas: list[Decoder] = []
        try:
            for each in devices:
                self.replicas.append(Decoder(graph, device=each, **options))
        except BaseException:
            for made in self.replicas:
                made.close()
            for opened in self._opened:
                opened.close()
            raise
        first = self.replicas[0]
        self.layout, self.max_batch, self.max_len = first.layout, first.max_batch, first.max_len
        self.batch_buckets, self.cache_buckets = first.batch_buckets, first.cache_buckets
        self.max_programs = first.max_programs
        self._closed = False

    def generate(self, prompt_ids: Sequence[int] | np.ndarray, max_new_tokens: int, *, eos_id: int | None = None,
                 temperature: float = 0.0, top_k: int | None = None, seed: int | None = None) -> Generation:
        """As :meth:`Decoder.generate`, on the replica with the fewest requests now."""
        replica = min(self.replicas, key=lambda each: each.active + each.waiting)
        return replica.generate(prompt_ids, max_new_tokens, eos_id=eos_id, temperature=temperature, top_k=top_k,
                                seed=seed)

    @property
    def active(self) -> int:
        return sum(replica.active for replica in self.replicas)

    @property
    def waiting(self) -> int:
        return sum(replica.waiting for replica in self.replicas)

    def prepare(self) -> None:
        """Prepare every replica's step programs up front (:meth:`Decoder.prepare`)."""
        for replica in self.replicas:
            replica.prepare()

    def capture_plan(self) -> CapturePlan:
        """The first replica's (each device holds the same buckets' programs)."""
        return self.replicas[0].capture_plan()

    def stats(self) -> dict[str, Any]:
        """Every replica's counters added up, and each one's under ``"replicas"``."""
        each = [replica.stats() for replica in self.replicas]
        total: dict[str, Any] = {key: sum(stats[key] for stats in each) for key in each[0]}
        total["replicas"] = each
        return total

    async def aclose(self) -> None:
        """Close every replica, then the devices opened here; idempotent."""
        self._closed = True
        try:
            for replica in self.replicas:
                await replica.aclose()
        finally:
            for opened in self._opened:
                opened.close()
            self._opened = []
