"""``check_backend``: run the backend contract and the documented runtime rules
(:data:`~aclpipe.testing.rules.CHECKS`) against a device.

Like ``trio.testing.check_one_way_stream``, the contract is executable: any backend (the
simulator, real CANN, a fake driver) is opened once per check through ``open_fn`` and must
pass every check its capabilities allow.  A check whose capability is missing is *skipped
with its reason*, never silently passed::

    report = check_backend(lambda: open_device("sim", sanitizer=True))
    rich.print(report.table())
    assert report.ok
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rich.table import Table

from ..runtime import Device
from .checks import Check, ConformanceFailure
from .rules import CHECKS, CheckSkipped

__all__ = ["FAILED", "PASSED", "SKIPPED", "CheckResult", "ConformanceReport", "check_backend"]

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
_STYLES = {PASSED: "green", FAILED: "bold red", SKIPPED: "yellow"}
_HINTS = {
    # Only the simulator has a sanitizer: telling a hardware user to switch it on would mislead.
    "sanitizer": "the sanitizer is a simulator feature (on 'sim', open the device with sanitizer=True or set "
                 "ACLPIPE_SANITIZER=1); other backends cannot run this check",
    "fault_injection": "only backends that can plant faults (the simulator) run it",
    "host_callbacks": "the backend cannot run host functions",
    "event_timing": "the backend cannot time events",
    "reusable_events": "the runtime lacks aclrtCreateEventExWithFlag",
    "stop_on_failure": "the runtime lacks aclrtSetStreamFailureMode",
    "stream_abort": "the product has no aclrtStreamAbort (06_stream_management.md)",
    "graph_capture": "the product or runtime has no aclmdlRICapture* (15_model_running_instance__management.md)",
    "sync_copies": "the backend has no synchronous copies (aclrtMemcpy, aclrtMemset)",
}


@dataclass(frozen=True)
class CheckResult:
    """One row of a :class:`ConformanceReport`."""

    name: str
    status: str  #: ``"passed"``, ``"failed"`` or ``"skipped"``
    detail: str  #: what passed, why it failed, or why it was skipped
    seconds: float
    description: str = ""

    def __str__(self) -> str:
        return f"{self.name}: {self.status}: {self.detail}"


class ConformanceReport:
    """The rows of one or more :func:`check_backend` runs, in order."""

    def __init__(self, device: str = "", *, on_row: Callable[[CheckResult], None] | None = None):
        self.device = device
        self.rows: list[CheckResult] = []
        self._on_row = on_row

    def add(self, row: CheckResult) -> None:
        self.rows.append(row)
        if self._on_row is not None:
            self._on_row(row)

    @property
    def ok(self) -> bool:
        """True when no check failed (skips are not failures)."""
        return not self.failed

    @property
    def failed(self) -> list[CheckResult]:
        return [row for row in self.rows if row.status == FAILED]

    @property
    def skipped(self) -> list[CheckResult]:
        return [row for row in self.rows if row.status == SKIPPED]

    def summary(self) -> str:
        counts = {status: sum(row.status == status for row in self.rows) for status in (PASSED, FAILED, SKIPPED)}
        seconds = sum(row.seconds for row in self.rows)
        return (f"{self.device or 'backend'}: {counts[PASSED]} passed, {counts[FAILED]} failed, "
                f"{counts[SKIPPED]} skipped in {seconds:.2f} s")

    def table(self) -> Table:
        """The report as a :class:`rich.table.Table` (print it with ``rich.print`` or a Console)."""
        table = Table(title=f"aclpipe conformance: {self.device}" if self.device else "aclpipe conformance",
                      caption=self.summary())
        table.add_column("check", no_wrap=True)
        table.add_column("status", no_wrap=True)
        table.add_column("s", justify="right", no_wrap=True)
        table.add_column("detail")
        for row in self.rows:
            status = f"[{_STYLES[row.status]}]{row.status}[/]"
            table.add_row(row.name, status, f"{row.seconds:.2f}", row.detail)
        return table

    def __str__(self) -> str:
        return "\n".join([self.summary(), *(f"  {row}" for row in self.rows)])


def check_backend(open_fn: Callable[[], Device], *, report: ConformanceReport | None = None,
                  checks: Iterable[Check] = CHECKS) -> ConformanceReport:
    """Run every check, in order, each on a fresh device from ``open_fn()``.

    Parameters
    ----------
    open_fn:
        Opens a new device (e.g. ``lambda: open_device("sim", sanitizer=True)``); each check
        closes its own device.
    report:
        A report to append the rows to (to combine runs, or to watch rows arrive through its
        ``on_row``); a new one by default.
    checks:
        The checks to run (default: all of :data:`CHECKS`).

    Returns
    -------
    ConformanceReport
        One row per check; ``report.ok`` is False when any check failed.
    """
    report = report if report is not None else ConformanceReport()
    for check in checks:
        report.add(_run_check(check, open_fn, report))
    return report


def _run_check(check: Check, open_fn: Callable[[], Device], report: ConformanceReport) -> CheckResult:
    started = time.perf_counter()

    def row(status: str, detail: str) -> CheckResult:
        return CheckResult(check.name, status, detail, time.perf_counter() - started, check.description)

    try:
        device = open_fn()
    except Exception as error:  # noqa: BLE001 (a check's failure is a row, whatever the backend raised)
        return row(FAILED, f"could not open a device: {type(error).__name__}: {error}")
    if not report.device:
        report.device = device.describe()
    try:
        missing = [need for need in check.needs if not getattr(device.capabilities, need, False)]
        if missing:
            result = row(SKIPPED, f"the backend lacks the {missing[0]!r} capability; {_HINTS.get(missing[0], '')}")
        else:
            try:
                result = row(PASSED, check.run(device))
            except CheckSkipped as skipped:
                result = row(SKIPPED, str(skipped))
    except Exception as error:  # noqa: BLE001
        # Close while the traceback still holds the check's buffers: once the device is closed
        # their finalizers do nothing, instead of freeing memory a stream may still use.
        _close(device)
        detail = str(error) if isinstance(error, ConformanceFailure) else f"unexpected {type(error).__name__}: {error}"
        return row(FAILED, detail + _reference(check))
    _close(device)
    return result


def _reference(check: Check) -> str:
    """Where a failed rule comes from, for whoever reads the failure: the docs page, and the
    runtime source that settles what the page leaves open."""
    cited = "; ".join(part for part in (check.doc, check.source) if part)
    return f" [{cited}]" if cited else ""


def _close(device: Device) -> None:
    # A failed check may leave a stream held by a planted hang; free it so close() can drain.
    try:
        device.release_hangs()
    finally:
        device.close()
