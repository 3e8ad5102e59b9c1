"""``aclpipe selftest``: run the backend conformance kit on a device and print the table."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from ..backends import parse_device
from .common import EXIT_FAILED, EXIT_OK, add_sanitizer_argument

__all__ = ["HELP", "NAME", "configure", "run"]

NAME = "selftest"
HELP = "run the backend conformance checks on a device"


def configure(parser: argparse.ArgumentParser) -> None:
    """``--device``, ``--timing``, ``--sanitizer/--no-sanitizer``."""
    parser.add_argument("--device", default=None, help="device to test, e.g. 'sim' or 'ascend:0' "
                                                       "(default: $ACLPIPE_DEVICE, else sim)")
    parser.add_argument("--timing", action="store_true", help="sim only: turn the timing model on")
    add_sanitizer_argument(parser, default=True)  # --no-sanitizer skips the sanitizer's own checks


def _device_options(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    if backend == "sim":
        return {"sanitizer": args.sanitizer, "timing": args.timing}
    if args.timing or not args.sanitizer:
        raise ValueError(f"--timing and --no-sanitizer apply to the sim backend only, not {backend!r}")
    return {}


def run(args: argparse.Namespace, console: Console) -> int:
    """Exit status 0 when every check passed (or was skipped with a reason), 1 otherwise."""
    from .. import testing
    from ..runtime import open_device

    backend, index = parse_device(args.device)
    spec = f"{backend}:{index}"
    options = _device_options(backend, args)
    open_device(spec, **options).close()  # a bad device is a usage error, not ten failed checks
    report = testing.check_backend(lambda: open_device(spec, **options), report=testing.ConformanceReport())
    console.print(report.table())
    return EXIT_OK if report.ok else EXIT_FAILED
