"""Signatures: what a prepared program is specific to (input shapes, and host values' contents),
compared by value, described for messages, and carried by a bound graph into its plan."""

from __future__ import annotations

import numpy as np
import pytest

import aclpipe
from aclpipe.errors import GraphError
from aclpipe.graph import HostValue, Signature
from aclpipe.plan import make_plan


def test_signatures_compare_by_shapes_and_host_contents():
    first = Signature.of({"x": (2, 3), "shape": (2,)}, {"shape": np.array([3, 2])})
    same = Signature.of({"shape": (2,), "x": (2, 3)}, {"shape": np.array([3, 2])})
    other = Signature.of({"x": (2, 3), "shape": (2,)}, {"shape": np.array([6, 1])})
    retyped = Signature.of({"x": (2, 3), "shape": (2,)}, {"shape": np.array([3, 2], np.int32)})
    assert first == same and hash(first) == hash(same)
    assert len({first, other, retyped}) == 3
    assert first.device_shapes == {"x": (2, 3)}
    assert first.bind_arguments()["x"] == (2, 3)
    np.testing.assert_array_equal(first.bind_arguments()["shape"], [3, 2])
    assert first.describe() == "shape=[3, 2] (host value), x=(2, 3)"


def test_a_host_value_is_a_read_only_copy():
    source = np.array([1, 2])
    value = HostValue.of(source)
    source[0] = 9
    assert value.array.tolist() == [1, 2] and not value.array.flags.writeable
    assert str(HostValue.of(np.array(7))) == "7"


def test_a_built_graph_has_no_host_inputs_and_a_shape_signature():
    g = aclpipe.Graph("g")
    g.output("y", g.relu(g.input("x", ("batch", 3))))
    assert g.host_inputs == frozenset()
    assert g.signature(x=np.zeros((4, 3), np.float32)) == Signature.of({"x": (4, 3)})
    with pytest.raises(GraphError, match="unknown input"):
        g.signature(x=(4, 3), z=(1,))


def test_host_values_reach_the_bound_graph_and_the_plan_summary():
    g = aclpipe.Graph("g")
    g.output("y", g.relu(g.input("x", (3,))))
    g.host_values = {"k": np.array([2, 1])}  # as an imported model's specialization sets it
    plan = make_plan(g.bind(x=(3,)))
    assert set(plan.host_values) == {"k"}
    assert "host values (specialized for these contents; not copied to the device): k=[2, 1]" in plan.summary()
