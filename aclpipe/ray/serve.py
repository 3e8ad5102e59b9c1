"""``app(graph, ...)``: a Ray Serve application answering inferences over HTTP.

Each replica of the deployment is a Ray actor holding a :class:`PipelineHost` on the NPUs
it asked for (``ray_actor_options={"resources": {"NPU": n}}``).  Requests (JSON, ``.npy`` or
``.npz``: :mod:`.codec`) are checked one by one (a bad one is answered 400 alone), then
grouped by ``serve.batch`` (up to ``batch_size`` requests, waiting at most
``batch_wait_timeout_s`` for more) and handed to :meth:`PipelineHost.run_batch`, which joins
them into one run only when the planner proves the graph keeps rows apart, and otherwise runs
them one by one.  A request whose run fails gets its own error; the others their answers.
``GET`` answers the replica's pipeline figures.

Fault tolerance is Ray Serve's, configured here, not reimplemented: the controller restarts
a replica whose process died, and one whose ``check_health`` fails (every device of its
pipeline out of rotation after faults) every ``health_check_period_s``.
"""

from __future__ import annotations

import json
from typing import Any, cast

import numpy as np
from ray import serve
from starlette.requests import Request
from starlette.responses import Response

from ..errors import DevicesUnavailableError, ExecutionError
from ..graph import Graph
from .actor import check_cluster_npus
from .bundle import GraphBundle
from .codec import JSON, RequestError, decode_request, encode_response
from .host import PipelineHost

__all__ = ["PipelineServer", "app"]


class PipelineServer:
    """The deployment's replica: decodes, checks and batches requests into its pipeline."""

    def __init__(self, graph: GraphBundle, batch_size: int, batch_wait_timeout_s: float, host_options: dict[str, Any]):
        self.host = PipelineHost(graph, **host_options)
        self.inputs = self.host.graph.inputs
        batching = cast(Any, self.infer)  # serve.batch's setters are missing from Ray's types
        batching.set_max_batch_size(batch_size)
        batching.set_batch_wait_timeout_s(batch_wait_timeout_s)

    async def __call__(self, request: Request) -> Response:
        if request.method == "GET":
            return Response(json.dumps(self.host.stats(), default=str), media_type=JSON)
        try:
            inputs, answer_as = decode_request(await request.body(), request.headers.get("content-type", JSON),
                                               list(self.inputs))
            arrays = self._checked(inputs)
            outputs = await self.infer(arrays)
            if isinstance(outputs, Exception):  # this request's own failure; the batch went on
                raise outputs
        except RequestError as error:
            return _error(error.status, str(error))
        except (ValueError, TypeError) as error:  # shapes or dtypes the graph does not take
            return _error(400, str(error))
        except DevicesUnavailableError as error:
            return _error(503, str(error))
        except ExecutionError as error:
            return _error(500, str(error))
        body, media_type = encode_response(outputs, answer_as)
        return Response(body, media_type=media_type)

    def _checked(self, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
        """The request's arrays, refused here (alone) rather than failing a whole batch."""
        if set(inputs) != set(self.inputs):
            raise RequestError(f"the graph takes inputs {sorted(self.inputs)}, the request has {sorted(inputs)}")
        try:
            arrays = self.host.arrays(inputs)
        except (ValueError, TypeError, OverflowError) as error:
            raise RequestError(f"the inputs cannot be read as the graph's dtypes: {error}") from None
        for name, spec in self.inputs.items():
            if arrays[name].ndim != len(spec.shape):
                raise RequestError(f"input {name!r} must have {len(spec.shape)} dimensions, got shape "
                                   f"{arrays[name].shape}")
        return self.host.checked(arrays)

    @serve.batch(max_batch_size=8, batch_wait_timeout_s=0.005)
    async def infer(self, requests: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray] | Exception]:
        """A batch of checked requests, answered together (``batch_size`` at most): joined into
        one run only where the planner proves the graph keeps rows apart, and each request's
        failure, if any, in its own place."""
        return await self.host.run_batch(requests, return_exceptions=True)

    def check_health(self) -> None:
        """Ray Serve calls this periodically; raising makes it replace the replica."""
        if not self.host.healthy():
            raise RuntimeError("every device of this replica's pipeline is out of rotation")


def _error(status: int, message: str) -> Response:
    return Response(json.dumps({"error": message}), status_code=status, media_type=JSON)


def app(graph: Graph | GraphBundle | str | bytes, *, num_replicas: int = 1, batch_size: int = 8,
        batch_wait_timeout_s: float = 0.005, npus_per_replica: int = 1, backend: str | None = None,
        name: str = "aclpipe", health_check_period_s: float = 2.0, health_check_timeout_s: float = 30.0,
        max_ongoing_requests: int | None = None, **pipeline_options: Any) -> Any:
    """A Serve application running ``graph`` on ``num_replicas`` replicas of ``npus_per_replica`` NPUs.

    Deploy it with ``serve.run(app(...))``; ``POST`` a request to its route.  ``pipeline_options``
    go to each replica's :class:`~aclpipe.Pipeline` (``streams``, ``depth``, ``split``, ...).
    """
    for label, value in (("num_replicas", num_replicas), ("batch_size", batch_size),
                         ("npus_per_replica", npus_per_replica)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label} must be a positive int, got {value!r}")
    check_cluster_npus(npus_per_replica, "a Serve replica")
    deployment = serve.deployment(
        name=name, num_replicas=num_replicas,
        ray_actor_options={"num_cpus": 0, "resources": {"NPU": npus_per_replica}},
        health_check_period_s=health_check_period_s, health_check_timeout_s=health_check_timeout_s,
        max_ongoing_requests=max_ongoing_requests or 4 * batch_size)(PipelineServer)
    host_options = {"backend": backend, "npus": npus_per_replica, **pipeline_options}
    return deployment.bind(GraphBundle.of(graph), batch_size, batch_wait_timeout_s, host_options)
