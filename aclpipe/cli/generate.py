"""``aclpipe generate MODEL --prompt-ids 1,2,3``: generate tokens from an ONNX decoder.

The model is read in the optimum / onnxruntime-genai convention (:mod:`aclpipe.decode.kv_pattern`).
Prints the generated token ids, comma-separated, on one line (``--budget`` first prints each
step program's use of the device's streams, events and memory against what is left).
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from .common import EXIT_OK, open_device_for, positive_int, reporting_errors, say

__all__ = ["HELP", "NAME", "configure", "run", "token_ids"]

NAME = "generate"
HELP = "generate tokens from an ONNX decoder (optimum / onnxruntime-genai export convention)"


def token_ids(text: str) -> list[int]:
    """argparse type: ``1,2,3`` (token ids >= 0)."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated token ids, got {text!r}") from None
    if not values or any(value < 0 for value in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated token ids >= 0, got {text!r}")
    return values


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``generate``'s arguments."""
    parser.add_argument("model", help="an ONNX decoder (.onnx)")
    parser.add_argument("--prompt-ids", type=token_ids, required=True, help="the prompt's token ids: 1,2,3")
    parser.add_argument("--max-new-tokens", type=positive_int, default=16, help="tokens to generate (default 16)")
    parser.add_argument("--eos-id", type=int, default=None, help="stop after this token")
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default); > 0: sample")
    parser.add_argument("--top-k", type=positive_int, default=None, help="sample from the k most likely")
    parser.add_argument("--seed", type=int, default=None, help="seed of the sampling")
    parser.add_argument("--max-len", type=positive_int, default=256, help="positions per sequence (default 256)")
    parser.add_argument("--device", default=None, help="device, e.g. 'sim' or 'ascend:0' (default: "
                        "ACLPIPE_DEVICE, else sim)")
    parser.add_argument("--budget", action="store_true",
                        help="first print each step program's streams, events and memory against the device's budget")


@reporting_errors
def run(args: argparse.Namespace, console: Console) -> int:
    """Generate the tokens and print them; returns the exit status."""
    from ..decode import Decoder

    options: dict[str, Any] = {"eos_id": args.eos_id, "temperature": args.temperature, "top_k": args.top_k,
                               "seed": args.seed}
    device = open_device_for(args.device)
    try:
        with Decoder(args.model, device=device, max_batch=1, max_len=args.max_len) as decoder:
            if args.budget:
                say(console, decoder.capture_plan().describe())
            tokens = decoder.generate_sync(args.prompt_ids, args.max_new_tokens, **options)
    finally:
        device.close()
    say(console, ",".join(str(token) for token in tokens))
    return EXIT_OK
