"""OpRunner: call single aclnn operators builder-style, without building a graph.

Each call is the two-phase aclnn protocol in one line: phase one (through the device's
executor cache, so a repeated call with the same shapes skips it), a workspace from the
chosen strategy, the launch on your stream, then synchronize (``run``) or await an event
(``run_async``).  Errors name the op and the whole call.

Run: ``python examples/op_runner.py``
"""

from __future__ import annotations

import asyncio

import numpy as np

import aclpipe
from aclpipe.eager import OpRunner
from aclpipe.eager.executor_cache import ExecutorCache


def numpy_in_numpy_out(stream: aclpipe.Stream, rng: np.random.Generator) -> None:
    x = rng.standard_normal((2, 3)).astype(np.float32)
    y = rng.standard_normal((3,)).astype(np.float32)
    (z,) = OpRunner("Add", stream).input(x).input(y).output().attr(alpha=2.0).run()  # z = x + 2y, broadcast
    print(f"Add(alpha=2): max |error| {np.abs(z - (x + 2 * y)).max():.1e}, shape {z.shape}")

    logits = rng.standard_normal((4, 8)).astype(np.float32)
    (probs,) = OpRunner("Softmax", stream).input(logits).output().attr(dim=-1).run()
    print(f"Softmax: rows sum to {probs.sum(-1).round(6).tolist()}")

    x16 = rng.standard_normal((8, 16)).astype(np.float16)
    y, mean, rstd = (OpRunner("LayerNorm", stream).input(x16).input(None).input(None)  # no weight, no bias
                     .output().output().output().attr(normalizedShape=[16]).run())
    row_means = np.abs(y.astype(np.float32).mean(-1)).max()
    print(f"LayerNorm float16: y {y.dtype}{list(y.shape)} with row means {row_means:.1e}"
          f"; statistics mean {mean.dtype}{list(mean.shape)}, rstd {rstd.dtype}{list(rstd.shape)}")


def device_buffers(device: aclpipe.Device, stream: aclpipe.Stream, rng: np.random.Generator) -> None:
    """Inputs already on the device and an output you own: nothing is copied per call."""
    a = rng.standard_normal((32, 64)).astype(np.float32)
    b = rng.standard_normal((64, 16)).astype(np.float32)
    a_dev, b_dev, out_dev = device.upload(a), device.upload(b), device.alloc(32 * 16 * 4)
    runner = (OpRunner("Matmul", stream, node="projection")
              .input(a_dev, shape=(32, 64), dtype="float32")
              .input(b_dev, shape=(64, 16), dtype="float32")
              .output(out_dev, shape=(32, 16), dtype="float32"))
    cache = ExecutorCache.for_device(device)
    before = cache.stats()
    for _ in range(10):
        runner.run()  # the same signature every time: phase one runs once
    after = cache.stats()
    result = device.download(out_dev, "float32", (32, 16))
    print(f"Matmul on device buffers x10: max |error| {np.abs(result - a @ b).max():.1e}; executor cache "
          f"+{after.hits - before.hits} hits, +{after.misses - before.misses} miss (phase one ran "
          f"{after.phase_one - before.phase_one} time)")
    for buffer in (a_dev, b_dev, out_dev):
        buffer.close()


async def concurrently(device: aclpipe.Device, rng: np.random.Generator) -> None:
    """run_async awaits an event instead of blocking: calls on different streams overlap."""
    xs = [rng.standard_normal((16, 32)).astype(np.float32) for _ in range(4)]
    runners = [OpRunner("Gelu", device.create_stream()).input(x).output() for x in xs]
    results = await asyncio.gather(*(runner.run_async() for runner in runners))
    print(f"4 x Gelu with run_async on 4 streams: shapes {[r[0].shape for r in results]}")


def a_clear_error(stream: aclpipe.Stream) -> None:
    try:
        OpRunner("Matmul", stream).input(np.ones((2, 3), np.float32)).input(np.ones((4, 5), np.float32)).output().run()
    except aclpipe.AclpipeError as error:
        print(f"a bad call fails before anything is launched: {type(error).__name__}: {error}")


def main() -> None:
    rng = np.random.default_rng(0)
    with aclpipe.open_device("sim", sanitizer=True) as device:
        print(device.describe())
        stream = device.create_stream()
        numpy_in_numpy_out(stream, rng)
        device_buffers(device, stream, rng)
        asyncio.run(concurrently(device, rng))
        a_clear_error(stream)


if __name__ == "__main__":
    main()
