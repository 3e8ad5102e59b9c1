"""Public conformance kit: the backend contract as executable checks, and a latch for tests.

``check_backend(open_fn)`` runs every check of :data:`CHECKS` on fresh devices and returns a
:class:`ConformanceReport`; ``latch(stream)`` holds a stream until released.
"""

from __future__ import annotations

from .checks import Check, ConformanceFailure
from .conformance import CheckResult, ConformanceReport, check_backend
from .latch import Latch, latch
from .rules import CHECKS, CheckSkipped

__all__ = ["CHECKS", "Check", "CheckResult", "CheckSkipped", "ConformanceFailure", "ConformanceReport", "Latch",
           "check_backend", "latch"]
