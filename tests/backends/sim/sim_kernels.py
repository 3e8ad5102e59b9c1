"""A recording kernel for the simulator's error and fault tests."""

from __future__ import annotations

from typing import Any

from aclpipe.backends.sim.engines import Cost

__all__ = ["kernel"]


def kernel(device: Any, stream: Any, name: str, ran: list[str], node: str | None = None) -> None:
    """Launch a kernel called ``name`` on ``stream`` that appends ``name`` to ``ran`` when it runs
    (``node`` goes into the launch context, where fault rules match it)."""
    context = {"node": node} if node else None
    device.backend.launch_kernel(stream.handle, name, lambda: ran.append(name), cost=Cost(), context=context)
