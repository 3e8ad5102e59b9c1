"""Prints the ONNX conformance tables (passes and skips per op, and every skip reason) of the
eager path and of the Pipeline path."""

from __future__ import annotations

import sys
from typing import Any

_TABLES = (("test_onnx_conformance", "ONNX conformance (eager context, sim, sanitizer on)"),
           ("test_onnx_conformance_pipeline", "ONNX conformance (load_onnx + Pipeline, 2 streams, sim, sanitizer on)"))


_TYPE_REASONS = ("element type ", "graph input of type ", "graph output of type ")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for module_name, title in _TABLES:
        module = sys.modules.get(module_name)
        tally = getattr(module, "TALLY", None)
        if tally:
            _table(terminalreporter, title, tally, module.SKIP_REASONS)


def _table(terminalreporter: Any, title: str, tally: Any, reasons: Any) -> None:
    write = terminalreporter.write_line
    terminalreporter.section(title)
    write(f"{'op':<42} {'passed':>6} {'skipped':>7} {'failed':>6}")
    totals = {"passed": 0, "skipped": 0, "failed": 0}
    for group in sorted(tally):
        counts = tally[group]
        write(f"{group:<42} {counts['passed']:>6} {counts['skipped']:>7} {counts['failed']:>6}")
        for key in totals:
            totals[key] += counts[key]
    write(f"{'total':<42} {totals['passed']:>6} {totals['skipped']:>7} {totals['failed']:>6}")
    # The conformance target counts every case whose element types the NPU has: type skips
    # leave the count, every other skip (an unimplemented feature) and failure stays in it.
    type_skips = sum(count for reason, count in reasons.items() if reason.startswith(_TYPE_REASONS))
    counted = totals["passed"] + totals["skipped"] + totals["failed"] - type_skips
    if counted:
        write(f"passed {totals['passed']} of the {counted} cases whose element types the NPU has "
              f"({100 * totals['passed'] / counted:.1f}%)")
    write("skip reasons:")
    for reason, count in reasons.most_common():
        write(f"  {count:>4}  {reason}")
