"""The backend contract, one small check per rule (ARCHITECTURE.md 3 and 3.1).

Each check gets a freshly opened device, drives it through the runtime object model (and
the backend primitives where the runtime would refuse the call first), and either returns a
short detail or raises :class:`ConformanceFailure`.  Order is never inferred from timing:
latches hold streams so that "not yet" is a fact.  Every wait has a timeout so that a broken
backend fails a check instead of hanging the run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from ..backends.protocol import MemcpyKind
from ..errors import BackendError, DeviceFault, DeviceOutOfMemory, HazardError, InvalidArgumentError
from ..runtime import Device, DeviceBuffer, Event, Stream
from ..tensor import TensorDesc
from .latch import latch

__all__ = ["CONTRACT", "Check", "ConformanceFailure"]

TIMEOUT = 10.0  # seconds any single wait in a check may take before the check fails
HOLD = 0.2  # seconds a held event must stay incomplete: a broken backend gets this long to run ahead
E = TypeVar("E", bound=BaseException)


class ConformanceFailure(AssertionError):
    """A backend broke a rule of the contract."""


@dataclass(frozen=True)
class Check:
    """One rule: ``run(device)`` returns a detail or raises :class:`ConformanceFailure`.

    A documented runtime rule (:data:`aclpipe.testing.rules.RULES`) names where it comes from:
    ``doc``, the page of the public ``hicann/runtime`` docs (``docs/zh/api_ref/...``) or header,
    and, where the page leaves the rule open, ``source``: the runtime source file and function
    that settle it.  Two backends held to one misread page share the misreading; the source is
    the tie-breaker."""

    name: str
    description: str
    run: Callable[[Device], str]
    needs: tuple[str, ...] = ()  # capability flags the check requires
    doc: str = ""  # the docs page (and API) the rule comes from
    source: str = ""  # the runtime source ("file: function") that settles what the page leaves open


def expect(condition: object, message: str) -> None:
    if not condition:
        raise ConformanceFailure(message)


def expect_raises(kind: type[E], rule: str, call: Callable[..., Any], *args: Any) -> E:
    """Run ``call(*args)`` and return the ``kind`` error it must raise because of ``rule``."""
    try:
        call(*args)
    except kind as error:
        return error
    except Exception as error:
        raise ConformanceFailure(f"{rule}: {_name(call)} raised {type(error).__name__} ({error}), "
                                 f"expected {kind.__name__}") from error
    raise ConformanceFailure(f"{rule}: {_name(call)} returned normally, expected {kind.__name__}")


def expect_held(event: Event, rule: str) -> None:
    """``event`` must not complete within :data:`HOLD` seconds because ``rule`` holds it back.

    A query right away would pass a broken backend whose worker merely had not started yet;
    giving it time to run ahead makes the failure show."""
    try:
        event.sync(HOLD)
    except DeviceFault:
        return  # the sync timed out: held, as it must be
    raise ConformanceFailure(f"{rule}: work behind it completed while it should have been held")


def _name(call: Callable[..., Any]) -> str:
    return getattr(call, "__qualname__", repr(call))


def _read(device: Device, stream: Stream, buffer: DeviceBuffer, nbytes: int) -> np.ndarray:
    host = device.alloc_host(nbytes)
    stream.memcpy(host, buffer, nbytes)
    stream.sync(TIMEOUT)
    return host.numpy().copy()


def _launch_add(device: Device, stream: Stream, a: DeviceBuffer, b: DeviceBuffer, out: DeviceBuffer, count: int,
                node: str, *, offset: int = 0) -> None:
    """``out = a + b`` on ``count`` float32 elements through the aclnn two-phase primitives."""
    backend = device.backend
    inputs = [TensorDesc.contiguous((count,), "float32", a.address + offset),
              TensorDesc.contiguous((count,), "float32", b.address)]
    outputs = [TensorDesc.contiguous((count,), "float32", out.address)]
    executor = backend.op_prepare("Add", inputs, outputs, {"alpha": 1})
    expect(executor.workspace_size == 0, f"Add asked for a {executor.workspace_size}-byte workspace")
    backend.op_launch(executor, 0, 0, stream.handle, {"node": node})


# -- ordering -------------------------------------------------------------------------------------
def stream_ordering(device: Device) -> str:
    stream, n = device.create_stream(), 256
    source = device.alloc_host(n)
    source.numpy()[...] = np.arange(n) % 251
    first, second, result = device.alloc(n), device.alloc(n), device.alloc_host(n)
    stream.memset(first, 0xAB)
    stream.memcpy(first, source, 128)
    stream.memset(first, 0x11, 32, offset=64)
    stream.memcpy(second, first)
    stream.memset(first, 0)  # after the D2D copy: must not reach ``second``
    stream.memcpy(result, second)
    stream.sync(TIMEOUT)
    expected = np.full(n, 0xAB, np.uint8)
    expected[:128] = np.arange(128) % 251
    expected[64:96] = 0x11
    seen = result.numpy()
    bad = np.flatnonzero(seen != expected)
    expect(bad.size == 0, f"byte {bad[:1]} is {seen[bad[:1]]}, expected {expected[bad[:1]]}: the stream "
                          "did not run memset/memcpy in enqueue order")
    return "memset, H2D, D2D, D2H in enqueue order"


def cross_stream_wait(device: Device) -> str:
    producer, consumer = device.create_stream(), device.create_stream()
    data, copy = device.alloc(128), device.alloc(128)
    with latch(producer):
        producer.memset(data, 0x5A)
        consumer.wait(producer.record())
        consumer.memcpy(copy, data)
        consumer_done = consumer.record()
        expect_held(consumer_done, "a stream waits on another stream's event")
    seen = _read(device, consumer, copy, 128)
    expect((seen == 0x5A).all(), f"the consumer copied {seen[:4]}..., not the producer's 0x5a bytes")
    return "consumer held until the producer's event, then saw its bytes"


def event_semantics(device: Device) -> str:
    stream, waiter, other = device.create_stream(), device.create_stream(), device.create_stream()
    with latch(stream) as first:
        event = stream.record()
        with latch(stream):
            expect(not event.is_done, "an event behind a held stream reported done")
            first.release()
            event.sync(TIMEOUT)  # done although later work on the stream is still held
            event = stream.record(event)  # a new record, behind the second latch
            waiter.wait(event)
            waiter_done = waiter.record()
            other.record(event)  # re-record on an idle stream: must not release the earlier wait
            other.sync(TIMEOUT)
            event.sync(TIMEOUT)
            expect_held(waiter_done, "re-recording an event must not release a wait enqueued before it")
    waiter.sync(TIMEOUT)
    expect(waiter_done.is_done, "the waiting stream did not finish after its event completed")
    return "record captures the position at the call; re-record leaves earlier waits alone"


def event_timing(device: Device) -> str:
    stream = device.create_stream()
    start = stream.record(timing=True)
    with latch(stream):
        end = stream.record(timing=True)
        threading.Event().wait(0.05)  # the held stream makes ``end`` at least this much later
    end.sync(TIMEOUT)
    elapsed = end - start
    expect(isinstance(elapsed, float) and elapsed > 0, f"end - start is {elapsed!r}, expected a positive float")
    expect(start - end == -elapsed, f"start - end is {start - end}, expected {-elapsed}")
    plain = stream.record()
    plain.sync(TIMEOUT)
    expect_raises(BackendError, "elapsed time needs timing events", lambda: plain - start)
    return f"{elapsed:.3f} ms across a held stream; a non-timing event refuses"


def host_functions(device: Device) -> str:
    stream, order, threads = device.create_stream(), [], set()
    started, gate = threading.Event(), threading.Event()

    enqueuer = threading.get_ident()

    def step(value: int) -> Callable[[], None]:
        def run() -> None:
            threads.add(threading.get_ident())
            if value == 2 and threading.get_ident() != enqueuer:  # inline, it would block us
                started.set()
                gate.wait(TIMEOUT)
            order.append(value)
        return run

    stream.host_func(step(1))
    stream.host_func(step(2))
    after = stream.record()
    stream.host_func(step(3))
    expect(enqueuer not in threads, "a host function ran on the enqueuing thread, inside host_func()")
    expect(started.wait(TIMEOUT), "a host function never ran")
    expect_held(after, "a stream waits until its host function returns")
    gate.set()
    stream.sync(TIMEOUT)
    expect(order == [1, 2, 3], f"host functions ran in the order {order}, expected [1, 2, 3]")

    def fail() -> None:
        raise RuntimeError("conformance: a failing host function")

    stream.host_func(fail)
    expect_raises(BackendError, "a raising host function fails its stream", stream.sync, TIMEOUT)
    stream.host_func(step(4))
    stream.sync(TIMEOUT)
    expect(order[-1] == 4, "the stream did not run host functions after reporting an error")
    return "in order, off-thread, blocking; a raise fails the stream at sync"


# -- memory ---------------------------------------------------------------------------------------
def memory_errors(device: Device) -> str:
    backend, stream = device.backend, device.create_stream()
    total = device.mem_info().total
    oom = expect_raises(DeviceOutOfMemory, "allocating beyond capacity", device.alloc, total + (1 << 20))
    expect(None not in (oom.requested, oom.in_use, oom.limit),
           f"DeviceOutOfMemory lacks fields: requested={oom.requested} in_use={oom.in_use} limit={oom.limit}")
    address = backend.mem_alloc(64)
    backend.mem_free(address)
    expect_raises(InvalidArgumentError, "a double free", backend.mem_free, address)
    target, source = device.alloc(64), device.alloc_host(128)
    expect_raises(InvalidArgumentError, "a copy past the end", backend.memcpy_async, target.address,
                  source.address, 128, MemcpyKind.HOST_TO_DEVICE, stream.handle)
    a, b, out = device.alloc(64), device.alloc(64), device.alloc(64)
    try:
        _launch_add(device, stream, a, b, out, 8, "misaligned", offset=4)
        stream.sync(TIMEOUT)
    except BackendError as error:
        return f"OOM with fields; double free, overrun and misalignment refused ({error.name})"
    raise ConformanceFailure("a kernel with a tensor 4 bytes off 32-byte alignment ran without an error")


# -- faults ---------------------------------------------------------------------------------------
def fault_surfacing(device: Device) -> str:
    stream = device.create_stream()
    ones = device.upload(np.ones(8, np.float32))
    out = device.alloc(32)
    device.inject_fault("kernel", "conformance-node")
    _launch_add(device, stream, ones, ones, out, 8, "conformance-node")
    error = expect_raises(DeviceFault, "an injected kernel fault", stream.sync, TIMEOUT)
    expect("conformance-node" in str(error), f"the kernel fault does not name the node: {error}")
    _launch_add(device, stream, ones, ones, out, 8, "after-the-fault")
    seen = _read(device, stream, out, 32).view(np.float32)
    expect((seen == 2).all(), f"after a consumed fault the device computed {seen}, expected 2s")
    device.inject_fault("copy", hang=True)
    stream.memcpy(out, ones)
    hang = expect_raises(DeviceFault, "sync(timeout) on a hung stream", stream.sync, 0.2)
    expect(hang.code == 507046, f"a sync that timed out raised code {hang.code}, expected 507046")
    device.release_hangs()
    stream.sync(TIMEOUT)
    seen = _read(device, stream, out, 32).view(np.float32)
    expect((seen == 1).all(), "the released copy did not complete")
    return "sticky kernel fault names the node; hang times out with 507046, then releases"


# -- sanitizer ------------------------------------------------------------------------------------
def sanitizer_race(device: Device) -> str:
    writer, reader = device.create_stream(), device.create_stream()
    data, copy = device.alloc(256), device.alloc(256)
    with latch(writer):
        writer.memset(data, 1)
        error = expect_raises(HazardError, "an unordered read on another stream", reader.memcpy, copy, data)
    writer.sync(TIMEOUT)  # else the buffers, freed as this returns, may race the memset the latch let go
    text = f"{error.first} {error.second}"
    expect(writer.name in text and reader.name in text,
           f"the hazard does not name both streams ({writer.name}, {reader.name}): {error}")
    return "unordered write/read on two streams names both"


def sanitizer_use_after_free(device: Device) -> str:
    stream = device.create_stream()
    data, copy = device.alloc(256), device.alloc(256)
    with latch(stream):
        stream.memcpy(copy, data)
        expect_raises(HazardError, "a free while a copy may read", device.backend.mem_free, data.address)
    stream.sync(TIMEOUT)
    data.close()  # ordered now: must be accepted
    return "free while a copy may still read is refused; after sync it is fine"


def sanitizer_host_read(device: Device) -> str:
    stream = device.create_stream()
    data = device.upload(np.arange(64, dtype=np.uint8))
    host = device.alloc_host(64)
    with latch(stream):
        stream.memcpy(host, data)
        expect_raises(HazardError, "a host read before the D2H copy", host.numpy)
    stream.sync(TIMEOUT)
    expect((host.numpy() == np.arange(64)).all(), "the D2H copy delivered the wrong bytes")
    return "reading a host buffer before its D2H copy finished is refused"


CONTRACT: tuple[Check, ...] = (
    Check("stream_ordering", "memset/memcpy on one stream run in enqueue order", stream_ordering),
    Check("cross_stream_wait", "a stream waiting on an event sees the producer's writes, not before",
          cross_stream_wait),
    Check("event_semantics", "record captures the position at call time; re-record keeps earlier waits",
          event_semantics),
    Check("event_timing", "timing events give end - start >= 0 in ms; plain events refuse",
          event_timing, ("event_timing",)),
    Check("host_functions", "host functions run in order, off-thread, block the stream, fail it on raise",
          host_functions, ("host_callbacks",)),
    Check("memory_errors", "OOM with fields, double free, copy overrun, misaligned kernel address",
          memory_errors),
    Check("fault_surfacing", "injected kernel fault is sticky and named; hang + sync(timeout) is 507046",
          fault_surfacing, ("fault_injection",)),
    Check("sanitizer_race", "a race between two streams raises HazardError naming both",
          sanitizer_race, ("sanitizer",)),
    Check("sanitizer_use_after_free", "freeing memory a queued copy may still read raises HazardError",
          sanitizer_use_after_free, ("sanitizer",)),
    Check("sanitizer_host_read", "reading a host buffer before its D2H copy raises HazardError",
          sanitizer_host_read, ("sanitizer",)),
)
