"""Host time per op of the workspace strategies, side by side in one run.

A loop of small Softmax calls (8x64 float32: Softmax needs a workspace) on the simulated NPU,
sanitizer off, inputs and outputs already on the device, measured two ways:

``OpRunner.run()``
    one op, one stream synchronization: the executor cache (a hit after the first call), the
    strategy's acquire, the launch, the sync, and ``release_now``;
``enqueue loop``
    what a pipeline does: acquire, launch, ``release_after`` per op and one synchronization at
    the end.  ``per-call`` has to synchronize inside every release; ``cached`` records an
    event per release; ``pool`` records an event and enqueues the host function that returns
    the block.

Strategies run interleaved (round after round) so that machine noise hits them alike; the
best round counts.

Then ``stream-ordered`` (``aclrtMemPoolMallocAsync`` before each launch, ``aclrtMemPoolFreeAsync``
after it, no host function) against host-function release (``per-call``, whose host waits for a
host function before it frees, and ``pool``, which returns each block with a host function, or
one per ``POOL_BATCH`` releases as the pipeline does): host CPU per launch (the enqueueing
thread's CPU time), modelled device time per launch (timing model on: the span the stream needs
per launch, from a trace), host functions per launch, and peak workspace bytes in use and held
(the stream-ordered pool counts 2 MB per block, cached until TrimTo), with verdict lines.
Run: ``python benchmarks/bench_workspace.py [--ops 2000] [--repeats 3] [--device-ops 200]``
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
import time
from collections.abc import Callable

import numpy as np

import aclpipe
from aclpipe.backends.protocol import tracing
from aclpipe.eager import OpRunner
from aclpipe.eager.executor_cache import ExecutorCache
from aclpipe.pipeline.engine import POOL_BATCH
from aclpipe.runtime.workspaces import STRATEGIES, StreamOrderedWorkspace, WorkspaceStrategy, make_workspace_strategy
from aclpipe.tensor import TensorDesc

SHAPE = (8, 64)


class Case:
    """One strategy's stream, buffers and loops."""

    def __init__(self, device: aclpipe.Device, name: str, x: np.ndarray, **options: int):
        self.device = device
        #: Releases reported in batches (the pipeline's way): published once per loop at the latest.
        self.batched = options.get("batch", 1) > 1
        self.stream = device.create_stream()
        self.strategy: WorkspaceStrategy = make_workspace_strategy(device, name, **options)
        self.source, self.target = device.upload(x), device.alloc(x.nbytes)
        self.runner = (OpRunner("Softmax", self.stream, workspace=self.strategy)
                       .input(self.source, shape=SHAPE, dtype="float32")
                       .output(self.target, shape=SHAPE, dtype="float32")
                       .attr(dim=-1))
        self.cache = ExecutorCache.for_device(device)
        self.inputs = [TensorDesc.contiguous(SHAPE, "float32", self.source.address)]
        self.outputs = [TensorDesc.contiguous(SHAPE, "float32", self.target.address)]

    def run_loop(self, ops: int) -> None:
        for _ in range(ops):
            self.runner.run()

    def enqueue_loop(self, ops: int) -> None:
        cache, strategy, stream = self.cache, self.strategy, self.stream
        for _ in range(ops):
            call = cache.prepare("Softmax", self.inputs, self.outputs, {"dim": -1})
            workspace = strategy.acquire(call.workspace_size, stream, call.key)
            cache.launch(call, self.inputs, self.outputs, workspace.address, workspace.nbytes, stream)
            strategy.release_after(workspace, stream, publish=not self.batched)
        strategy.publish()
        stream.sync()

    def check(self, x: np.ndarray) -> None:
        y = self.device.download(self.target, "float32", SHAPE)
        expected = np.exp(x - x.max(-1, keepdims=True))
        np.testing.assert_allclose(y, expected / expected.sum(-1, keepdims=True), rtol=1e-5)


def per_op_seconds(loop: Callable[[int], None], ops: int) -> float:
    start = time.perf_counter()
    loop(ops)
    return (time.perf_counter() - start) / ops


def measure(cases: dict[str, Case], mode: str, ops: int, repeats: int) -> dict[str, float]:
    best = {name: float("inf") for name in cases}
    for case in cases.values():  # warm up: phase one, first workspace, thread start-up
        getattr(case, mode)(20)
    for _ in range(repeats):
        for name, case in cases.items():
            best[name] = min(best[name], per_op_seconds(getattr(case, mode), ops))
    return best


def report(title: str, best: dict[str, float], cases: dict[str, Case], x: np.ndarray) -> None:
    baseline = best["per-call"]
    print(f"\n{title}")
    print(f"{'strategy':<14} {'us/op':>8} {'vs per-call':>12}  workspace counters (cumulative)")
    for name, seconds in best.items():
        cases[name].check(x)
        stats = cases[name].strategy.stats()
        details = f"allocations={stats.allocations}, peak={stats.peak} B, waits={stats.waits}"
        print(f"{name:<14} {seconds * 1e6:8.1f} {baseline / seconds:11.2f}x  {details}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--ops", type=int, default=2000, help="Softmax calls per timed loop")
    parser.add_argument("--repeats", type=int, default=3, help="timed loops per strategy (best is kept)")
    parser.add_argument("--device-ops", type=int, default=200,
                        help="launches per strategy with the timing model on (stream-ordered side by side)")
    args = parser.parse_args(argv)
    print("$ python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv or sys.argv[1:])]))
    device = aclpipe.open_device("sim", sanitizer=False)
    print(f"device: {device.describe()}; {args.ops} x Softmax {list(SHAPE)} float32 per loop, "
          f"strategies interleaved, best of {args.repeats} loops")
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    cases = {name: Case(device, name, x) for name in STRATEGIES}
    report("OpRunner.run(): one stream sync per op",
           measure(cases, "run_loop", args.ops, args.repeats), cases, x)
    report("enqueue loop: release_after per op, one sync per loop (pipeline-style)",
           measure(cases, "enqueue_loop", args.ops, args.repeats), cases, x)
    for case in cases.values():
        case.strategy.close()
    device.close()
    side_by_side(x, args.ops, args.device_ops)


# -- stream-ordered against host-function release ---------------------------------------------------
#: The contenders: (label, strategy, options).
RELEASES = (("per-call", "per-call", {}), ("pool", "pool", {}),
            (f"pool/batch {POOL_BATCH}", "pool", {"batch": POOL_BATCH}), ("stream-ordered", "stream-ordered", {}))
#: Wall seconds per modelled device second while device time is measured: sleeps of a few
#: microseconds are far less precise than the figures they stand for.
TIME_SCALE = 100.0


@dataclasses.dataclass
class Row:
    label: str
    cpu_us: float = 0.0  # host CPU per launch (the enqueueing thread)
    wall_us: float = 0.0  # wall time per launch, the final sync included
    device_us: float = 0.0  # modelled device span per launch
    host_funcs: float = 0.0  # host functions per launch
    peak_in_use: int = 0  # workspace bytes held by launches at once
    peak_held: int = 0  # device bytes the strategy held for them at once
    waits: int = 0  # acquires that waited (stream-ordered: for a trim)


def _host_row(label: str, name: str, options: dict[str, int], x: np.ndarray, ops: int) -> Row:
    device = aclpipe.open_device("sim", sanitizer=False)
    case = Case(device, name, x, **options)
    case.enqueue_loop(20)  # warm up
    cpu, wall = time.thread_time(), time.perf_counter()
    case.enqueue_loop(ops)
    row = Row(label, (time.thread_time() - cpu) / ops * 1e6, (time.perf_counter() - wall) / ops * 1e6)
    case.check(x)
    stats = case.strategy.stats()
    row.peak_in_use, row.waits = stats.peak, stats.waits
    strategy = case.strategy
    row.peak_held = (strategy.pool_high() if isinstance(strategy, StreamOrderedWorkspace)
                     else stats.peak if name == "per-call" else stats.reserved)
    strategy.close()
    device.close()
    return row


def _device_row(row: Row, name: str, options: dict[str, int], x: np.ndarray, ops: int) -> None:
    device = aclpipe.open_device("sim", sanitizer=False, timing=True, time_scale=TIME_SCALE)
    case = Case(device, name, x, **options)
    case.enqueue_loop(5)
    tracer = tracing(device.backend)
    assert tracer is not None
    tracer.trace_begin()
    case.enqueue_loop(ops)
    records = [r for r in tracer.trace_end() if r.stream == case.stream.name]
    row.device_us = (max(r.end for r in records) - min(r.queued for r in records)) / ops * 1e6
    row.host_funcs = sum(r.kind == "host_func" for r in records) / ops
    case.strategy.close()
    device.close()


def side_by_side(x: np.ndarray, ops: int, device_ops: int) -> None:
    rows = []
    for label, name, options in RELEASES:
        row = _host_row(label, name, options, x, ops)
        _device_row(row, name, options, x, device_ops)
        rows.append(row)
    print(f"\nstream-ordered vs host-function release: enqueue loop, {ops} launches (host), {device_ops} with the "
          f"timing model at x{TIME_SCALE:g} (device)")
    print(f"{'strategy':<16} {'host CPU us':>11} {'wall us':>8} {'device us':>9} {'host fns':>8} "
          f"{'peak in use B':>13} {'peak held B':>12} {'waits':>6}")
    for row in rows:
        print(f"{row.label:<16} {row.cpu_us:11.1f} {row.wall_us:8.1f} {row.device_us:9.1f} {row.host_funcs:8.2f} "
              f"{row.peak_in_use:13d} {row.peak_held:12d} {row.waits:6d}")
    print("(per launch; host functions run in wall time, which the timing model divides by "
          f"x{TIME_SCALE:g}, so their stalls count little in 'device us': weigh 'host fns' instead)")
    for line in verdicts({row.label: row for row in rows}):
        print("verdict: " + line)


def verdicts(rows: dict[str, Row]) -> list[str]:
    """One line per measure: stream-ordered against each host-function release."""
    ordered = rows["stream-ordered"]
    lines = []
    for label in (label for label in rows if label != "stream-ordered"):
        other = rows[label]
        lines.append(f"host CPU per launch: stream-ordered {ordered.cpu_us:.1f} us vs {label} {other.cpu_us:.1f} us "
                     f"({_ratio(ordered.cpu_us, other.cpu_us)})")
    for label in (label for label in rows if label != "stream-ordered"):
        other = rows[label]
        lines.append(f"device time per launch: stream-ordered {ordered.device_us:.1f} us (2 SomaMemMng tasks, "
                     f"no host function) vs {label} {other.device_us:.1f} us ({other.host_funcs:.2f} host functions) "
                     f"({_ratio(ordered.device_us, other.device_us)})")
    pool = rows["pool"]
    lines.append(f"waits: stream-ordered waited {ordered.waits} times (a full pool drained, then trimmed: freed blocks "
                 f"are reused only after TrimTo) vs pool {pool.waits}")
    lines.append(f"peak workspace memory: stream-ordered holds {ordered.peak_held} B for {ordered.peak_in_use} B in "
                 f"use (2 MB per block, cached until TrimTo) vs pool {pool.peak_held} B for {pool.peak_in_use} B")
    return lines


def _ratio(mine: float, theirs: float) -> str:
    if mine <= 0 or theirs <= 0:
        return "n/a"
    return f"{theirs / mine:.2f}x faster" if mine < theirs else f"{mine / theirs:.2f}x slower"


if __name__ == "__main__":
    main()
