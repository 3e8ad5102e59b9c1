"""Binding graphs to concrete shapes: descriptors, named dims, views and inserted copies."""

from __future__ import annotations

from types import MappingProxyType

import numpy as np
import pytest

from aclpipe.errors import GraphError
from aclpipe.graph import BoundGraph, BoundNode, BoundValue, Graph
from aclpipe.plan import make_plan
from aclpipe.tensor import TensorDesc


def two_inputs() -> Graph:
    g = Graph("pair")
    a = g.input("a", shape=("batch", 8))
    b = g.input("b", shape=("batch", 8))
    g.output("sum", g.add(a, b))
    return g


def test_bind_gives_every_value_a_descriptor() -> None:
    g = two_inputs()
    bound = g.bind(a=(3, 8), b=np.zeros((3, 8)))
    assert bound.values["add_0"].desc == TensorDesc.contiguous((3, 8), "float32")
    assert bound.values["a"].kind == "input" and bound.values["add_0"].kind == "node"
    assert bound.dims == {"batch": 3} and bound.input_shapes == {"a": (3, 8), "b": (3, 8)}
    assert bound.outputs == {"sum": "add_0"}


def test_bind_is_cached_per_signature_and_reset_by_edits() -> None:
    g = two_inputs()
    first = g.bind(a=(3, 8), b=(3, 8))
    assert g.bind(a=(3, 8), b=(3, 8)) is first
    assert g.bind(a=(5, 8), b=(5, 8)) is not first
    g.output("again", g.value("a"))
    assert g.bind(a=(3, 8), b=(3, 8)) is not first


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        ({"a": (3, 8), "b": (4, 8)},
         r"dim 'batch' must be the same size everywhere: a dim 0 is 3, input 'b' dim 0 is 4"),
        ({"a": (3, 9), "b": (3, 8)}, r"input 'a': dim 1 is fixed at 8 .*bound to 9"),
        ({"a": (3,), "b": (3, 8)}, r"input 'a': declared with 2 dims \['batch', 8\], bound to 1 dims"),
        ({"a": (3, 8)}, r"bind needs a shape for input\(s\) b"),
        ({"a": (3, 8), "b": (3, 8), "c": (1,)}, r"unknown input\(s\) c; its inputs are a, b"),
        ({"a": (3, -8), "b": (3, 8)}, r"sizes >= 0"),
        ({"a": "wide", "b": (3, 8)}, r"input 'a': expected a shape \(tuple of ints\) or an array, got 'wide'"),
    ],
)
def test_bind_checks_input_shapes(shapes, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(GraphError, match=message):
        two_inputs().bind(**shapes)


def test_errors_postponed_by_dynamic_dims_name_the_node_at_bind() -> None:
    g = Graph()
    x = g.input("x", shape=(None, 8))
    y = g.input("y", shape=(None, 8))
    g.output("out", g.add(x, y, name="mix"))
    assert g.bind(x=(4, 8), y=(1, 8)).values["mix"].desc.shape == (4, 8)
    with pytest.raises(GraphError, match=r"node 'mix' \(Add\): aclnnAdd: .*broadcast"):
        g.bind(x=(4, 8), y=(3, 8))


def test_graph_without_outputs() -> None:
    g = Graph("empty")
    g.relu(g.input("x", shape=(2,)))
    with pytest.raises(GraphError, match="graph 'empty' has no outputs"):
        g.bind(x=(2,))


def test_views_alias_their_base_storage() -> None:
    g = Graph()
    x = g.input("x", shape=(4, 6))
    t = g.transpose(g.relu(x), dim0=0, dim1=1)
    flat = g.flatten(g.unsqueeze(t, dim=0), startDim=0, endDim=0)
    g.output("y", g.neg(flat))
    bound = g.bind(x=(4, 6))
    view = bound.values[t.name]
    assert view.kind == "view" and view.base == "relu_0" and view.desc.strides == (1, 6)
    assert bound.values[flat.name].base == "relu_0"  # a view of a view sits on the storage
    assert [n.name for n in bound.nodes if n.is_view] == ["transpose_0", "unsqueeze_0", "flatten_0"]


def test_reshape_of_a_non_viewable_input_copies_first() -> None:
    g = Graph()
    x = g.input("x", shape=(4, 6))
    t = g.transpose(x, dim0=0, dim1=1)
    r = g.reshape(t, shape=[24], name="flat")
    g.output("y", g.neg(r))
    bound = g.bind(x=(4, 6))
    copy = next(n for n in bound.nodes if n.op == "InplaceCopy")
    assert copy.name == "flat.copy" and copy.inputs == (t.name,) and copy.outputs == ("flat.contiguous",)
    assert bound.values["flat.contiguous"].desc == TensorDesc.contiguous((6, 4), "float32")
    assert bound.values["flat"].base == "flat.contiguous" and bound.values["flat"].kind == "view"
    reshape = next(n for n in bound.nodes if n.name == "flat")
    assert reshape.inputs == ("flat.contiguous",) and reshape.is_view


def test_a_non_contiguous_output_is_copied_for_the_transfer() -> None:
    g = Graph()
    x = g.input("x", shape=(4, 6))
    g.output("y", g.transpose(g.relu(x), dim0=0, dim1=1))
    bound = g.bind(x=(4, 6))
    value = bound.outputs["y"]
    assert bound.values[value].kind == "node" and bound.values[value].desc.is_contiguous
    assert any(n.op == "InplaceCopy" and n.outputs == (value,) for n in bound.nodes)


def test_bound_graph_and_plan_agree_on_views() -> None:
    g = Graph()
    x = g.input("x", shape=("batch", 6))
    w = g.constant("w", np.ones((6, 6), np.float32))
    h = g.reshape(g.matmul(x, w), shape=[-1])
    g.output("y", g.relu(h))
    plan = make_plan(g.bind(x=(2, 6)), streams=2)
    assert plan.values["reshape_0"].kind == "view" and plan.values["reshape_0"].base == "matmul_0"
    assert plan.values["w"].kind == "constant" and plan.values["w"].arena_offset is None
    assert [n.op for n in plan.nodes] == ["H2D", "Matmul", "Relu", "D2H"]
    assert "reshape_0" in plan.nodes[2].inputs


def test_hand_made_bound_graphs_are_validated() -> None:
    desc = TensorDesc.contiguous((4,), "float32")
    values = MappingProxyType({"x": BoundValue("x", desc, "input"), "y": BoundValue("y", desc, "node", "n")})
    with pytest.raises(GraphError, match="reads 'z' before any node writes it"):
        BoundGraph("bad", (BoundNode("n", "Relu", ("z",), ("y",)),), values, ("x",), {"out": "y"})
    with pytest.raises(GraphError, match="output 'out' is 'q', which nothing writes"):
        BoundGraph("bad", (BoundNode("n", "Relu", ("x",), ("y",)),), values, ("x",), {"out": "q"})
