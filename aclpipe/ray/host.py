"""The pipeline a Ray worker owns, on the NPUs Ray gave it; shared by the actor and Serve.

Ray schedules a worker on ``"NPU"`` resources and sets ``ASCEND_RT_VISIBLE_DEVICES`` to the
NPUs it granted.  CANN then numbers the visible NPUs from 0 inside the process: user device
0 is the first id listed (``docs/zh/api_ref/04_device_management.md`` of ``hicann/runtime``,
user, logical and physical device ids).  So a worker granted ``n`` NPUs opens
``"<backend>:0"`` .. ``"<backend>:n-1"`` whatever their ids on the machine: one device is a
plain :class:`~aclpipe.Pipeline`, several make replicas (or stages, with ``split="stages"``).

:meth:`PipelineHost.run_batch` serves batched requests: requests whose inputs differ only in
their first (batch) dimension are concatenated into one run, padded up to a power of two
rows so that a few input signatures serve every mix of request sizes, and the outputs are cut
back into one answer per request.  Graphs whose outputs do not keep the batch rows are run
request by request instead, through ``stream()`` so that the runs still overlap.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..backends import DEFAULT_DEVICE, parse_device
from ..graph import Graph
from ..pipeline import Pipeline
from ..pipeline.batches import as_input
from ..pipeline.replicas import ReplicaPipeline
from .bundle import GraphBundle

__all__ = ["PipelineHost", "visible_devices"]


def visible_devices() -> list[str]:
    """The NPU ids Ray (or the user) made visible to this process, as listed."""
    listed = os.environ.get("ASCEND_RT_VISIBLE_DEVICES", "")
    return [item.strip() for item in listed.split(",") if item.strip()]


class PipelineHost:
    """A :class:`Pipeline` over this process's first ``npus`` devices of ``backend``.

    Parameters
    ----------
    graph:
        A :class:`GraphBundle` (or anything :meth:`GraphBundle.of` takes).
    backend:
        ``"sim"`` or ``"ascend"`` (default: the backend of ``ACLPIPE_DEVICE``, else ``sim``).
    npus:
        How many devices to drive (what the worker asked Ray for).
    pipeline_options:
        Passed to :class:`Pipeline` (``streams``, ``depth``, ``workspace``, ``split``, ...).
    """

    def __init__(self, graph: GraphBundle | Graph | str | bytes, *, backend: str | None = None, npus: int = 1,
                 **pipeline_options: Any):
        if isinstance(npus, bool) or not isinstance(npus, int) or npus < 1:
            raise ValueError(f"npus must be a positive int, got {npus!r}")
        name = backend or parse_device(os.environ.get("ACLPIPE_DEVICE") or DEFAULT_DEVICE)[0]
        self.graph = GraphBundle.of(graph).load() if not isinstance(graph, Graph) else graph
        self.visible = visible_devices()
        device: str | list[str] = f"{name}:0" if npus == 1 else [f"{name}:{index}" for index in range(npus)]
        self.pipeline = Pipeline(self.graph, device, **pipeline_options)
        self._joinable: bool | None = None  # whether requests can share a run (see run_batch)
        self._closed = False

    async def run(self, **inputs: Any) -> dict[str, np.ndarray]:
        """One run; ``inputs`` are arrays (or nested lists) by input name."""
        return await self.pipeline.run(**self.arrays(inputs))

    def arrays(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """``inputs`` as arrays of the dtypes the graph declares, converted only when every value
        survives (:func:`~aclpipe.pipeline.batches.as_input`; JSON lists arrive as ints or floats)."""
        declared = self.graph.inputs
        return {name: as_input(name, value, declared[name].dtype) if name in declared
                else np.asarray(value) for name, value in inputs.items()}

    async def run_batch(self, requests: Sequence[Mapping[str, Any]]) -> list[dict[str, np.ndarray]]:
        """Answer several requests, sharing runs where the graph allows (module docstring)."""
        batches = [self.arrays(request) for request in requests]
        if self._joinable is not False and len(batches) > 1:
            joined = await self._run_joined(batches)
            if joined is not None:
                return joined
        return [out async for out in self.pipeline.stream(batches)]

    async def _run_joined(self, batches: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]] | None:
        names = sorted(batches[0])
        if any(sorted(batch) != names for batch in batches) or not names:
            return None
        if any(batch[n].ndim == 0 or batch[n].shape[1:] != batches[0][n].shape[1:] for batch in batches for n in names):
            return None
        rows = [batch[names[0]].shape[0] for batch in batches]
        if any(batch[n].shape[0] != count for batch, count in zip(batches, rows) for n in names):
            return None
        if self._joinable is None:
            self._joinable = self._keeps_rows({n: batches[0][n].shape[1:] for n in names})
        if not self._joinable:
            return None
        total = sum(rows)
        padded = 1 << max(total - 1, 0).bit_length()  # a few signatures serve every mix of sizes
        joined = {n: _pad(np.concatenate([batch[n] for batch in batches]), padded) for n in names}
        outputs = await self.pipeline.run(**joined)
        answers, start = [], 0
        for count in rows:
            answers.append({name: out[start:start + count] for name, out in outputs.items()})
            start += count
        return answers

    def _keeps_rows(self, trailing: Mapping[str, tuple[int, ...]]) -> bool:
        """Whether every output's first dimension is the inputs' batch dimension (planned at one
        and two rows: nothing runs), so that stacked requests can be cut apart again."""
        plans = []
        for rows in (1, 2):
            try:
                plans.append(self.pipeline.plan_for(**{n: (rows, *rest) for n, rest in trailing.items()}))
            except (ValueError, TypeError):  # a fixed batch size, say
                return False
        return all(plan.values[value].desc.shape[:1] == (rows,)
                   for plan, rows in zip(plans, (1, 2)) for value in plan.outputs.values())

    def stats(self) -> dict[str, Any]:
        """The pipeline's :meth:`~aclpipe.Pipeline.stats` as a dict, with the devices it runs on."""
        stats = self.pipeline.stats().as_dict()
        stats["devices"] = [d.name for d in getattr(self.pipeline, "devices", [self.pipeline.device])]
        stats["visible_devices"] = self.visible
        stats["pid"] = os.getpid()  # which worker process answered (a restarted one has another)
        stats.pop("stages", None)
        if isinstance(self.pipeline, ReplicaPipeline):
            stats["devices_in_rotation"] = [d.name for d in self.pipeline.stats().devices if d.in_rotation]
        return stats

    def healthy(self) -> bool:
        """False once closed, or once no device can take runs (every replica out of rotation
        after faults): then the worker is better replaced by a fresh one."""
        if self._closed:
            return False
        if isinstance(self.pipeline, ReplicaPipeline):
            return any(d.in_rotation for d in self.pipeline.stats().devices)
        return True

    async def aclose(self) -> None:
        """Close the pipeline (and the devices it opened); idempotent."""
        self._closed = True
        await self.pipeline.aclose()


def _pad(array: np.ndarray, rows: int) -> np.ndarray:
    if array.shape[0] == rows:
        return array
    padding = np.zeros((rows - array.shape[0], *array.shape[1:]), dtype=array.dtype)
    return np.concatenate([array, padding])
