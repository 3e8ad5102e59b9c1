"""Does the simulated NPU really overlap work?  Two measurements side by side in one run.

(a) Timing model off: ``2 x --kernels`` kernels of GIL-releasing numpy work (``np.sort`` of
    ``--elements`` float64) through the sim's kernel primitive, all on one stream versus split
    over two streams.  Each stream has its own worker thread, so on two free cores the
    two-stream wall time should be about half (ratio ~0.5-0.6).  CPU-bound work can only
    overlap on idle cores, so the same kernels with a body that *sleeps* as long as one sort
    takes are shown as a control: their ratio shows the simulator's concurrency whatever else
    the machine is doing.
(b) Timing model on: an H2D copy on one stream and a kernel on another whose modelled times
    are about equal.  The copy engine and the AI cores are separate engines, so the wall time
    should be about the longer of the two (ratio to max ~1.0), not their sum; the same pair on
    one stream is shown for contrast (ratio to sum ~1.0).

Sanitizer off; best of ``--repeats`` runs, the variants interleaved so that machine noise
hits both alike.  Run: ``python benchmarks/bench_sim.py [--kernels 8] [--elements 1048576]``
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from collections.abc import Callable

import numpy as np

import aclpipe
from aclpipe.backends.sim.engines import Cost
from aclpipe.runtime import Device, Stream

COPY_BYTES = 64 << 20


def kernel(device: Device, stream: Stream, scratch: aclpipe.DeviceBuffer, body: Callable[[], object]) -> None:
    """Enqueue one kernel running ``body`` on the stream's worker thread."""
    device.backend.launch_kernel(stream.handle, "work", body, writes=[(scratch.address, scratch.nbytes)],
                                 cost=Cost())


def best_of(repeats: int, variants: dict[str, Callable[[], object]]) -> dict[str, float]:
    best = dict.fromkeys(variants, float("inf"))
    for _ in range(repeats):
        for name, run in variants.items():
            start = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def streams_overlap(kernels: int, elements: int, repeats: int) -> None:
    device = aclpipe.open_device("sim", sanitizer=False)
    streams = [device.create_stream(), device.create_stream()]
    scratch = [device.alloc(4096), device.alloc(4096)]  # one region per stream: no false sharing
    data = np.random.default_rng(0).standard_normal(elements)
    sort_s = min(best_of(1, {"sort": lambda: np.sort(data)})["sort"] for _ in range(3))

    def run(body: Callable[[], object], split: bool) -> Callable[[], None]:
        def go() -> None:
            for index in range(2 * kernels):
                lane = index % 2 if split else 0
                kernel(device, streams[lane], scratch[lane], body)
            for stream in streams:
                stream.sync()
        return go

    def sort() -> None:
        np.sort(data)

    def sleep() -> None:
        time.sleep(sort_s)

    variants = {(name, split): run(body, split) for name, body in (("np.sort", sort), ("sleep", sleep))
                for split in (False, True)}
    best = best_of(repeats, {f"{name} {split}": go for (name, split), go in variants.items()})
    print(f"(a) {2 * kernels} kernels, timing model off: np.sort({elements} float64) "
          f"({sort_s * 1e3:.1f} ms each), and as a control a sleep of that length")
    for name in ("np.sort", "sleep"):
        serial, concurrent = best[f"{name} False"], best[f"{name} True"]
        print(f"    {name:<8} one stream {serial * 1e3:7.1f} ms   two streams {concurrent * 1e3:7.1f} ms   "
              f"ratio two/one = {concurrent / serial:.2f}")
    device.close()


def engines_overlap(time_scale: float, repeats: int) -> None:
    device = aclpipe.open_device("sim", sanitizer=False, timing=True, time_scale=time_scale)
    spec, engines = device.backend.spec, device.backend.engines
    copy_s = engines.copy_seconds(COPY_BYTES, "h2d")
    cost = Cost(bytes=(copy_s - spec.launch_s) * spec.hbm_bytes_per_s, cores=spec.ai_cores)
    kernel_s = cost.seconds(spec, spec.ai_cores)
    host, target, scratch = device.alloc_host(COPY_BYTES), device.alloc(COPY_BYTES), device.alloc(4096)
    copier, computer = device.create_stream(), device.create_stream()

    def run(split: bool) -> Callable[[], None]:
        def go() -> None:
            copier.memcpy(target, host)
            stream = computer if split else copier
            device.backend.launch_kernel(stream.handle, "modelled", lambda: None,
                                         writes=[(scratch.address, scratch.nbytes)], cost=cost)
            copier.sync()
            computer.sync()
        return go

    best = best_of(repeats, {"one stream": run(False), "two streams": run(True)})
    longer, total = max(copy_s, kernel_s) * time_scale, (copy_s + kernel_s) * time_scale
    print(f"(b) H2D copy of {COPY_BYTES >> 20} MiB ({copy_s * 1e3:.3f} ms modelled) and a kernel "
          f"({kernel_s * 1e3:.3f} ms modelled), timing model on, time_scale {time_scale:g}")
    print(f"    modelled wall: longer {longer * 1e3:.1f} ms, sum {total * 1e3:.1f} ms")
    for name, wall in best.items():
        print(f"    {name:<12} {wall * 1e3:8.1f} ms   ratio to longer = {wall / longer:.2f}, "
              f"ratio to sum = {wall / total:.2f}")
    device.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=8, help="kernels per stream in (a)")
    parser.add_argument("--elements", type=int, default=1 << 20, help="float64 elements each kernel sorts")
    parser.add_argument("--time-scale", type=float, default=150.0, help="wall seconds per modelled second in (b)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per variant; the best is kept")
    args = parser.parse_args(argv)
    command = [sys.argv[0], *(argv if argv is not None else sys.argv[1:])]
    print("$ python " + " ".join(shlex.quote(part) for part in command))
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"host: {os.cpu_count()} CPUs, load average {load} (other work on the CPUs shrinks the overlap in (a))")
    streams_overlap(args.kernels, args.elements, args.repeats)
    engines_overlap(args.time_scale, args.repeats)


if __name__ == "__main__":
    main()
