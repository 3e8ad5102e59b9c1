"""Stream and event handles of the ascend backend: the C handle plus what Python tracks."""

from __future__ import annotations

from typing import Any

from .host_calls import HostErrors

__all__ = ["AscendStream", "AscendEvent"]


class AscendStream:
    """An ``aclrtStream`` and its name (``s0``, ``s1``, ...) for error messages."""

    def __init__(self, name: str, priority: int, handle: Any):
        self.name = name
        self.priority = priority
        self.handle = handle
        self.destroyed = False
        self.subscribed = False  # to the device's report thread (callback mode)
        self.host_errors = HostErrors()

    def __repr__(self) -> str:
        return f"<AscendStream {self.name}{' destroyed' if self.destroyed else ''}>"


class AscendEvent:
    """An ``aclrtEvent``; ``timing`` events carry ``ACL_EVENT_TIME_LINE``."""

    def __init__(self, name: str, timing: bool, handle: Any):
        self.name = name
        self.timing = timing
        self.handle = handle
        self.destroyed = False

    def __repr__(self) -> str:
        return f"<AscendEvent {self.name}{' destroyed' if self.destroyed else ''}>"
