"""One aclnn executor: phase one, made repeatable, re-pointed, launched, destroyed.

The aclnn two-phase API (ARCHITECTURE.md 1): ``aclnnXxxGetWorkspaceSize`` (phase one) checks
the call and returns the workspace it needs and an executor; ``aclnnXxx`` (phase two) launches
it on a stream.  An executor is single-use unless ``aclSetAclOpExecutorRepeatable`` made it
repeatable (the op may refuse); a repeatable one can be re-pointed at new addresses of the
same shapes (``aclSetInputTensorAddr`` / ``aclSetOutputTensorAddr``) and launched again, and
must be destroyed (``aclDestroyAclOpExecutor``) once no launch of it may still run.

Both users of phase one go through :class:`Executor`: a pipeline's programs
(:mod:`aclpipe.pipeline.program`, one per node and slot, kept for the program's life) and the
eager runner's cache (:mod:`aclpipe.eager.executor_cache`, re-pointed call after call).  A
phase-one refusal names the node it was for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..backends.protocol import Backend
from ..errors import BackendError, error_from_code
from ..tensor import TensorDesc

__all__ = ["Executor"]


class Executor:
    """A prepared aclnn call on one backend.

    Attributes
    ----------
    handle:
        The backend's executor (what launch records carry).
    op:
        The op's name (``"Add"``).
    workspace_size:
        Bytes of workspace each launch needs.
    repeatable:
        Whether it may be launched more than once (and re-pointed).
    """

    __slots__ = ("_backend", "handle", "op", "repeatable", "workspace_size")

    def __init__(self, backend: Backend, handle: Any, op: str):
        self._backend = backend
        self.handle = handle
        self.op = op
        self.workspace_size = int(handle.workspace_size)
        self.repeatable = False

    @classmethod
    def prepare(cls, backend: Backend, op: str, inputs: Sequence[TensorDesc | None],
                outputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any], *, node: str | None = None,
                repeatable: bool = False) -> Executor:
        """Phase one for ``op`` on these tensors; made repeatable when asked and the op allows
        (see :attr:`repeatable`).  A refusal raises the backend's error, with ``node`` and the
        op added to its context when a node is named."""
        try:
            handle = backend.op_prepare(op, inputs, outputs, attrs)
        except BackendError as error:
            if node is None:
                raise
            raise error_from_code(error.code, error.detail or str(error),
                                  {**error.context, "node": node, "op": op}) from error
        executor = cls(backend, handle, op)
        if repeatable:
            executor.make_repeatable()
        return executor

    def make_repeatable(self) -> bool:
        """``aclSetAclOpExecutorRepeatable``; False (the executor stays single-use, valid for
        one launch) when the op refuses."""
        try:
            self._backend.op_set_repeatable(self.handle)
        except BackendError:
            return False
        self.repeatable = True
        return True

    def point(self, tensors: Sequence[TensorDesc | None], *, output: bool) -> None:
        """Point a repeatable executor's inputs (or outputs) at these tensors' addresses."""
        for index, tensor in enumerate(tensors):
            if tensor is not None:
                self._backend.op_set_tensor_address(self.handle, index, output=output, address=tensor.address)

    def launch(self, workspace: int, workspace_size: int, stream: Any, context: Mapping[str, Any] | None = None
               ) -> None:
        """Phase two on ``stream`` (a backend stream handle) with that workspace."""
        self._backend.op_launch(self.handle, workspace, workspace_size, stream, context)

    def destroy(self) -> None:
        """``aclDestroyAclOpExecutor``: the caller made sure no launch of it may still run."""
        self._backend.op_destroy(self.handle)

    def __repr__(self) -> str:
        return f"<Executor {self.op} workspace={self.workspace_size}{' repeatable' if self.repeatable else ''}>"
