"""aclpipe on Ray: a pipeline per NPU worker, and a Ray Serve application (``pip install 'aclpipe[ray]'``).

- :data:`PipelineActor` / :func:`pipeline_actor`: a Ray actor owning a :class:`~aclpipe.Pipeline`
  on the NPUs Ray assigned it (the ``"NPU"`` resource; Ray sets ``ASCEND_RT_VISIBLE_DEVICES``).
- :func:`app`: a Ray Serve application that batches HTTP requests (JSON, ``.npy``, ``.npz``)
  into replicas' pipelines; Serve restarts failed replicas.
- :class:`GraphBundle`: how a graph travels to the workers.

Ray does placement, restarts and transport; aclpipe does what runs on each NPU.
"""

from __future__ import annotations

try:
    import ray  # noqa: F401  (checked first, so that a missing ray names the extra)
except ModuleNotFoundError as _error:
    from .._extras import missing_extra

    raise missing_extra(_error, "ray", "aclpipe.ray (pipelines on Ray workers)") from None

from .actor import PipelineActor, pipeline_actor
from .bundle import GraphBundle
from .host import PipelineHost, visible_devices
from .serve import PipelineServer, app

__all__ = ["GraphBundle", "PipelineActor", "PipelineHost", "PipelineServer", "app", "pipeline_actor",
           "visible_devices"]
