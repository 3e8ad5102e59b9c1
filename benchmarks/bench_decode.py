"""Decoding benchmark: continuous batching against one request after another, on the simulated NPU.

The toy GPT decoder (:mod:`aclpipe.decode.toy_model`), sanitizer off, one :class:`~aclpipe.decode.Decoder`
with ``max_batch=16``.  Every measured pass runs after a warm-up pass of the same requests, so
that preparing (and capturing) the step programs is not timed.

``batching``  16 requests of mixed prompt (2-40) and output (8-48) lengths, all at once, against
              the same 16 one after another; verdict: ">= 3x" faster.  Then the p95 time between
              two tokens of one request with the 16 in flight against the same requests served
              alone (the pass one after another); verdict: "<= 2x".
``host``      host CPU time of the event loop thread per generated token, with the step programs
              captured (the Atlas A2 spec) and uncaptured (the same spec with capture off):
              printed, with the verdict "captured below uncaptured".
``copies``    bytes each step of the 16 at once copies to the device and back, against what the
              same steps copied when the cache was held on the host (each step's past in, its
              new positions out: computed from the steps' shapes); verdict: the cache never
              crosses, so a decode step's bytes grow only with its mask's width (8 bytes a
              position a row), not with the cache (``2 x layers x heads x head_dim x 4``).

Run: ``python benchmarks/bench_decode.py [batching|host|copies ...] [--requests 16] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from collections.abc import Sequence
from typing import Any

import anyio
import numpy as np

import aclpipe
from aclpipe.backends.sim.engines import ATLAS_A2
from aclpipe.decode import Decoder
from aclpipe.decode.toy_model import ToyConfig, toy_decoder

MAX_LEN = 96


def requests(count: int, seed: int = 0) -> list[tuple[list[int], int]]:
    """``count`` (prompt, max_new_tokens) pairs of mixed lengths."""
    rng = np.random.default_rng(seed)
    return [(rng.integers(1, 64, int(rng.integers(2, 41))).tolist(), int(rng.integers(8, 49))) for _ in range(count)]


async def _timed(decoder: Decoder, prompt: list[int], new_tokens: int) -> list[float]:
    """Arrival time of every token of one request."""
    times = []
    async for _ in decoder.generate(prompt, new_tokens):
        times.append(time.perf_counter())
    return times


async def _concurrent(decoder: Decoder, work: Sequence[tuple[list[int], int]]) -> tuple[float, list[list[float]]]:
    arrivals: list[list[float]] = [[] for _ in work]

    async def one(index: int) -> None:
        arrivals[index] = await _timed(decoder, *work[index])

    started = time.perf_counter()
    async with anyio.create_task_group() as group:
        for index in range(len(work)):
            group.start_soon(one, index)
    return time.perf_counter() - started, arrivals


async def _serial(decoder: Decoder, work: Sequence[tuple[list[int], int]]) -> tuple[float, list[list[float]]]:
    started = time.perf_counter()
    arrivals = [await _timed(decoder, *request) for request in work]
    return time.perf_counter() - started, arrivals


def _gaps(arrivals: list[list[float]]) -> np.ndarray:
    """Time between consecutive tokens of each request (the per-token latency a reader sees)."""
    return np.concatenate([np.diff(times) for times in arrivals if len(times) > 1])


def _decoder(capture: bool = True) -> Decoder:
    spec = ATLAS_A2 if capture else dataclasses.replace(ATLAS_A2, graph_capture=False)
    device = aclpipe.open_device("sim", sanitizer=False, spec=spec)
    return Decoder(toy_decoder(ToyConfig()), device=device, max_batch=16, max_len=MAX_LEN)


async def batching(count: int, rounds: int) -> None:
    work = requests(count)
    tokens = sum(new for _, new in work)
    serial: list[float] = []
    concurrent: list[float] = []
    alone: list[list[float]] = []
    together: list[list[float]] = []
    async with _decoder() as decoder:
        await _concurrent(decoder, work)  # warm-up: prepares every step program these passes meet
        await _serial(decoder, work)
        for _ in range(rounds):  # alternated, so that a noisy moment of the machine hits both alike
            elapsed, arrivals = await _serial(decoder, work)
            serial.append(elapsed)
            alone += arrivals
            elapsed, arrivals = await _concurrent(decoder, work)
            concurrent.append(elapsed)
            together += arrivals
        stats = decoder.stats()
        device = decoder.pipeline.device
    device.close()
    serial_s, concurrent_s = statistics.median(serial), statistics.median(concurrent)
    speedup = serial_s / concurrent_s
    print(f"batching: {count} requests, {tokens} tokens (median of {rounds} rounds); one after another "
          f"{serial_s * 1e3:.0f} ms ({tokens / serial_s:.0f} tokens/s), all at once {concurrent_s * 1e3:.0f} ms "
          f"({tokens / concurrent_s:.0f} tokens/s): {speedup:.1f}x")
    print(f"  verdict: {'PASS' if speedup >= 3 else 'FAIL'} (>= 3x)")
    p95_many, p95_lone = (float(np.percentile(_gaps(a), 95)) for a in (together, alone))
    ratio = p95_many / p95_lone
    print(f"per-token latency p95: {p95_many * 1e3:.2f} ms with {count} in flight, {p95_lone * 1e3:.2f} ms each alone: "
          f"{ratio:.2f}x")
    print(f"  verdict: {'PASS' if ratio <= 2 else 'FAIL'} (<= 2x)")
    print(f"  steps: {stats['prefill_steps']} prefill, {stats['decode_steps']} decode; programs {stats['programs']} "
          f"({stats['captured']} captured, {stats['starved']} starved)")
    steps = stats["prefill_steps"] + stats["decode_steps"]
    print(f"copies per step (the KV cache stays on the device, {stats['cache_bytes'] / 2**10:.0f} KiB): "
          f"{stats['h2d_bytes'] / steps:.0f} B host-to-device (ids, mask, positions), "
          f"{stats['d2h_bytes'] / steps:.0f} B device-to-host (logits)")


async def host(count: int) -> None:
    work = requests(count)
    tokens = sum(new for _, new in work)
    per_token: dict[bool, float] = {}
    for capture in (True, False):
        async with _decoder(capture) as decoder:
            await _concurrent(decoder, work)
            cpu = time.thread_time()
            await _concurrent(decoder, work)
            per_token[capture] = (time.thread_time() - cpu) / tokens
            captured = decoder.stats()["captured"]
            device = decoder.pipeline.device
        device.close()
        print(f"host: {'captured' if capture else 'uncaptured'} steps ({captured} programs captured): "
              f"{per_token[capture] * 1e6:.0f} us of event loop thread CPU per generated token")
    print(f"  verdict: {'PASS' if per_token[True] < per_token[False] else 'FAIL'} (captured below uncaptured)")


async def copies(count: int) -> None:
    work = requests(count)
    steps: list[tuple[int, int, int, int, int]] = []  # rows, seq, past, bytes in, bytes out
    async with _decoder() as decoder:
        run = decoder.pipeline.run

        async def counted(**feeds: np.ndarray) -> dict[str, np.ndarray]:
            outputs = await run(**feeds)
            rows, seq = feeds["input_ids"].shape
            steps.append((rows, seq, feeds["attention_mask"].shape[1] - seq,
                          sum(array.nbytes for array in feeds.values()), sum(a.nbytes for a in outputs.values())))
            return outputs

        decoder.pipeline.run = counted  # type: ignore[method-assign]
        await _concurrent(decoder, work)
        layout, device = decoder.layout, decoder.pipeline.device
    device.close()
    per_position = 2 * layout.layers * layout.heads * layout.head_dim * 4  # keys and values, float32
    # The host-held cache: each step's past in, each present's new positions out; no write positions.
    held = [(h2d + rows * past * per_position - rows * 16, d2h + rows * seq * per_position)
            for rows, seq, past, h2d, d2h in steps]
    now_in, now_out = (statistics.mean(step[i] for step in steps) for i in (3, 4))
    then_in, then_out = (statistics.mean(step[i] for step in held) for i in (0, 1))
    print(f"copies: {count} requests at once, {len(steps)} steps; per step now {now_in:,.0f} B host-to-device, "
          f"{now_out:,.0f} B device-to-host; with the cache held on the host {then_in:,.0f} B and {then_out:,.0f} B")
    decode = [step for step in steps if step[1] == 1]
    growth = max((h2d - 8 * rows * past) / rows for rows, _, past, h2d, _ in decode)
    fixed = min((h2d - 8 * rows * past) / rows for rows, _, past, h2d, _ in decode)
    print(f"  decode steps: {fixed:.0f}-{growth:.0f} B per row besides the mask (8 B a position), whatever the past; "
          f"the cache held {per_position} B a position")
    print(f"  verdict: {'PASS' if growth == fixed else 'FAIL'} (the cache never crosses: a step's bytes do not grow "
          "with it)")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("which", nargs="*", help="batching, host, copies (default: all)")
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5, help="batching: rounds of both passes (default 5)")
    args = parser.parse_args(argv)
    which: list[Any] = args.which or ["batching", "host", "copies"]
    unknown = sorted(set(which) - {"batching", "host", "copies"})
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}: choose batching, host, copies")
    for name in which:
        if name == "batching":
            anyio.run(batching, args.requests, args.rounds)
        elif name == "copies":
            anyio.run(copies, args.requests)
        else:
            anyio.run(host, args.requests)


if __name__ == "__main__":
    main()
