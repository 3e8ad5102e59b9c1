"""The pipeline a Ray worker owns, on the NPUs Ray gave it; shared by the actor and Serve.

Ray schedules a worker on ``"NPU"`` resources and sets ``ASCEND_RT_VISIBLE_DEVICES`` to the
NPUs it granted.  CANN then numbers the visible NPUs from 0 inside the process: user device
0 is the first id listed (``docs/zh/api_ref/04_device_management.md`` of ``hicann/runtime``,
user, logical and physical device ids).  So a worker granted ``n`` NPUs opens
``"<backend>:0"`` .. ``"<backend>:n-1"`` whatever their ids on the machine: one device is a
plain :class:`~aclpipe.Pipeline`, several make replicas (or stages, with ``split="stages"``).

:meth:`PipelineHost.run_batch` serves batched requests.  Each request is checked alone
first (input names, dtypes, declared shapes): a bad one is refused alone.  Requests whose
inputs differ only in their first (batch) dimension are then concatenated into one run,
padded up to a power of two rows so that a few input signatures serve every mix of request
sizes, and the outputs are cut back into one answer per request, but only when the planner
proves that the graph keeps rows apart (:func:`aclpipe.plan.batchable`: no node reduces,
scans, contracts or moves the batch axis).  Outputs that merely lead with the batch dim are
no proof: a ``Cumsum`` over dim 0 keeps the shape and would hand one client another's
numbers.  Other graphs run request by request, concurrently so that the runs still overlap.
A joined run that fails is run again request by request, so only the request at fault fails.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import numpy as np

from ..backends import DEFAULT_DEVICE, parse_device
from ..graph import Graph
from ..pipeline import Pipeline
from ..pipeline.batches import as_input, check_inputs
from ..pipeline.several.replicas import ReplicaPipeline
from ..plan import BatchVerdict, batchable
from .bundle import GraphBundle

__all__ = ["PipelineHost", "visible_devices"]

#: Requests that may share a run: (request index, its checked arrays).
_Batch = list[tuple[int, dict[str, np.ndarray]]]
#: Batch verdicts kept, one per request shape (rows aside), oldest dropped first.
_VERDICTS_KEPT = 256


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
        self._verdicts: dict[tuple[Any, ...], BatchVerdict] = {}  # per request shape, rows aside
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

    async def run_batch(self, requests: Sequence[Mapping[str, Any]], *, return_exceptions: bool = False
                        ) -> list[dict[str, np.ndarray] | Exception]:
        """Answer several requests, sharing runs where the graph allows (module docstring).

        Each request is checked alone first; one that is refused, or whose run fails, fails
        alone and the others are answered.  With ``return_exceptions`` its error takes its place
        in the list; otherwise the first error (in request order) is raised once every other
        request has run.
        """
        answers: list[dict[str, np.ndarray] | Exception | None] = [None] * len(requests)
        checked: list[tuple[int, dict[str, np.ndarray]]] = []
        for index, request in enumerate(requests):
            try:
                checked.append((index, self.checked(request)))
            except (ValueError, TypeError, OverflowError) as error:  # what a request can get wrong
                answers[index] = error
        async with anyio.create_task_group() as group:
            for batch in self._share_runs(checked):
                group.start_soon(self._answer, batch, answers)
        finished = [answer for answer in answers if answer is not None]
        assert len(finished) == len(requests), "every request gets an answer or an error"
        failed = [answer for answer in finished if isinstance(answer, Exception)]
        if failed and not return_exceptions:
            raise failed[0]
        return finished

    def checked(self, request: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """One request's arrays, checked against the graph's inputs (names, dtypes, declared
        shapes) before it may join others; a ValueError or TypeError naming what is wrong."""
        arrays = check_inputs(self.graph, self.arrays(request))
        self.graph.signature(**arrays)  # GraphError (a ValueError) for shapes the inputs do not take
        return arrays

    def batch_verdict(self, arrays: Mapping[str, np.ndarray]) -> BatchVerdict:
        """Whether requests shaped like ``arrays`` (rows aside) may share a run: the planner's
        proof that the graph keeps rows apart (:func:`aclpipe.plan.batchable`), cached per shape."""
        key = tuple((name, array.shape[1:]) for name, array in sorted(arrays.items()))
        verdict = self._verdicts.get(key)
        if verdict is None:
            if any(array.ndim == 0 for array in arrays.values()):
                verdict = BatchVerdict(False, reason="a scalar input has no rows to stack")
            else:
                verdict = batchable(self.graph, **{name: array.shape for name, array in arrays.items()})
            if len(self._verdicts) >= _VERDICTS_KEPT:  # shapes are the client's choice: stay bounded
                self._verdicts.pop(next(iter(self._verdicts)))
            self._verdicts[key] = verdict
        return verdict

    def _share_runs(self, checked: list[tuple[int, dict[str, np.ndarray]]]) -> list[_Batch]:
        """Checked requests grouped into runs: those of one shape (rows aside) share a run when
        the graph is batchable at that shape; every other request runs alone."""
        shared: dict[tuple[Any, ...], _Batch] = {}
        alone: list[_Batch] = []
        for index, arrays in checked:
            rows = {array.shape[0] if array.ndim else None for array in arrays.values()}
            if len(checked) < 2 or len(rows) != 1 or not self.batch_verdict(arrays).ok:
                alone.append([(index, arrays)])
                continue
            key = tuple((name, array.shape[1:]) for name, array in sorted(arrays.items()))
            shared.setdefault(key, []).append((index, arrays))
        return list(shared.values()) + alone

    async def _answer(self, batch: _Batch, answers: list[dict[str, np.ndarray] | Exception | None]) -> None:
        """Run ``batch`` (joined when it holds several requests) and file each request's answer.
        When a joined run fails, its requests run again one by one, so that a request whose
        values the device refuses (or a joined batch too large for the device) fails alone."""
        if len(batch) > 1:
            try:
                for (index, _), outputs in zip(batch, await self._run_joined([a for _, a in batch])):
                    answers[index] = outputs
                return
            except Exception:  # noqa: BLE001 - each request then runs, and fails, on its own
                pass
        for index, arrays in batch:
            try:
                answers[index] = await self.pipeline.run(**arrays)
            except Exception as error:  # noqa: BLE001 - filed for this request alone; the others go on
                answers[index] = error

    async def _run_joined(self, batches: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """One run over the stacked requests (padded to a power of two rows, so that a few
        signatures serve every mix of sizes), cut back into one answer per request."""
        names = sorted(batches[0])
        rows = [batch[names[0]].shape[0] for batch in batches]
        padded = 1 << max(sum(rows) - 1, 0).bit_length()
        joined = {n: _pad(np.concatenate([batch[n] for batch in batches]), padded) for n in names}
        outputs = await self.pipeline.run(**joined)
        answers, start = [], 0
        for count in rows:
            answers.append({name: out[start:start + count].copy() for name, out in outputs.items()})
            start += count
        return answers

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
    # Repeat the last real row (as shape buckets do): the padding holds values a real row holds,
    # so it cannot raise where no request would (a log of zero, a division by zero).
    return np.concatenate([array, np.repeat(array[-1:], rows - array.shape[0], axis=0)])
