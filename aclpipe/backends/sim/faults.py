"""Fault injection: make the simulated device fail the way a real one does.

A :class:`FaultRule` picks tasks by kind (``"kernel"``, ``"copy"``, ``"alloc"``,
``"host_func"``) and by a substring of the task's name or node, optionally skipping the
first matches, and then either fails them with an ACL code or hangs them until released.
Failures surface as sticky stream errors at the next sync, query or completion, exactly
like a kernel exception on the device; allocation faults raise at the call.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FAULT_KINDS", "FaultInjector", "FaultRule"]

FAULT_KINDS = ("kernel", "copy", "alloc", "host_func")
#: AI-core exception for kernels, system DMA error for copies (507053 is the hardware's
#: uncorrectable memory error, not a failed transfer: hicann/runtime 25-01_aclError.md).
_DEFAULT_CODES = {"kernel": 507015, "copy": 507013, "alloc": 207001, "host_func": 507000}


@dataclass(eq=False)
class FaultRule:
    """One planted fault.

    Parameters
    ----------
    kind:
        Which tasks it applies to: ``"kernel"``, ``"copy"``, ``"alloc"`` or ``"host_func"``.
    match:
        Substring of the task name or of its ``node``/``op`` context; ``None`` matches all.
    code:
        ACL code to fail with (default: AI-core exception for kernels, system DMA error
        for copies, allocation failure for allocations).
    skip:
        Matching tasks to let through before the fault fires.
    times:
        How many times it fires (``None``: every time).
    hang:
        Instead of failing, hold the task (and its stream) until :meth:`FaultInjector.release`.
    run:
        Only tasks launched for this run number (their ``run`` context), ``None``: any run.
        Runs of a pipeline overlap, so "the n-th launch of a node" need not be run n's.
    """

    kind: str
    match: str | None = None
    code: int | None = None
    skip: int = 0
    times: int | None = 1
    hang: bool = False
    run: int | None = None
    fired: int = 0
    seen: int = 0
    released: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"fault kind must be one of {FAULT_KINDS}, got {self.kind!r}")
        if self.hang and self.kind == "alloc":
            raise ValueError("an allocation cannot hang; use kind='kernel' or 'copy' for hangs")
        if self.code is None:
            self.code = _DEFAULT_CODES[self.kind]

    def matches(self, kind: str, name: str, context: dict[str, Any] | None) -> bool:
        if kind != self.kind:
            return False
        if self.run is not None and (context or {}).get("run") != self.run:
            return False
        if self.match is None:
            return True
        haystack = [name] + [str(v) for k, v in (context or {}).items() if k in ("node", "op")]
        return any(self.match in text for text in haystack)


class FaultInjector:
    """The planted faults of one device; thread-safe."""

    def __init__(self) -> None:
        self._rules: list[FaultRule] = []
        self._lock = threading.Lock()
        #: Whether any rule is planted: stream workers skip :meth:`check` for every task otherwise.
        self.planted = False

    def add(self, rule: FaultRule) -> FaultRule:
        with self._lock:
            self._rules.append(rule)
            self.planted = True
        return rule

    def clear(self) -> None:
        self.release()
        with self._lock:
            self._rules.clear()
            self.planted = False

    def release(self, rule: FaultRule | None = None) -> None:
        """Let hung tasks go (all of them, or those of one rule)."""
        with self._lock:
            rules = [rule] if rule else list(self._rules)
        for each in rules:
            each.released.set()

    def may_hang(self) -> bool:
        """Whether a planted rule hangs the tasks it matches."""
        return any(rule.hang for rule in self._rules)

    def check(self, kind: str, name: str, context: dict[str, Any] | None) -> FaultRule | None:
        if not self._rules:
            return None
        with self._lock:
            for rule in self._rules:
                if not rule.matches(kind, name, context):
                    continue
                rule.seen += 1
                if rule.seen <= rule.skip:
                    continue
                if rule.times is not None and rule.fired >= rule.times:
                    continue
                rule.fired += 1
                return rule
        return None
