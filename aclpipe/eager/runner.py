"""OpRunner: run one aclnn operator, builder style (prepare -> workspace -> execute -> sync).

.. code-block:: python

    runner = OpRunner("Add", stream).input(x).input(y).output().attr(alpha=1.0)
    (z,) = runner.run()                 # numpy in, numpy out
    (z,) = await runner.run_async()     # the same without blocking the event loop

Arguments
---------
``.input(array)`` uploads a numpy array (any scalar or array-like works too);
``.input(buffer, shape=..., dtype=..., strides=..., offset=...)`` passes device memory
described explicitly; ``.input(None)`` passes an absent optional tensor.  ``.output()``
allocates an output whose shape and dtype the op infers (or give ``shape=``/``dtype=``);
``.output(buffer, shape=..., dtype=...)`` writes into device memory you own;
``.output(None)`` leaves an optional output out.  Trailing arguments not given are absent.
``.run()`` returns the outputs the runner allocated, downloaded as numpy arrays, in order.

What a run does
---------------
Phase one goes through the device's :class:`~aclpipe.eager.executor_cache.ExecutorCache` (a
call with the same signature skips it; a changed shape gets a new phase one, never a stale
executor), the workspace comes from the chosen strategy (``"per-call"``, ``"cached"``,
``"pool"`` or ``"static"``, see :mod:`aclpipe.runtime.workspaces`: the same strategies the
pipeline uses), inputs are copied and the op launched on the runner's stream, outputs copied
back, and the run completes:

- :meth:`OpRunner.run` synchronizes the stream, then gives the workspace back with
  ``release_now`` (the synchronization proves the device is done: no event, no host function);
- :meth:`OpRunner.run_async` hands the workspace back with the strategy's ``release_after``
  right after the launch (``per-call``, whose release waits, after completion instead),
  records an event and waits for it in a worker thread (:func:`anyio.to_thread.run_sync`), so
  the event loop never blocks, nothing polls, and no runtime thread enters the loop.  If the
  awaiting task is cancelled, the run still waits (shielded) until the stream has passed it
  before freeing its memory, because the device may still be using it.

Either way a failure on the stream is raised (and cleared from the stream), and every error
names the op and summarizes the call: ``Add(self: float32[2, 3], other: float32[4];
out: float32[2, 3]; alpha=1.0)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

import anyio
import numpy as np

from ..dtypes import Format, as_dtype
from ..errors import AclpipeError, BackendError, error_from_code
from ..graph.builder import is_list_argument
from ..ops import get_op
from ..runtime import DeviceBuffer, HostBuffer, Stream
from ..runtime.workspaces import NO_WORKSPACE, Workspace, WorkspaceStrategy, workspace_strategy
from ..tensor import TensorDesc
from .executor_cache import ExecutorCache, PreparedCall

if TYPE_CHECKING:
    from ..runtime import Event

__all__ = ["OpRunner"]

_SYNC_TIMEOUT = 507046  # ACL_ERROR_RT_STREAM_SYNC_TIMEOUT


class _Allocate:
    """Marker: ``.output()`` with no buffer means 'allocate it for me'."""


_ALLOCATE = _Allocate()


@dataclass
class _Arg:
    """One tensor argument as declared (nothing on the device yet)."""

    array: np.ndarray | None = None  # numpy data to upload (inputs)
    buffer: DeviceBuffer | None = None  # caller-owned device memory
    desc: TensorDesc | None = None  # shape/dtype/strides/offset/format; address 0 until bound
    allocate: bool = False  # a runner-allocated output, returned as numpy
    shape: tuple[int, ...] | None = None  # what the caller fixed of an inferred output
    dtype: Any = None


@dataclass
class _Bound:
    """A run's device state: descriptors with addresses, and what the run owns."""

    inputs: list[TensorDesc | None]
    outputs: list[TensorDesc | None]
    owned: list[DeviceBuffer]
    uploads: list[tuple[DeviceBuffer, np.ndarray]]
    returned: list[tuple[int, DeviceBuffer]]  # (output index, buffer) to download
    # What is launched: the op itself, or for a view op the copy of the view into the output.
    launch_op: str = ""
    launch_inputs: list[TensorDesc | None] = field(default_factory=list)
    launch_outputs: list[TensorDesc | None] = field(default_factory=list)
    launch_attrs: dict[str, Any] = field(default_factory=dict)


class OpRunner:
    """A single aclnn operator call, built argument by argument.

    Parameters
    ----------
    op:
        The catalog name (``"Add"``, ``"Softmax"``, ...).
    stream:
        The stream the op (and its copies) run on.
    workspace:
        ``"per-call"``, ``"cached"`` (default), ``"pool"`` or ``"static"`` (the device's shared
        instance), or a :class:`~aclpipe.runtime.workspaces.WorkspaceStrategy` of your own.
    cache:
        The executor cache (default: the device's shared one).
    node:
        A name for the launch, shown in errors and sanitizer reports.

    Raises
    ------
    UnsupportedOpError
        When ``op`` is not in the catalog.
    """

    def __init__(self, op: str, stream: Stream, *, workspace: str | WorkspaceStrategy = "cached",
                 cache: ExecutorCache | None = None, node: str | None = None):
        if not isinstance(stream, Stream):
            raise TypeError(f"OpRunner needs a Stream, got {type(stream).__name__}")
        self.op = op
        self.spec = get_op(op)
        self.stream = stream
        self.device = stream.device
        self.workspace = (workspace if isinstance(workspace, WorkspaceStrategy)
                          else workspace_strategy(self.device, workspace))
        self.cache = cache if cache is not None else ExecutorCache.for_device(self.device)
        self.node = node or f"OpRunner {op}"
        self._inputs: list[_Arg | None] = []
        self._outputs: list[_Arg | None] = []
        self._attrs: dict[str, Any] = {}
        self._parked: list[tuple[_Bound, Workspace]] = []  # memory of runs whose sync timed out

    # -- building ---------------------------------------------------------------------------
    def input(self, value: Any, *, shape: tuple[int, ...] | None = None, dtype: Any = None,
              strides: tuple[int, ...] | None = None, offset: int = 0, format: Format | str | None = None,
              ) -> OpRunner:
        """Add the next input: a numpy array (uploaded), a :class:`DeviceBuffer` with ``shape``
        and ``dtype``, or None for an absent optional input."""
        if value is None:
            self._inputs.append(None)
        elif isinstance(value, DeviceBuffer):
            self._inputs.append(_Arg(buffer=value, desc=self._describe(value, shape, dtype, strides, offset, format)))
        elif isinstance(value, (HostBuffer, TensorDesc)):
            raise TypeError(f"{self.op} input {len(self._inputs)}: pass a numpy array or a DeviceBuffer, "
                            f"not a {type(value).__name__}")
        else:
            array = np.asarray(value)
            if dtype is not None:
                array = array.astype(as_dtype(dtype).numpy)
            array = np.require(array, requirements="C")  # not ascontiguousarray: it makes a 0-d array 1-d
            desc = TensorDesc(array.shape, as_dtype(array.dtype), format=_format(format))
            self._inputs.append(_Arg(array=array, desc=desc))
        return self

    def output(self, value: DeviceBuffer | _Allocate | None = _ALLOCATE, *, shape: tuple[int, ...] | None = None,
               dtype: Any = None, strides: tuple[int, ...] | None = None, offset: int = 0,
               format: Format | str | None = None) -> OpRunner:
        """Add the next output: allocated by the runner (default; shape and dtype inferred unless
        given) and returned by :meth:`run`, a :class:`DeviceBuffer` you own with ``shape`` and
        ``dtype``, or None for an absent optional output."""
        if value is None:
            self._outputs.append(None)
        elif isinstance(value, DeviceBuffer):
            self._outputs.append(_Arg(buffer=value, desc=self._describe(value, shape, dtype, strides, offset, format)))
        elif isinstance(value, _Allocate):
            desc = None
            if shape is not None and dtype is not None:
                desc = TensorDesc(tuple(shape), as_dtype(dtype), format=_format(format))
            self._outputs.append(_Arg(desc=desc, allocate=True, shape=None if shape is None else tuple(shape),
                                      dtype=None if dtype is None else as_dtype(dtype)))
        else:
            raise TypeError(f"{self.op} output {len(self._outputs)}: pass a DeviceBuffer, None, or nothing "
                            f"(to have it allocated), not a {type(value).__name__}")
        return self

    def attr(self, **attrs: Any) -> OpRunner:
        """Set attributes (later calls override earlier values); a name the op does not take
        is refused here (a ``TypeError``, as for an unknown keyword), never ignored."""
        problem = self.spec.unknown_attrs(attrs)
        if problem is not None:
            raise TypeError(f"{self.op}: {problem}")
        self._attrs.update(attrs)
        return self

    def _describe(self, buffer: DeviceBuffer, shape: tuple[int, ...] | None, dtype: Any,
                  strides: tuple[int, ...] | None, offset: int, format: Format | str | None) -> TensorDesc:
        if shape is None or dtype is None:
            raise ValueError(f"{self.op}: a DeviceBuffer argument needs shape= and dtype= (the buffer is "
                             "untyped bytes)")
        if buffer.device is not self.device:
            raise ValueError(f"{self.op}: {buffer!r} belongs to {buffer.device.name}, the stream to "
                             f"{self.device.name}")
        desc = TensorDesc(tuple(shape), as_dtype(dtype), tuple(strides or ()), offset, _format(format),
                          buffer.address)
        if desc.extent_bytes > buffer.nbytes:
            raise ValueError(f"{self.op}: {desc} needs {desc.extent_bytes} bytes, the buffer has "
                             f"{buffer.nbytes}")
        return desc

    # -- description ------------------------------------------------------------------------
    def summary(self) -> str:
        """``Op(name: dtype[shape], ...; out: dtype[shape]; attr=value)`` for error messages."""
        def names(declared: tuple[str, ...], count: int, prefix: str) -> list[str]:
            return [declared[i] if i < len(declared) else f"{prefix}{i}" for i in range(count)]

        def text(arg: _Arg | None) -> str:
            if arg is None:
                return "None"
            return str(arg.desc) if arg.desc is not None else "(inferred)"

        ins = ", ".join(f"{n}: {text(a)}" for n, a in zip(names(self.spec.inputs, len(self._inputs), "input"),
                                                          self._inputs))
        outs = ", ".join(f"{n}: {text(a)}" for n, a in zip(names(self.spec.outputs, len(self._outputs), "out"),
                                                           self._outputs))
        attrs = ", ".join(f"{k}={v!r}" for k, v in self._attrs.items())
        return f"{self.op}({'; '.join(part for part in (ins, outs, attrs) if part)})"

    def __repr__(self) -> str:
        return f"<OpRunner {self.summary()} on {self.stream.name}>"

    # -- running ----------------------------------------------------------------------------
    def run(self, *, timeout: float | None = None) -> list[np.ndarray]:
        """Run the op and wait; returns the runner-allocated outputs as numpy arrays.

        ``timeout`` (seconds) bounds the final stream synchronization; when it expires the
        run's memory is kept (the device may still use it) until a later run on this runner
        completes, and the timeout error is raised.
        """
        bound, call, workspace = None, None, NO_WORKSPACE
        try:
            bound = self._bind()
            call = self._prepare(bound)
            workspace = self.workspace.acquire(call.workspace_size, self.stream, call.key)
            staging = self._enqueue(bound, call, workspace, release=False)
            self.stream.sync(timeout)
            self.workspace.release_now(workspace)  # synchronized: no event or host function needed
            self._release_parked()  # the stream passed every earlier run too
            return self._collect(bound, staging)
        except BaseException as error:  # noqa: BLE001 - memory is settled, then it is raised again
            if isinstance(error, BackendError) and error.code == _SYNC_TIMEOUT and bound is not None:
                # The device may still use this run's memory: keep it until a later run on
                # this stream completes instead of waiting here for a launch that may hang.
                self._parked.append((bound, workspace))
                bound, workspace = None, NO_WORKSPACE
            self._fail(bound, call, workspace, drain=True)
            self._raise_explained(error)
        finally:
            self._free(bound)

    async def run_async(self) -> list[np.ndarray]:
        """Run the op without blocking the event loop; returns as :meth:`run` does."""
        bound, call, workspace = None, None, NO_WORKSPACE
        try:
            bound = self._bind()
            call = self._prepare(bound)
            workspace = await self.workspace.acquire_async(call.workspace_size, self.stream, call.key)
            staging = self._enqueue(bound, call, workspace, release=not self.workspace.blocking_release)
            await _completion(self.stream.record(), self.stream)
            self._release_parked()
            if not workspace._released:
                self.workspace.release_now(workspace)  # the completion event passed it
            return self._collect(bound, staging)
        except BaseException as error:  # noqa: BLE001 - memory is settled, then it is raised again
            with anyio.CancelScope(shield=True):
                if bound is not None:
                    await _drained(self.stream)
                self._fail(bound, call, workspace, drain=False)
            self._raise_explained(error)
        finally:
            self._free(bound)

    def _bind(self) -> _Bound:
        """Allocate device memory for uploads and runner-owned outputs; nothing is enqueued."""
        owned: list[DeviceBuffer] = []
        bound = _Bound([], [], owned, [], [])
        try:
            for arg in self._inputs:
                bound.inputs.append(self._bind_input(arg, bound))
            self._pad(bound.inputs, self.spec.inputs)
            for index, (arg, desc) in enumerate(zip(self._outputs, self._output_descs(bound.inputs))):
                bound.outputs.append(self._bind_output(index, arg, desc, bound))
            self._pad(bound.outputs, self.spec.outputs)
        except BaseException:
            self._free(bound)
            raise
        return bound

    def _bind_input(self, arg: _Arg | None, bound: _Bound) -> TensorDesc | None:
        if arg is None:
            return None
        assert arg.desc is not None
        if arg.buffer is not None:
            arg.buffer.check_open()
            return arg.desc  # bound to the buffer's address when declared
        assert arg.array is not None
        buffer = self.device.alloc(max(arg.array.nbytes, 1), label=f"{self.node} input")
        bound.owned.append(buffer)
        bound.uploads.append((buffer, arg.array))
        return arg.desc.at(buffer.address)

    def _bind_output(self, index: int, arg: _Arg | None, desc: TensorDesc | None,
                     bound: _Bound) -> TensorDesc | None:
        if arg is None or desc is None:
            return None
        if arg.buffer is not None:
            arg.buffer.check_open()
            return desc
        buffer = self.device.alloc(max(desc.nbytes, 1), label=f"{self.node} output {index}")
        bound.owned.append(buffer)
        bound.returned.append((index, buffer))
        return desc.at(buffer.address)

    def _output_descs(self, inputs: list[TensorDesc | None]) -> list[TensorDesc | None]:
        """Each declared output's descriptor; outputs left to the runner are inferred by the op."""
        inferred: list[TensorDesc | None] | None = None
        descs: list[TensorDesc | None] = []
        for index, arg in enumerate(self._outputs):
            if arg is None or arg.desc is not None:
                descs.append(None if arg is None else arg.desc)
                continue
            if inferred is None:
                inferred = list(self.spec.infer(inputs, dict(self._attrs)))
            guess = inferred[index] if index < len(inferred) else None
            if guess is None:
                raise ValueError(f"{self.op} does not infer output {index} for these arguments; "
                                 "give its shape= and dtype=")
            descs.append(TensorDesc(guess.shape if arg.shape is None else arg.shape,
                                    guess.dtype if arg.dtype is None else arg.dtype, format=guess.format))
        return descs

    def _pad(self, tensors: list[TensorDesc | None], declared: tuple[str, ...]) -> None:
        # aclnn signatures are fixed; trailing optionals the caller left out are NULL.  A
        # tensor list (Cat's ``tensors``, Split's ``outs``) takes any number.
        if any(is_list_argument(name) for name in declared):
            return
        if len(tensors) > len(declared):
            raise TypeError(f"{self.op} takes {len(declared)} tensors here ({', '.join(declared)}), "
                            f"got {len(tensors)}")
        tensors.extend([None] * (len(declared) - len(tensors)))

    def _prepare(self, bound: _Bound) -> PreparedCall:
        """Phase one (through the cache).  A view op (Reshape, Transpose, ...) launches nothing
        itself: the runner copies the view of its input into the output with ``InplaceCopy``."""
        if self.spec.is_view:
            source = bound.inputs[0] if bound.inputs else None
            if source is None or len(bound.outputs) != 1 or bound.outputs[0] is None:
                raise TypeError(f"{self.op} is a view op: give one input and one output")
            view = self.spec.view(source, dict(self._attrs))
            bound.launch_op, bound.launch_attrs = "InplaceCopy", {}
            bound.launch_inputs, bound.launch_outputs = [view], [bound.outputs[0]]
        else:
            bound.launch_op, bound.launch_attrs = self.op, self._attrs
            bound.launch_inputs, bound.launch_outputs = bound.inputs, bound.outputs
        return self.cache.prepare(bound.launch_op, bound.launch_inputs, bound.launch_outputs, bound.launch_attrs)

    def _enqueue(self, bound: _Bound, call: PreparedCall, workspace: Workspace, *,
                 release: bool) -> list[tuple[int, HostBuffer]]:
        """Copy inputs in, launch, copy outputs out; with ``release``, hand the workspace back
        after the launch (``release_after``).  Otherwise the caller releases it once it knows
        the stream passed the launch: a synchronizing caller needs no event or host function,
        and an async caller must not block the loop in ``per-call``'s release."""
        stream = self.stream
        for buffer, array in bound.uploads:
            if array.nbytes:
                staging = self._staging(array.nbytes, bound)
                staging.numpy()[...] = array.reshape(-1).view(np.uint8)
                stream.memcpy(buffer, staging, array.nbytes)
        self.cache.launch(call, bound.launch_inputs, bound.launch_outputs, workspace.address, workspace.nbytes,
                          stream, {"node": self.node})
        if release:
            self.workspace.release_after(workspace, stream)
        downloads: list[tuple[int, HostBuffer]] = []
        for index, buffer in bound.returned:
            desc = bound.outputs[index]
            assert desc is not None
            staging = self._staging(max(desc.nbytes, 1), bound)
            if desc.nbytes:
                stream.memcpy(staging, buffer, desc.nbytes)
            downloads.append((index, staging))
        return downloads

    def _staging(self, nbytes: int, bound: _Bound) -> HostBuffer:
        staging = self.device.alloc_host(nbytes, label=f"{self.node} staging")
        bound.owned.append(staging)  # type: ignore[arg-type]
        return staging

    @staticmethod
    def _collect(bound: _Bound, downloads: list[tuple[int, HostBuffer]]) -> list[np.ndarray]:
        results = []
        for index, staging in downloads:
            desc = bound.outputs[index]
            assert desc is not None
            if desc.numel:
                results.append(staging.numpy(desc.dtype, desc.shape).copy())
            else:
                results.append(np.empty(desc.shape, desc.dtype.numpy))
        return results

    # -- failure ----------------------------------------------------------------------------
    def _fail(self, bound: _Bound | None, call: PreparedCall | None, workspace: Workspace, *,
              drain: bool) -> None:
        """Undo what a failed run holds.  The device must be done before memory goes back: the
        stream is drained here (``drain``) or was awaited by the async caller already."""
        if call is not None:
            self.cache.abandon(call)
        if bound is not None and drain:
            _drain(self.stream)
        if workspace is not NO_WORKSPACE and not workspace._released:
            self.workspace.release_now(workspace)

    def _raise_explained(self, error: BaseException) -> NoReturn:
        """Raise ``error`` again or, where :meth:`_explain` rebuilt it, the rebuilt one from it."""
        explained = self._explain(error)
        if explained is error:
            raise error
        raise explained from error

    def _explain(self, error: BaseException) -> BaseException:
        """The same error, saying which call failed."""
        if isinstance(error, BackendError):
            detail = f"{error.detail}; in {self.summary()}" if error.detail else f"in {self.summary()}"
            explained = error_from_code(error.code, detail, {"op": self.op, **error.context})
            if type(explained) is type(error):
                return explained
        if isinstance(error, (AclpipeError, ValueError, TypeError)):
            error.add_note(f"while running {self.summary()}")
        return error

    def _release_parked(self) -> None:
        while self._parked:
            bound, workspace = self._parked.pop()
            self._free(bound)
            if not workspace._released:
                self.workspace.release_now(workspace)

    @staticmethod
    def _free(bound: _Bound | None) -> None:
        if bound is None:
            return
        for buffer in bound.owned:
            buffer.close()
        bound.owned.clear()


def _format(value: Format | str | None) -> Format:
    if value is None:
        return Format.ND
    if isinstance(value, Format):
        return value
    try:
        return Format[str(value).upper()]
    except KeyError:
        raise ValueError(f"unknown format {value!r}: expected one of {', '.join(f.name for f in Format)}") from None


def _drain(stream: Stream) -> None:
    """Wait until ``stream`` passed everything enqueued so far, leaving its error in place."""
    event = stream.record()
    try:
        event.sync()
    except BackendError:
        pass


def _passed(event: Event) -> None:
    """Block until the stream passed ``event``; its error stays for the stream's owner."""
    try:
        event.sync()
    except BackendError:
        pass


async def _drained(stream: Stream) -> None:
    """Await, in a worker thread, the stream passing everything enqueued so far (the caller is
    shielded: the device may still use the run's memory)."""
    try:
        event = stream.record()
    except AclpipeError:
        return
    await anyio.to_thread.run_sync(_passed, event)


async def _completion(event: Event, stream: Stream) -> None:
    """Await ``event`` in a worker thread and raise the stream's error, clearing it so the
    stream can take new work."""
    try:
        await anyio.to_thread.run_sync(event.sync, abandon_on_cancel=True)
    except BackendError:
        stream.take_error()
        raise
