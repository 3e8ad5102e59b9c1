"""Generate tokens from a small GPT-style ONNX decoder, many requests at once.

Builds the toy decoder (``aclpipe.decode.toy_model``: the optimum / onnxruntime-genai export
convention), serves ``--requests`` prompts of mixed lengths at once through one
``aclpipe.decode.Decoder`` (continuous batching: requests join and leave between steps), and
checks every request's tokens against greedy decoding with onnxruntime when it is installed.

Run: ``python examples/generate.py [--requests 8] [--max-new-tokens 16]``.
"""

from __future__ import annotations

import argparse
import time

import anyio
import numpy as np

from aclpipe.decode import Decoder
from aclpipe.decode.toy_model import toy_decoder


def onnxruntime_greedy(model, prompt: list[int], new_tokens: int) -> list[int] | None:
    """Greedy decoding with onnxruntime, feeding the cache back each step (None without it)."""
    try:
        import onnxruntime
    except ImportError:
        return None
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    past = {f"past_key_values.{layer}.{kind}": np.zeros((1, 4, 0, 8), np.float32)
            for layer in range(2) for kind in ("key", "value")}
    step, start, tokens = np.array([prompt], np.int64), 0, []
    while len(tokens) < new_tokens:
        total = start + step.shape[1]
        outputs = dict(zip([o.name for o in session.get_outputs()], session.run(None, {
            "input_ids": step, "attention_mask": np.ones((1, total), np.int64),
            "position_ids": np.arange(start, total, dtype=np.int64)[None], **past})))
        tokens.append(int(np.argmax(outputs["logits"][0, -1])))
        past = {name: outputs[name.replace("past_key_values", "present")] for name in past}
        start, step = total, np.array([[tokens[-1]]], np.int64)
    return tokens


async def main(requests: int, new_tokens: int) -> None:
    model = toy_decoder()
    rng = np.random.default_rng(0)
    prompts = [rng.integers(1, 64, int(rng.integers(1, 24))).tolist() for _ in range(requests)]
    results: list[list[int]] = [[] for _ in prompts]
    async with Decoder(model, max_batch=8, max_len=64) as decoder:

        async def one(index: int) -> None:
            async for token in decoder.generate(prompts[index], new_tokens):
                results[index].append(token)

        started = time.perf_counter()
        async with anyio.create_task_group() as group:
            for index in range(requests):
                group.start_soon(one, index)
        elapsed = time.perf_counter() - started
        stats = decoder.stats()
    for prompt, tokens in zip(prompts, results):
        print(f"prompt {prompt[:6]}{'...' if len(prompt) > 6 else ''} ({len(prompt)} tokens) -> {tokens}")
    print(f"{requests} requests, {stats['tokens']} tokens in {elapsed * 1e3:.0f} ms: {stats['prefill_steps']} "
          f"prefill and {stats['decode_steps']} decode steps, {stats['programs']} step programs "
          f"({stats['captured']} captured)")
    same = [onnxruntime_greedy(model, prompt, new_tokens) == tokens for prompt, tokens in zip(prompts, results)]
    if all(same):
        print(f"all {requests} requests match onnxruntime's greedy decoding")
    else:
        print(f"{same.count(False)} of {requests} requests differ from onnxruntime's greedy decoding")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    args = parser.parse_args()
    anyio.run(main, args.requests, args.max_new_tokens)
