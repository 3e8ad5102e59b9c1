"""The simulator's timing model: a named device spec, a roofline cost, and engines tasks hold.

With timing on, each task holds its engine (a number of AI cores, the H2D copy engine, or
the D2H copy engine) for the time the roofline gives, multiplied by ``time_scale`` wall
seconds per device second; the three engines overlap each other.  With timing off (the
default in unit tests) tasks run as fast as numpy does and engines are not modelled.

The default :data:`ATLAS_A2` figures are those published for an Ascend 910B3 in an Atlas
800T A2 training server: 20 AI cores (cube units), about 313 TFLOPS fp16 cube throughput,
64 GB HBM2e at about 1.6 TB/s, and a PCIe 5.0 x16 host link (64 GB/s raw per direction;
we model about 50 GB/s achieved); between NPUs, an HCCS peer link of 56 GB/s (see
:attr:`DeviceSpec.peer_bytes_per_s`).  Vector throughput is taken as one eighth of cube
throughput, and launch latency as the few microseconds host-launched kernels cost.
These are modelling figures, not a promise about any specific board.

Besides speeds, a spec carries the product rules the runtime documents per product family
(``hicann/runtime`` docs, cited field by field): how many events and streams a device has,
whether streams can be aborted and work captured into model runtime instances, and whether
asynchronous host-to-host copies exist.  :data:`ATLAS_310P` (an Atlas inference card) and
:data:`ATLAS_200I_A2` (Atlas 200I/500 A2) differ from :data:`ATLAS_A2` in exactly those.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

__all__ = ["ATLAS_200I_A2", "ATLAS_310P", "ATLAS_A2", "SPECS", "Cost", "DeviceSpec", "Engines"]


@dataclass(frozen=True)
class DeviceSpec:
    """Figures the roofline uses (every rate per device second) and the product's rules.

    Attributes
    ----------
    max_events:
        Events one device supports (``docs/zh/api_ref/07_event_management.md``, constraints
        of ``aclrtCreateEvent``/``aclrtCreateEventWithFlag``/``aclrtCreateEventExWithFlag``:
        65536 on A2/A3/950/200I-500 A2, 1023 on Atlas inference cards, 65535 on training).
    max_streams:
        Streams one device supports, the default stream included
        (``06_stream_management.md``, ``aclrtCreateStream``: 1984 on A2/A3/950, 1024 on
        inference cards, 512 on 200I/500 A2, 2048 on training products).
    stream_abort:
        ``aclrtStreamAbort`` exists (``06_stream_management.md``: A2/A3/950 only).
    graph_capture:
        ``aclmdlRICapture*`` exists (``15_model_running_instance__management.md``: A2, A3,
        950 and inference cards; not 200I/500 A2 nor training products).
    async_host_copies:
        ``aclrtMemcpyAsync(HOST_TO_HOST)`` is accepted (``11-03_memory_copy_and_set.md``: in
        the EP form, every product we model, it returns ACL_ERROR_RT_FEATURE_NOT_SUPPORT).
    peer_bytes_per_s:
        One device-to-device peer link, per direction; 0 where the product has no peer access
        (``04_device_management.md``, ``aclrtDeviceEnablePeerAccess``: not on 200I/500 A2).
    op_execute_timeout:
        Seconds an AI Core kernel may run before it fails with 507014 when nobody called
        ``aclrtSetOpExecuteTimeOut`` (``12_execution_control.md``, its constraints: 1091 on
        A2/A3/950 and 200I/500 A2, 547 on Atlas inference cards, 68 on training products).
    op_execute_timeout_max:
        The longest timeout one may set, ``interval * 254`` (1091 s on A2/A3/950 and 200I/500 A2,
        547 on inference cards); set timeouts are rounded up to a multiple of ``interval``.
    op_wait_timeout:
        ``aclrtSetOpWaitTimeout`` exists (``07_event_management.md``: every product but the
        Atlas inference cards).
    """

    name: str
    ai_cores: int
    cube_flops: float  # fp16 matrix FLOP/s, whole chip
    vector_flops: float  # elementwise FLOP/s, whole chip
    hbm_bytes_per_s: float
    h2d_bytes_per_s: float
    d2h_bytes_per_s: float
    launch_s: float  # per-kernel launch latency
    copy_latency_s: float
    memory_bytes: int
    max_events: int = 65536
    max_streams: int = 1984
    stream_abort: bool = True
    graph_capture: bool = True
    async_host_copies: bool = False
    #: The default is the figure published for the 910B in an Atlas 800T A2: eight NPUs in an
    #: HCCS full mesh, 392 GB/s per NPU over seven links, so 56 GB/s between any two NPUs.
    peer_bytes_per_s: float = 56e9
    op_execute_timeout: float = 1091.0
    op_execute_timeout_max: float = 1091.0
    op_wait_timeout: bool = True
    #: ``aclrtMemPool*`` exist (``11-10_ordered_stream_memory_allocation.md``: Atlas A2 only;
    #: elsewhere 207000).
    stream_ordered_alloc: bool = False
    #: Conditional tasks in captured models exist (``aclmdlRICondHandleCreate``,
    #: ``aclmdlRIAddCondTask``: 15_model_running_instance__management.md, A2 and A3; elsewhere 207000).
    conditional_models: bool = False


ATLAS_A2 = DeviceSpec(
    name="atlas-a2",
    ai_cores=20,
    cube_flops=313e12,
    vector_flops=313e12 / 8,
    hbm_bytes_per_s=1.6e12,
    h2d_bytes_per_s=50e9,
    d2h_bytes_per_s=50e9,
    launch_s=3e-6,
    copy_latency_s=2e-6,
    memory_bytes=64 * 2**30,
    stream_ordered_alloc=True,
    conditional_models=True,
)

#: An Atlas inference card (Ascend 310P, as on an Atlas 300I Pro): 8 AI cores, about 70 TFLOPS
#: fp16, 24 GB LPDDR4X at about 205 GB/s, PCIe 4.0 x16 (about 25 GB/s achieved).  Its rules
#: differ from A2's: 1023 events and 1024 streams per device, no aclrtStreamAbort.
ATLAS_310P = DeviceSpec(
    name="atlas-310p",
    ai_cores=8,
    cube_flops=70e12,
    vector_flops=70e12 / 8,
    hbm_bytes_per_s=204.8e9,
    h2d_bytes_per_s=25e9,
    d2h_bytes_per_s=25e9,
    launch_s=5e-6,
    copy_latency_s=3e-6,
    memory_bytes=24 * 2**30,
    max_events=1023,
    max_streams=1024,
    stream_abort=False,
    peer_bytes_per_s=25e9,  # cards reach each other over PCIe, at the host link's rate
    op_execute_timeout=547.0,
    op_execute_timeout_max=547.0,
    op_wait_timeout=False,
)

#: Atlas 200I/500 A2 (Ascend 310B): a small inference module without graph capture, stream
#: abort or peer access, 512 streams per device.  Speeds are rough modelling figures.
ATLAS_200I_A2 = DeviceSpec(
    name="atlas-200i-a2",
    ai_cores=2,
    cube_flops=10e12,
    vector_flops=10e12 / 8,
    hbm_bytes_per_s=51.2e9,
    h2d_bytes_per_s=8e9,
    d2h_bytes_per_s=8e9,
    launch_s=8e-6,
    copy_latency_s=5e-6,
    memory_bytes=8 * 2**30,
    max_streams=512,
    stream_abort=False,
    graph_capture=False,
    peer_bytes_per_s=0.0,
)

#: A small part, handy in tests: 4 cores and 1 GiB, so capacity errors are easy to reach (A2 rules).
SIM_SMALL = DeviceSpec("sim-small", 4, 10e12, 2e12, 200e9, 10e9, 10e9, 5e-6, 5e-6, 2**30, stream_ordered_alloc=True,
                       conditional_models=True)

SPECS: dict[str, DeviceSpec] = {spec.name: spec for spec in (ATLAS_A2, ATLAS_310P, ATLAS_200I_A2, SIM_SMALL)}


@dataclass(frozen=True)
class Cost:
    """What a task costs: FLOPs (on the cube or vector unit), HBM bytes, and cores it wants."""

    flops: float = 0.0
    bytes: float = 0.0
    cores: int = 0  # 0: as many as the work can fill
    cube: bool = False

    def seconds(self, spec: DeviceSpec, cores: int) -> float:
        rate = spec.cube_flops if self.cube else spec.vector_flops
        share = cores / spec.ai_cores
        compute = self.flops / (rate * share) if self.flops else 0.0
        memory = self.bytes / (spec.hbm_bytes_per_s * share) if self.bytes else 0.0
        return spec.launch_s + max(compute, memory)

    def tiling(self, spec: DeviceSpec) -> int:
        """Cores the kernel's tiling asks for: one per 64 KiB of traffic, at least one."""
        if self.cores:
            return max(1, min(self.cores, spec.ai_cores))
        blocks = math.ceil(max(self.bytes, self.flops / 16) / 65536)
        return max(1, min(spec.ai_cores, blocks))


class _Cores:
    """A counting resource: a kernel takes the cores its tiling asks for, or waits."""

    def __init__(self, total: int):
        self.total = total
        self.free = total
        self._cond = threading.Condition()

    def acquire(self, count: int) -> None:
        with self._cond:
            while self.free < count:
                self._cond.wait()
            self.free -= count

    def release(self, count: int) -> None:
        with self._cond:
            self.free += count
            self._cond.notify_all()


class Engines:
    """Compute cores and the two copy engines of one simulated device, plus its clock."""

    def __init__(self, spec: DeviceSpec, timing: bool, time_scale: float):
        if time_scale <= 0:
            raise ValueError(f"time_scale must be positive, got {time_scale}")
        self.spec = spec
        self.timing = timing
        self.time_scale = time_scale
        self.cores = _Cores(spec.ai_cores)
        self.h2d = threading.Lock()
        self.d2h = threading.Lock()
        self._origin = time.perf_counter()
        self.busy: dict[str, float] = {"compute": 0.0, "h2d": 0.0, "d2h": 0.0}
        self._busy_lock = threading.Lock()

    def now(self) -> float:
        """Device time in seconds since the device opened."""
        elapsed = time.perf_counter() - self._origin
        return elapsed / self.time_scale if self.timing else elapsed

    def hold(self, engine: str, device_seconds: float, work: object = None) -> None:
        """Run ``work`` (a callable) and keep ``engine`` busy for ``device_seconds`` in all."""
        deadline = time.perf_counter() + device_seconds * self.time_scale
        if callable(work):
            work()
        remaining = deadline - time.perf_counter()
        if remaining > 0:
            time.sleep(remaining)
        with self._busy_lock:
            self.busy[engine] = self.busy.get(engine, 0.0) + device_seconds

    def copy_seconds(self, nbytes: int, direction: str) -> float:
        rate = {"h2d": self.spec.h2d_bytes_per_s, "d2h": self.spec.d2h_bytes_per_s}.get(
            direction, self.spec.hbm_bytes_per_s)
        return self.spec.copy_latency_s + nbytes / rate
