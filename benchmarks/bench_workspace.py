"""Host time per op of the three workspace strategies, side by side in one run.

A loop of small Softmax calls (8x64 float32: Softmax needs a workspace) through
:class:`aclpipe.runner.OpRunner` on the simulated NPU, sanitizer off, inputs and outputs
already on the device so that only the per-call path is measured: the executor cache (a hit
after the first call), the workspace strategy, the launch and the stream synchronization.

Run: ``python benchmarks/bench_workspace.py [--ops 2000] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time

import numpy as np

import aclpipe
from aclpipe.runner import OpRunner
from aclpipe.workspace import STRATEGIES, make_workspace_strategy

SHAPE = (8, 64)


def make_runner(device: aclpipe.Device, name: str, x: np.ndarray) -> tuple[OpRunner, aclpipe.DeviceBuffer]:
    """A Softmax runner over device-resident input and output, with its own stream."""
    source, target = device.upload(x), device.alloc(x.nbytes)
    runner = (OpRunner("Softmax", device.create_stream(), workspace=make_workspace_strategy(device, name))
              .input(source, shape=SHAPE, dtype="float32")
              .output(target, shape=SHAPE, dtype="float32")
              .attr(dim=-1))
    return runner, target


def time_loop(runner: OpRunner, ops: int) -> float:
    """Host seconds per op over ``ops`` runs."""
    start = time.perf_counter()
    for _ in range(ops):
        runner.run()
    return (time.perf_counter() - start) / ops


def check(device: aclpipe.Device, target: aclpipe.DeviceBuffer, x: np.ndarray) -> None:
    """The last run's output is the softmax of ``x``."""
    y = device.download(target, "float32", SHAPE)
    expected = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(y, expected / expected.sum(-1, keepdims=True), rtol=1e-5)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=2000, help="Softmax calls per timed loop")
    parser.add_argument("--repeats", type=int, default=3, help="timed loops per strategy (best is kept)")
    args = parser.parse_args(argv)
    print("$ python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv or sys.argv[1:])]))
    device = aclpipe.open_device("sim", sanitizer=False)
    print(f"device: {device.describe()}; {args.ops} x Softmax {list(SHAPE)} float32 per loop, "
          f"strategies interleaved, best of {args.repeats} loops")
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    made = {name: make_runner(device, name, x) for name in STRATEGIES}
    runners = {name: runner for name, (runner, _) in made.items()}
    for runner in runners.values():  # warm up: phase one, first workspace, thread start-up
        time_loop(runner, 20)
    best = {name: float("inf") for name in STRATEGIES}
    for _ in range(args.repeats):  # interleaved so that machine noise hits every strategy alike
        for name, runner in runners.items():
            best[name] = min(best[name], time_loop(runner, args.ops))
    baseline = best["per-call"]
    print(f"{'strategy':<10} {'us/op':>8} {'vs per-call':>12}  workspace counters over all loops")
    for name, runner in runners.items():
        check(device, made[name][1], x)
        stats = runner.workspace.stats()
        details = f"allocations={stats.allocations}, peak={stats.peak} B, waits={stats.waits}"
        print(f"{name:<10} {best[name] * 1e6:8.1f} {baseline / best[name]:11.2f}x  {details}")
        runner.workspace.close()
    device.close()


if __name__ == "__main__":
    main()
