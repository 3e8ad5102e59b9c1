"""The executor cache: phase one once per call signature, then only phase two.

aclnn's phase one (``aclnnXxxGetWorkspaceSize``) validates every argument and builds the
executor; it is the expensive half of a call.  An executor made repeatable right after
phase one (``aclSetAclOpExecutorRepeatable``) can be launched again with its tensor
addresses re-pointed (``aclSetInputTensorAddr``/``aclSetOutputTensorAddr``), so a call whose
shapes, strides, offsets, dtypes, formats and attributes match an earlier one skips phase one.

The key holds everything that shapes the plan (ARCHITECTURE.md 5 and 8: torch_npu keys on
op, shapes, strides, dtype, format, config and device; an incomplete key once handed one
call's plan to another).  Addresses are *not* in the key: they are re-pointed per launch.

Ops that refuse to be repeatable are remembered by key and get a fresh phase one per call.

Lifetime of cached executors
----------------------------
An evicted (or cleared) executor is destroyed with ``op_destroy`` only when no launch can
still use it:

* while a caller holds it between :meth:`ExecutorCache.prepare` and
  :meth:`ExecutorCache.launch`, destruction waits for the launch to finish;
* once launched, the rule for real hardware is "destroy after the stream passed the last
  launch": the cache records an event on the last launch's stream and destroys the executor
  when that event has completed (checked at later cache calls, and waited for in
  :meth:`ExecutorCache.close`).  The simulator captures the executor's descriptors at launch,
  so destroying earlier would be harmless there, but the cache follows the hardware rule on
  every backend so that the simulator tests the same policy code.
"""

from __future__ import annotations

import enum
import threading
import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..errors import BackendError, ClosedResourceError, InvalidArgumentError
from ..runtime.executor import Executor
from ..tensor import TensorDesc

if TYPE_CHECKING:
    from ..runtime import Device, Event, Stream

__all__ = ["CacheStats", "ExecutorCache", "PreparedCall", "attrs_key", "executor_key"]

#: ``(op, input signatures, output signatures, frozen attrs, device name)``.
ExecutorKey = tuple[Any, ...]


def attrs_key(attrs: Mapping[str, Any]) -> tuple[Any, ...]:
    """A hashable, exact form of ``attrs`` for the cache key.

    Lists and tuples become tuples, floats are kept bit-exact (``float.hex``, so ``0.1`` and
    ``0.1 + 1e-17`` differ while ``nan`` equals ``nan``), and every value is tagged with its
    kind so that ``True``, ``1`` and ``1.0`` give different keys.

    Raises
    ------
    TypeError
        For a value the key cannot hold exactly (an arbitrary object).
    """
    return tuple(sorted((str(name), _freeze(value, str(name))) for name, value in attrs.items()))


def _freeze(value: Any, where: str) -> Any:
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)):
        return ("b", bool(value))
    if isinstance(value, enum.Enum):
        return (type(value).__name__, value.value)
    if isinstance(value, (int, np.integer)):
        return ("i", int(value))
    if isinstance(value, (float, np.floating)):
        return ("f", float(value).hex())
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, np.ndarray):
        return ("a", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return ("t", tuple(_freeze(item, f"{where}[{index}]") for index, item in enumerate(value)))
    if isinstance(value, Mapping):
        return ("d", attrs_key(value))
    raise TypeError(f"attribute {where}={value!r} ({type(value).__name__}) cannot be part of an executor "
                    "key: use numbers, strings, bools, None, enums, numpy arrays, or lists/dicts of them")


def _signatures(tensors: Sequence[TensorDesc | None]) -> tuple[Any, ...]:
    return tuple(None if tensor is None else tensor.signature() for tensor in tensors)


def _addresses(inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None]) -> tuple[int | None, ...]:
    return tuple(None if t is None else t.address for t in (*inputs, *outputs))


def executor_key(op: str, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                 attrs: Mapping[str, Any], device: str) -> ExecutorKey:
    """Everything that shapes an executor's plan, without the tensor addresses."""
    return (op, _signatures(inputs), _signatures(outputs), attrs_key(attrs), device)


@dataclass
class CacheStats:
    """Counters of one :class:`ExecutorCache`.

    ``hits``/``misses`` count :meth:`ExecutorCache.prepare` calls by whether phase one was
    skipped; ``phase_one`` counts every phase-one call (misses plus per-call phase one of
    keys whose op refused to be repeatable, which are counted in ``not_repeatable``).
    """

    hits: int = 0
    misses: int = 0
    evictions: int = 0
    destroyed: int = 0
    phase_one: int = 0
    not_repeatable: int = 0
    entries: int = 0


@dataclass(eq=False)
class _Entry:
    key: ExecutorKey
    executor: Executor
    inputs: tuple[Any, ...]
    outputs: tuple[Any, ...]
    lock: threading.Lock = field(default_factory=threading.Lock)
    holders: int = 0
    evicted: bool = False
    last_stream: Stream | None = None
    addresses: tuple[int | None, ...] = ()  # what the executor points at now


@dataclass(eq=False)
class PreparedCall:
    """One call after phase one: launch it with :meth:`ExecutorCache.launch`.

    Attributes
    ----------
    op:
        The operator name.
    key:
        The executor key (what a workspace cached per executor is keyed by).
    workspace_size:
        Bytes of workspace phase one asked for (0 is normal).
    repeatable:
        True when the executor comes from the cache and is re-pointed at this call's addresses.
    hit:
        True when phase one was skipped.
    """

    op: str
    key: ExecutorKey
    executor: Executor
    workspace_size: int
    repeatable: bool
    hit: bool
    _entry: _Entry | None = None
    _launched: bool = False


class ExecutorCache:
    """Phase-one results of one device, kept repeatable and bounded (LRU).

    Parameters
    ----------
    device:
        The device whose backend prepares, re-points, launches and destroys executors.
    max_entries:
        How many executors to keep; the least recently used one is evicted beyond that.
    """

    _per_device: ClassVar[weakref.WeakKeyDictionary[Device, ExecutorCache]] = weakref.WeakKeyDictionary()
    _per_device_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, device: Device, *, max_entries: int = 256):
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self.device = device
        self.max_entries = max_entries
        self._backend = device.backend
        self._entries: OrderedDict[ExecutorKey, _Entry] = OrderedDict()
        self._refused: set[ExecutorKey] = set()
        self._retiring: list[tuple[Executor, Event | None]] = []
        self._stats = CacheStats()
        self._lock = threading.Lock()

    @classmethod
    def for_device(cls, device: Device) -> ExecutorCache:
        """The cache shared by every runner on ``device`` (created on first use)."""
        with cls._per_device_lock:
            cache = cls._per_device.get(device)
            if cache is None:
                cache = cls._per_device[device] = cls(device)
            return cache

    # -- phase one --------------------------------------------------------------------------
    def prepare(self, op: str, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> PreparedCall:
        """Phase one for this call, or the cached executor of an identical earlier call.

        ``inputs``/``outputs`` carry this call's addresses; a cached executor is re-pointed at
        them by :meth:`launch`.  Phase-one errors propagate unchanged (nothing is cached).
        """
        key = executor_key(op, inputs, outputs, attrs, self.device.name)
        self._reap()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                entry.holders += 1
                self._stats.hits += 1
                return PreparedCall(op, key, entry.executor, entry.executor.workspace_size, True, True, entry)
            refused = key in self._refused
        executor = Executor.prepare(self._backend, op, list(inputs), list(outputs), dict(attrs))
        with self._lock:
            self._stats.misses += 1
            self._stats.phase_one += 1
            if refused:
                self._stats.not_repeatable += 1
        workspace_size = executor.workspace_size
        if refused or not self._make_repeatable(key, executor):
            return PreparedCall(op, key, executor, workspace_size, False, False)
        entry = _Entry(key, executor, _signatures(inputs), _signatures(outputs), holders=1,
                       addresses=_addresses(inputs, outputs))
        self._insert(entry)
        return PreparedCall(op, key, executor, workspace_size, True, False, entry)

    def _make_repeatable(self, key: ExecutorKey, executor: Executor) -> bool:
        if executor.make_repeatable():
            return True
        # The op refuses: this executor stays a valid single-use one for the current call,
        # and every later call with this key runs phase one again.
        with self._lock:
            self._refused.add(key)
            self._stats.not_repeatable += 1
        return False

    def _insert(self, entry: _Entry) -> None:
        evicted: list[_Entry] = []
        with self._lock:
            previous = self._entries.pop(entry.key, None)
            if previous is not None:  # two threads missed the same key at once: keep the newest
                evicted.append(previous)
            self._entries[entry.key] = entry
            while len(self._entries) > self.max_entries:
                _, oldest = self._entries.popitem(last=False)
                evicted.append(oldest)
            self._stats.evictions += len(evicted)
        for old in evicted:
            self._evict(old)

    # -- phase two --------------------------------------------------------------------------
    def launch(self, call: PreparedCall, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
               workspace: int, workspace_size: int, stream: Stream,
               context: Mapping[str, Any] | None = None) -> None:
        """Phase two: re-point a cached executor at ``inputs``/``outputs`` and enqueue it.

        Raises
        ------
        InvalidArgumentError
            When a tensor's shape, strides, offset, dtype or format differs from the one the
            executor was prepared for (a stale executor must never run on a new shape), or
            when ``call`` was already launched.
        """
        if call._launched:
            raise InvalidArgumentError(561103, f"aclnn{call.op}: this prepared call was already launched; "
                                               "call prepare() again for the next call", {"op": call.op})
        call._launched = True
        entry = call._entry
        if entry is None:
            call.executor.launch(workspace, workspace_size, stream.handle, context)
            return
        try:
            self._check_signature(call.op, entry, inputs, outputs)
            # Re-pointing and launching must not interleave with another thread's call on
            # the same executor: the launch captures the addresses set just before it.
            addresses = _addresses(inputs, outputs)
            with entry.lock:
                if addresses != entry.addresses:  # the executor keeps the addresses last set
                    entry.executor.point(inputs, output=False)
                    entry.executor.point(outputs, output=True)
                    entry.addresses = addresses
                entry.executor.launch(workspace, workspace_size, stream.handle, context)
                entry.last_stream = stream
        finally:
            self._release(entry)

    def abandon(self, call: PreparedCall) -> None:
        """Give back a prepared call that will not be launched (an error came in between)."""
        if call._launched:
            return
        call._launched = True
        if call._entry is not None:
            self._release(call._entry)
        else:
            self._destroy(call.executor)

    @staticmethod
    def _check_signature(op: str, entry: _Entry, inputs: Sequence[TensorDesc | None],
                         outputs: Sequence[TensorDesc | None]) -> None:
        for kind, frozen, given in (("input", entry.inputs, inputs), ("output", entry.outputs, outputs)):
            seen = _signatures(given)
            if seen == frozen:
                continue
            index = next((i for i, (a, b) in enumerate(zip(frozen, seen)) if a != b), min(len(frozen), len(seen)))
            old = frozen[index] if index < len(frozen) else "nothing"
            new = seen[index] if index < len(seen) else "nothing"
            raise InvalidArgumentError(
                161002, f"aclnn{op}: {kind} {index} changed since phase one: the executor was prepared for "
                        f"(shape, strides, offset, dtype, format) = {old}, launched with {new}; prepare the "
                        "call again for the new signature", {"op": op})

    # -- lifetime ---------------------------------------------------------------------------
    def _release(self, entry: _Entry) -> None:
        with self._lock:
            entry.holders -= 1
            retire = entry.evicted and entry.holders == 0
        if retire:
            self._retire(entry)

    def _evict(self, entry: _Entry) -> None:
        with self._lock:
            entry.evicted = True
            retire = entry.holders == 0
        if retire:
            self._retire(entry)

    def _retire(self, entry: _Entry) -> None:
        """Destroy ``entry``'s executor once the stream of its last launch has passed it."""
        stream = entry.last_stream
        event = None
        if stream is not None and not self.device.closed:
            try:
                event = stream.record()
            except ClosedResourceError:
                pass  # a closed stream drained its work before it went away
        with self._lock:
            self._retiring.append((entry.executor, event))
        self._reap()

    def _reap(self, wait: bool = False) -> None:
        with self._lock:
            if not self._retiring:
                return
            retiring, self._retiring = self._retiring, []
        keep: list[tuple[Executor, Event | None]] = []
        for executor, event in retiring:
            if event is not None and not self.device.closed:
                if wait:
                    # A failed stream still passed the launch; its error belongs to its owner.
                    try:
                        event.sync()
                    except BackendError:
                        pass
                elif not event.is_done:
                    keep.append((executor, event))
                    continue
            self._destroy(executor)
        if keep:
            with self._lock:
                self._retiring.extend(keep)

    def _destroy(self, executor: Executor) -> None:
        if not self.device.closed:
            executor.destroy()
        with self._lock:
            self._stats.destroyed += 1

    def stats(self) -> CacheStats:
        """A snapshot of the counters."""
        with self._lock:
            snapshot = CacheStats(**vars(self._stats))
            snapshot.entries = len(self._entries)
        return snapshot

    def is_repeatable(self, op: str, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                      attrs: Mapping[str, Any]) -> bool | None:
        """True/False once this call's key was prepared (False: the op refused); None before."""
        key = executor_key(op, inputs, outputs, attrs, self.device.name)
        with self._lock:
            if key in self._refused:
                return False
            return True if key in self._entries else None

    def clear(self) -> None:
        """Drop every entry and forget refusals (executors are destroyed once their streams pass
        them); not counted as evictions."""
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
            self._refused.clear()
        for entry in entries:
            self._evict(entry)

    def close(self) -> None:
        """Evict everything and wait until every executor is destroyed; idempotent."""
        self.clear()
        self._reap(wait=True)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
