"""``PipelineActor``: a Ray actor that owns a pipeline on the NPUs Ray assigned to it.

The actor asks Ray for ``"NPU"`` resources; Ray places it on a node with free NPUs and sets
``ASCEND_RT_VISIBLE_DEVICES``, and the actor drives those devices (:class:`PipelineHost`).
``await actor.run.remote(x=batch)`` is one run: arrays travel through Ray's object store,
which hands large ones over without copies (read-only views).  Ray's own fault tolerance
restarts a dead actor (``max_restarts``) and retries its calls (``max_task_retries``);
:func:`pipeline_actor` configures both.  Ray keeps an actor that no node can host pending
for ever, so :func:`pipeline_actor` first checks that some node of the cluster has the NPUs
asked for, and refuses at once otherwise.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import ray

from ..graph import Graph
from .bundle import GraphBundle
from .host import PipelineHost

__all__ = ["PipelineActor", "pipeline_actor"]


class _PipelineActor:
    """The actor's methods (see the module docstring); ``PipelineActor`` is its Ray actor class."""

    def __init__(self, graph: GraphBundle | Graph | str | bytes, *, backend: str | None = None, npus: int = 1,
                 **pipeline_options: Any):
        self.host = PipelineHost(graph, backend=backend, npus=npus, **pipeline_options)

    async def run(self, **inputs: Any) -> dict[str, np.ndarray]:
        """One run of the graph on this actor's devices."""
        return await self.host.run(**inputs)

    async def run_batch(self, requests: list[dict[str, Any]], *, return_exceptions: bool = False
                        ) -> list[dict[str, np.ndarray] | Exception]:
        """Several requests, joined into shared runs where the planner proves the graph keeps
        rows apart; a bad request fails alone (see :meth:`PipelineHost.run_batch`)."""
        return await self.host.run_batch(requests, return_exceptions=return_exceptions)

    def stats(self) -> dict[str, Any]:
        """The pipeline's figures and the devices it drives."""
        return self.host.stats()

    async def aclose(self) -> None:
        """Close the pipeline and its devices (the actor itself stays until Ray kills it)."""
        await self.host.aclose()


#: ``PipelineActor.remote(graph_bundle, npus=1, ...)``: one NPU and no CPU reserved by default
#: (the pipeline's own threads do the work); ``.options(...)`` changes what it asks Ray for.
PipelineActor = ray.remote(num_cpus=0, resources={"NPU": 1})(_PipelineActor)
PipelineActor.__doc__ = _PipelineActor.__doc__


def pipeline_actor(graph: Graph | GraphBundle | str | bytes, *, npus: int = 1, backend: str | None = None,
                   max_restarts: int = 3, max_task_retries: int = 0, **pipeline_options: Any) -> Any:
    """Start a :data:`PipelineActor` on ``npus`` NPUs; returns its handle.

    ``graph`` is packed once here (:class:`GraphBundle`).  If the actor's process dies, Ray
    restarts it up to ``max_restarts`` times and reruns its constructor; calls that were in
    flight are retried ``max_task_retries`` times (0: they raise ``RayActorError``).

    Raises
    ------
    ValueError
        ``npus`` is not a positive int, or no live node of the cluster has that many NPUs
        (Ray would keep the actor pending for ever).
    """
    check_cluster_npus(npus)
    options = {"resources": {"NPU": npus}, "max_restarts": max_restarts, "max_task_retries": max_task_retries}
    return PipelineActor.options(**options).remote(GraphBundle.of(graph), backend=backend, npus=npus,
                                                   **pipeline_options)


def check_cluster_npus(npus: int, what: str = "an actor") -> None:
    """Refuse an actor (or a Serve replica) that no live node can host: its NPUs must all be
    on one node, or Ray keeps it pending for ever."""
    if isinstance(npus, bool) or not isinstance(npus, int) or npus < 1:
        raise ValueError(f"npus must be a positive int, got {npus!r}")
    if not ray.is_initialized():
        ray.init()  # what .remote() would do; the cluster must be known to be checked
    nodes = ray.nodes()  # type: ignore[no-untyped-call]  # Ray leaves it unannotated
    per_node = [float(node.get("Resources", {}).get("NPU", 0)) for node in nodes if node.get("Alive")]
    largest = max(per_node, default=0.0)
    if npus > largest:
        raise ValueError(f"{what} on {npus} NPUs cannot be placed: the most NPUs on one live node of this Ray "
                         f"cluster is {largest:g} ({sum(per_node):g} in all, on {len(per_node)} node(s)), so Ray "
                         "would keep it pending for ever; ask for fewer NPUs or add a node with enough "
                         "(ray start --resources='{\"NPU\": N}')")
