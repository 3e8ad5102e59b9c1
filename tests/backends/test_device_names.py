"""Device names: one device (``"sim:1"``) and lists of them (``"sim:0,1"``, ``"ascend:0-7"``)."""

from __future__ import annotations

import pytest

from aclpipe import Graph, InvalidArgumentError, Pipeline
from aclpipe.backends import MAX_LISTED_DEVICES, is_device_list, parse_device, parse_device_list
from aclpipe.runtime import device_count


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


@pytest.mark.parametrize("spec", ["sim:0-99999999999", "sim:0,2-99999999999", ["sim:0", "sim:99999999999"]])
def test_indices_beyond_the_backends_devices_are_refused_before_a_range_is_expanded(spec, monkeypatch):
    # Refused from the backend's device count, without building a list of 10^11 entries.
    monkeypatch.setenv("ACLPIPE_SIM_DEVICES", "4")
    with pytest.raises(InvalidArgumentError, match="sim:99999999999 does not exist: sim has 4 device"):
        parse_device_list(spec)


def test_a_pipeline_on_a_huge_range_is_refused_at_once():
    graph = Graph("g")
    graph.output("y", graph.relu(graph.input("x", shape=(2, 2))))
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        Pipeline(graph, device="sim:0-99999999999")


def test_a_backend_that_cannot_count_its_devices_bounds_how_many_a_list_names():
    # Without CANN here, "ascend" cannot say how many devices it has: lists stay bounded.
    if device_count("ascend"):
        pytest.skip("CANN is installed: ascend counts its devices")
    assert len(parse_device_list("ascend:0-7")) == 8
    with pytest.raises(ValueError, match=f"at most {MAX_LISTED_DEVICES} may be listed"):
        parse_device_list("ascend:0-99999999999")
