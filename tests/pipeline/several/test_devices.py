"""Opening the devices of a multi-device pipeline, and adding up their counters."""

from __future__ import annotations

import pytest

import aclpipe
from aclpipe.pipeline.several.devices import open_devices, sum_counters


def test_names_are_opened_and_given_devices_used_as_they_are(device):
    devices, opened = open_devices([device, "sim:1"], {"sanitizer": True})
    try:
        assert devices[0] is device and [d.name for d in devices] == ["sim:0", "sim:1"]
        assert opened == devices[1:]  # only what it opened is the caller's to close
    finally:
        for made in opened:
            made.close()
    devices, opened = open_devices("sim:2-3")
    assert [d.name for d in devices] == ["sim:2", "sim:3"] and opened == devices
    for made in opened:
        made.close()


@pytest.mark.parametrize(("spec", "error", "match"), [
    (["sim:0", "sim:0"], ValueError, "twice"),
    ("sim:0,0", ValueError, "twice"),
    (["sim:0", 3], TypeError, "Device objects or names"),
    (42, TypeError, "a list or a string"),
    ("sim:0,99", Exception, "does not exist"),
])
def test_bad_device_lists_fail_before_leaving_anything_open(spec, error, match):
    before = sum(1 for _ in _open_sim_devices())
    with pytest.raises(error, match=match):
        open_devices(spec)
    assert sum(1 for _ in _open_sim_devices()) == before


def _open_sim_devices():
    import gc

    return (obj for obj in gc.get_objects() if isinstance(obj, aclpipe.Device) and not obj.closed)


def test_counters_add_up_key_by_key_and_keep_the_first_name():
    merged = sum_counters([{"strategy": "pool", "in_use": 2, "limit": None, "flag": True},
                           {"strategy": "pool", "in_use": 3, "limit": 10, "flag": False}])
    assert merged == {"strategy": "pool", "in_use": 5, "limit": 10, "flag": True}
