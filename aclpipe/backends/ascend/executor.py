"""aclnn executors on CANN: phase one, repeatable executors, re-pointing, phase two.

An op missing from the table, or whose symbols the loaded ``libopapi`` lacks, is an
:class:`UnsupportedOpError` naming the op and the symbol, whatever its arguments.  Phase one
then runs the catalog's ``OpSpec.prepare``, so that invalid calls fail with the same message
on every backend before any C code runs, and then the real ``aclnnXxxGetWorkspaceSize``
(whose own refusals come back with ``aclGetRecentErrMsg``).

Python refuses what would hand CANN a dangling executor (a destroyed one, a single-use one
already launched) with the simulator's messages, since the real library would crash instead
of returning 561103.  A single-use executor's tensor handles are released right after its
launch; a repeatable one keeps them until :meth:`Operators.destroy`.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...errors import BackendError, UnsupportedOpError, error_from_code
from ...ops import get_op
from ...tensor import TensorDesc
from .cdefs import ffi
from .ops_table import OPS, BuiltCall, OpBinding
from .tensors import CallArguments

if TYPE_CHECKING:
    from .library import CannLibrary

__all__ = ["AscendExecutor", "Operators"]


class AscendExecutor:
    """What phase one returns: an ``aclOpExecutor *`` and the handles it was built from."""

    def __init__(self, op: str, handle: Any, workspace_size: int, phase_two: Any, phase_two_name: str,
                 arguments: CallArguments, call: BuiltCall):
        self.op = op
        self.handle = handle
        self.workspace_size = int(workspace_size)
        self.phase_two = phase_two
        self.phase_two_name = phase_two_name
        self.arguments = arguments
        self.inputs = call.inputs
        self.outputs = call.outputs
        self.repeatable = False
        self.launched = False
        self.destroyed = False
        self.lock = threading.Lock()

    def __repr__(self) -> str:
        state = "destroyed" if self.destroyed else "repeatable" if self.repeatable else "single-use"
        return f"<AscendExecutor aclnn{self.op} {state} workspace={self.workspace_size}>"


def _refuse(op: str, code: int, detail: str, context: Mapping[str, Any] | None = None) -> BackendError:
    return error_from_code(code, f"aclnn{op}: {detail}", {"op": op, **dict(context or {})})


class Operators:
    """Phase one and two of aclnn operators for one device.

    Parameters
    ----------
    library:
        The loaded CANN libraries.
    enter:
        Makes the device's context current on the calling thread.
    """

    def __init__(self, library: CannLibrary, enter: Callable[[], None]):
        self._library = library
        self._enter = enter
        self._resolved: dict[str, tuple[OpBinding, Any, Any]] = {}
        self._live: weakref.WeakSet[AscendExecutor] = weakref.WeakSet()

    def resolve(self, op: str) -> tuple[OpBinding, Any, Any]:
        """The binding and both phase functions of ``op``, or :class:`UnsupportedOpError`."""
        if op in self._resolved:
            return self._resolved[op]
        binding = OPS.get(op)
        if binding is None:
            raise UnsupportedOpError(
                f"aclnn{op}: the ascend backend has no binding for catalog op {op!r} "
                f"(aclpipe/backends/ascend/ops_table.py binds {', '.join(sorted(OPS))}); use the 'sim' backend")
        functions = [self._library.opapi_function(name) for name in (binding.phase_one, binding.phase_two)]
        for name, function in zip((binding.phase_one, binding.phase_two), functions):
            if function is None:
                libraries = ", ".join(path.name for path in self._library.opapi_paths)
                raise UnsupportedOpError(
                    f"aclnn{op}: symbol {name} is missing from {libraries} in {self._library.directory}: this CANN "
                    "installation does not provide the op (install a CANN release that has it, or use 'sim')")
        self._resolved[op] = (binding, functions[0], functions[1])
        return self._resolved[op]

    # -- phase one --------------------------------------------------------------------------
    def prepare(self, op: str, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> AscendExecutor:
        spec = get_op(op)
        binding, phase_one, phase_two = self.resolve(op)  # unsupported whatever the arguments
        spec.prepare(list(inputs), list(outputs), dict(attrs))  # the catalog's checks and messages first
        arguments = CallArguments(self._library)
        try:
            call = binding.build(arguments, inputs, outputs, {**spec.attrs, **attrs})
            size, executor = ffi.new("uint64_t *"), ffi.new("aclOpExecutor **")
            self._enter()
            code = phase_one(*call.values, size, executor)
            self._library.check(code, binding.phase_one, {"op": op})
        except BaseException:
            self._release_quietly(arguments)
            raise
        prepared = AscendExecutor(op, executor[0], size[0], phase_two, binding.phase_two, arguments, call)
        self._live.add(prepared)
        return prepared

    @staticmethod
    def _release_quietly(arguments: CallArguments) -> None:
        try:
            arguments.release()
        except BackendError:
            pass  # the error being raised matters more than a failed cleanup

    def set_repeatable(self, executor: AscendExecutor) -> None:
        with executor.lock:
            if executor.destroyed:
                raise _refuse(executor.op, 561103, "the executor was destroyed")
            if executor.launched:
                raise _refuse(executor.op, 561103, "aclSetAclOpExecutorRepeatable must be called right after "
                                                   "phase one, before the executor is launched")
            if not self._library.has_repeatable_executors:
                raise _refuse(executor.op, 561102, "this CANN's libnnopbase has no aclSetAclOpExecutorRepeatable")
            code = self._library.nnopbase.aclSetAclOpExecutorRepeatable(executor.handle)
            self._library.check(code, "aclSetAclOpExecutorRepeatable", {"op": executor.op})
            executor.repeatable = True

    def set_tensor_address(self, executor: AscendExecutor, index: int, *, output: bool, address: int) -> None:
        kind = "output" if output else "input"
        with executor.lock:
            if executor.destroyed:
                raise _refuse(executor.op, 561103, "the executor was destroyed")
            if not executor.repeatable:
                raise _refuse(executor.op, 561102, "tensor addresses can only be re-pointed on a repeatable executor")
            tensor = (executor.outputs if output else executor.inputs).get(index, ffi.NULL)
            if tensor == ffi.NULL:
                raise _refuse(executor.op, 161002, f"{kind} index {index} out of range (or absent at phase one)")
            if address % 32:
                raise _refuse(executor.op, 161002, f"{kind} {index} address {address:#x} is not 32-byte aligned")
            name = "aclSetOutputTensorAddr" if output else "aclSetInputTensorAddr"
            code = getattr(self._library.nnopbase, name)(executor.handle, index, tensor, ffi.cast("void *", address))
            self._library.check(code, name, {"op": executor.op})

    # -- phase two --------------------------------------------------------------------------
    def launch(self, executor: AscendExecutor, workspace: int, workspace_size: int, stream: Any,
               context: Mapping[str, Any] | None) -> None:
        with executor.lock:
            self._check_launchable(executor, workspace, workspace_size, context)
            self._enter()
            code = executor.phase_two(ffi.cast("void *", workspace), workspace_size, executor.handle, stream)
            self._library.check(code, executor.phase_two_name, {"op": executor.op, **dict(context or {})})
            executor.launched = True
            if not executor.repeatable:
                executor.handle = ffi.NULL  # phase two consumed it, and it copied what it needs
                executor.arguments.release()

    def check_table_row(self, executor: AscendExecutor, workspace: int, workspace_size: int,
                        context: Mapping[str, Any]) -> None:
        """Refuse an executor a launch table may not hold: one that is not an executor of
        this device, was destroyed, is single-use (a table launches it every run) or would get
        a workspace smaller than phase one asked for."""
        if not isinstance(executor, AscendExecutor) or executor not in self._live:
            raise error_from_code(107000, f"{executor!r} is not an executor of this device", dict(context))
        self._check_launchable(executor, workspace, workspace_size, context)
        if not executor.repeatable:
            raise _refuse(executor.op, 561103, "a launch table launches its executors at every run: make them "
                                               "repeatable right after phase one", context)

    @staticmethod
    def _check_launchable(executor: AscendExecutor, workspace: int, workspace_size: int,
                          context: Mapping[str, Any] | None) -> None:
        op, need = executor.op, executor.workspace_size
        if executor.destroyed:
            raise _refuse(op, 561103, "the executor was destroyed", context)
        if executor.launched and not executor.repeatable:
            raise _refuse(op, 561103, "this single-use executor was already launched; run phase one again, or make "
                                      "it repeatable right after phase one", context)
        if need > 0 and not workspace:
            raise _refuse(op, 161001, f"workspace is NULL but phase one asked for {need} bytes", context)
        if need > 0 and workspace_size < need:
            raise _refuse(op, 161002, f"workspace of {workspace_size} bytes is smaller than the {need} bytes phase "
                                      "one asked for", context)

    def destroy_all(self) -> None:
        """Destroy every executor still referenced (the device's streams are synchronized)."""
        for executor in list(self._live):
            self.destroy(executor)

    def destroy(self, executor: AscendExecutor) -> None:
        """Free the executor and its handles; idempotent."""
        with executor.lock:
            if executor.destroyed:
                return
            executor.destroyed = True
            handle, executor.handle = executor.handle, ffi.NULL
        if handle != ffi.NULL and self._library.has_repeatable_executors:
            # A repeatable executor must be destroyed; a single-use one never launched (an
            # abandoned call) is freed the same way rather than leaked.
            code = self._library.nnopbase.aclDestroyAclOpExecutor(handle)
            if code and executor.repeatable:
                self._release_quietly(executor.arguments)
                raise self._library.error(code, "aclDestroyAclOpExecutor", {"op": executor.op})
        executor.arguments.release()
