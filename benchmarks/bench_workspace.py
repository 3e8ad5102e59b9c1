"""Host time per op of the three workspace strategies, side by side in one run.

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
best round counts.  Run: ``python benchmarks/bench_workspace.py [--ops 2000] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Callable

import numpy as np

import aclpipe
from aclpipe.eager import OpRunner
from aclpipe.eager.executor_cache import ExecutorCache
from aclpipe.runtime.workspaces import STRATEGIES, WorkspaceStrategy, make_workspace_strategy
from aclpipe.tensor import TensorDesc

SHAPE = (8, 64)


class Case:
    """One strategy's stream, buffers and loops."""

    def __init__(self, device: aclpipe.Device, name: str, x: np.ndarray):
        self.device = device
        self.stream = device.create_stream()
        self.strategy: WorkspaceStrategy = make_workspace_strategy(device, name)
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
            strategy.release_after(workspace, stream)
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
    print(f"{'strategy':<10} {'us/op':>8} {'vs per-call':>12}  workspace counters (cumulative)")
    for name, seconds in best.items():
        cases[name].check(x)
        stats = cases[name].strategy.stats()
        details = f"allocations={stats.allocations}, peak={stats.peak} B, waits={stats.waits}"
        print(f"{name:<10} {seconds * 1e6:8.1f} {baseline / seconds:11.2f}x  {details}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--ops", type=int, default=2000, help="Softmax calls per timed loop")
    parser.add_argument("--repeats", type=int, default=3, help="timed loops per strategy (best is kept)")
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


if __name__ == "__main__":
    main()
