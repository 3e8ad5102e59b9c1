"""Device names: one device (``"sim:1"``) and lists of them (``"sim:0,1"``, ``"ascend:0-7"``)."""

from __future__ import annotations

import pytest

from aclpipe.backends import is_device_list, parse_device, parse_device_list


def test_one_device():
    assert parse_device("sim") == ("sim", 0)
    assert parse_device("Ascend:3") == ("ascend", 3)
    with pytest.raises(ValueError, match="integer"):
        parse_device("sim:x")


@pytest.mark.parametrize(("spec", "expected"), [
    ("sim:0,1", [("sim", 0), ("sim", 1)]),
    ("ascend:0-7", [("ascend", i) for i in range(8)]),
    ("sim:0,2-3", [("sim", 0), ("sim", 2), ("sim", 3)]),
    (["sim:1", "sim:0"], [("sim", 1), ("sim", 0)]),
    ("sim:2", [("sim", 2)]),
])
def test_device_lists(spec, expected):
    assert parse_device_list(spec) == expected


@pytest.mark.parametrize(("spec", "message"), [
    ("sim:0,0", "twice"), ("sim:3-1", "count up"), ("sim:a,b", "not an index"),
    (["sim:0", "ascend:1"], "mix backends"), ([], "empty"),
])
def test_bad_device_lists(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_device_list(spec)


def test_what_counts_as_several_devices():
    assert is_device_list("sim:0,1") and is_device_list("ascend:0-7") and is_device_list(["sim:0"])
    assert not is_device_list("sim") and not is_device_list("sim:1") and not is_device_list(None)
