"""Prints the ONNX conformance table (passes and skips per op, and every skip reason)."""

from __future__ import annotations

import sys
from typing import Any


def pytest_terminal_summary(terminalreporter: Any) -> None:
    module = sys.modules.get("test_onnx_conformance")
    tally = getattr(module, "TALLY", None)
    if not tally:
        return
    write = terminalreporter.write_line
    terminalreporter.section("ONNX conformance (eager context, sim, sanitizer on)")
    write(f"{'op':<42} {'passed':>6} {'skipped':>7} {'failed':>6}")
    totals = {"passed": 0, "skipped": 0, "failed": 0}
    for group in sorted(tally):
        counts = tally[group]
        write(f"{group:<42} {counts['passed']:>6} {counts['skipped']:>7} {counts['failed']:>6}")
        for key in totals:
            totals[key] += counts[key]
    write(f"{'total':<42} {totals['passed']:>6} {totals['skipped']:>7} {totals['failed']:>6}")
    write("skip reasons:")
    for reason, count in module.SKIP_REASONS.most_common():
        write(f"  {count:>4}  {reason}")
