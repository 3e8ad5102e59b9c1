"""What pipelines over several devices share: opening the devices, adding up their counters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...backends import parse_device_list
from ...runtime import Device, open_device

__all__ = ["open_devices", "sum_counters"]


def open_devices(device: str | Sequence[Device | str], options: Mapping[str, Any] | None = None,
                 ) -> tuple[list[Device], list[Device]]:
    """The devices ``device`` names, opened where given by name; returns (all, opened here).

    Devices already opened are used as they are; names are opened with ``options`` (backend
    options such as the simulator's ``timing``).  On failure, what was opened is closed again.
    """
    items: list[Device | str]
    if isinstance(device, str):
        items = [f"{name}:{index}" for name, index in parse_device_list(device)]
    elif isinstance(device, (list, tuple)):
        items = list(device)
        if not all(isinstance(item, (Device, str)) for item in items):
            raise TypeError("devices must be Device objects or names such as 'sim:0'")
        names = [item for item in items if isinstance(item, str)]
        if names:
            parse_device_list(names)  # every name checked before anything opens
    else:
        raise TypeError(f"devices must be a list or a string such as 'sim:0,1', got {type(device).__name__}")
    devices: list[Device] = []
    opened: list[Device] = []
    try:
        for item in items:
            if isinstance(item, Device):
                devices.append(item)
            else:
                opened.append(open_device(item, **dict(options or {})))
                devices.append(opened[-1])
    except BaseException:
        for made in opened:
            made.close()
        raise
    names = [d.name for d in devices]
    if len(set(names)) != len(names) or not names:
        for made in opened:
            made.close()
        raise ValueError(f"a pipeline needs distinct devices, got {names}")
    return devices, opened


def sum_counters(values: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Counter mappings (workspace stats) of several devices in one: numbers added key by key,
    anything else (a strategy's name, an unknown limit) taken from the first that has it."""
    merged: dict[str, Any] = {}
    for mapping in values:
        for key, value in mapping.items():
            previous = merged.get(key)
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            if numeric and isinstance(previous, (int, float)) and not isinstance(previous, bool):
                merged[key] = previous + value
            elif previous is None:
                merged[key] = value
    return merged
