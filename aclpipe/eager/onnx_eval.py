"""ONNX models evaluated op by op: :class:`EagerContext`, a
:class:`~aclpipe.onnx.context.BuildContext` that runs each op at once.

Every ``ctx.op(...)`` is one :class:`~aclpipe.eager.OpRunner` run on the context's stream:
inputs are uploaded, the op goes through phase one (cached), its workspace strategy and phase
two, and the outputs come back as numpy arrays, which are the context's values.  It is the
reference path the ONNX conformance tests use: slow (a device round trip per op) but with
nothing between the converters and the catalog kernels.  It lives here, beside the runner it
drives, and not in :mod:`aclpipe.onnx`, so that the importer never touches a device
(ARCHITECTURE.md 2.2).  It needs the ``onnx`` extra; :mod:`aclpipe.eager` does not import it.

.. code-block:: python

    with EagerContext(aclpipe.open_device("sim")) as ctx:
        (y,) = ctx.run_model(model, {"x": x})
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

import numpy as np
import onnx

from ..dtypes import DType, as_dtype
from ..onnx import check_model, emit_graph, model_opsets
from ..runtime import Device, Stream
from ..runtime.workspaces import WorkspaceStrategy
from .runner import OpRunner

__all__ = ["EagerContext"]


class EagerContext:
    """Evaluate catalog ops eagerly on ``device``; values are numpy arrays.

    Parameters
    ----------
    device:
        The device to run on.
    stream:
        The stream to use (default: a new one, closed with the context).
    workspace:
        The runner's workspace strategy (name or instance).
    """

    def __init__(self, device: Device, stream: Stream | None = None, *,
                 workspace: str | WorkspaceStrategy = "cached"):
        self.device = device
        self._own_stream = stream is None
        self.stream = stream if stream is not None else device.create_stream()
        self.workspace = workspace
        self.ops_run = 0
        self.opsets: dict[str, int] = {}  # the model's, while run_model walks it (subgraphs use them)

    # -- the BuildContext interface ----------------------------------------------------------
    def op(self, name: str, *inputs: Any, outputs: int = 1, **attrs: Any) -> Any:
        runner = OpRunner(name, self.stream, workspace=self.workspace, node=f"onnx eager {name}")
        for value in inputs:
            runner.input(value)
        for _ in range(outputs):
            runner.output()
        results = runner.attr(**attrs).run()
        self.ops_run += 1
        return results[0] if outputs == 1 else tuple(results)

    def constant(self, array: np.ndarray) -> np.ndarray:
        array = np.asarray(array)
        as_dtype(array.dtype)  # refuse dtypes the device does not have
        return array

    def shape(self, value: Any) -> tuple[int, ...]:
        return tuple(int(dim) for dim in np.shape(value))

    def dtype(self, value: Any) -> DType:
        return as_dtype(np.asarray(value).dtype)

    def static_value(self, value: Any, what: str) -> np.ndarray:
        return np.asarray(value)  # everything is known when evaluating eagerly

    def subgraph(self, graph: onnx.GraphProto, feeds: Mapping[str, Any], scope: Mapping[str, Any],
                 label: str) -> list[Any]:
        values = emit_graph(self, graph, feeds, self.opsets, scope)
        return [values[output.name] for output in graph.output]

    # -- whole models ------------------------------------------------------------------------
    def run_model(self, model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Evaluate ``model`` on ``feeds`` (graph input name -> array); returns the graph outputs
        in order.  Raises :class:`~aclpipe.errors.UnsupportedOpError` listing every unsupported
        op type before running anything."""
        check_model(model)
        self.opsets = model_opsets(model)
        values = emit_graph(self, model.graph, {name: self.constant(v) for name, v in feeds.items()}, self.opsets)
        return [np.asarray(values[output.name]) for output in model.graph.output]

    def close(self) -> None:
        if self._own_stream:
            self.stream.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
