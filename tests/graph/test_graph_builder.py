"""Building graphs: builder methods from the catalog, eager descriptors, errors naming nodes."""

from __future__ import annotations

import numpy as np
import pytest

import aclpipe
from aclpipe.errors import GraphError
from aclpipe.graph import Graph, Value
from aclpipe.tensor import TensorDesc


def mlp() -> tuple[Graph, Value]:
    g = Graph("mlp")
    x = g.input("x", shape=("batch", 8), dtype="float32")
    w = g.constant("w1", np.ones((8, 4), np.float32))
    y = g.relu(g.matmul(x, w))
    g.output("y", y)
    return g, y


def test_builder_methods_make_nodes_named_after_their_op() -> None:
    g, y = mlp()
    assert [(n.name, n.op, n.inputs, n.outputs) for n in g.nodes] == [
        ("matmul_0", "Matmul", ("x", "w1"), ("matmul_0",)),
        ("relu_0", "Relu", ("matmul_0",), ("relu_0",)),
    ]
    assert y.name == "relu_0" and y.producer == "relu_0" and y.kind == "node"
    assert g.outputs == {"y": "relu_0"}
    assert "layer_norm" in dir(g) and "matmul" in dir(g)
    assert g.value("w1").kind == "constant"


def test_dynamic_dims_are_followed_symbolically() -> None:
    g, y = mlp()
    assert y.desc is None
    assert y.shape == ("batch", 4) and y.dtype == aclpipe.DType.float32
    anonymous = g.input("z", shape=(None, 8))
    assert anonymous.shape == ("z.0", 8)
    assert repr(y) == "Value('relu_0', float32[batch, 4])"


def test_concrete_inputs_give_eager_descriptors() -> None:
    g = Graph()
    x = g.input("x", shape=(2, 3), dtype="float16")
    y = g.add(x, x, alpha=2.0)
    assert y.desc == TensorDesc.contiguous((2, 3), "float16")
    assert g.nodes[0].attrs == {"alpha": 2.0}


def test_generic_op_and_custom_names() -> None:
    g = Graph()
    x = g.input("x", shape=(4,))
    y = g.op("Relu", x, name="act")
    assert y.name == "act" and g.nodes[0].name == "act"
    assert g.op("Relu", y).name == "relu_0"


def test_multi_output_ops_return_tuples() -> None:
    g = Graph()
    x = g.input("x", shape=(4, 6))
    parts = g.split(x, splitSections=[2, 4], dim=1)
    assert isinstance(parts, tuple) and [p.name for p in parts] == ["split_0:0", "split_0:1"]
    assert [p.shape for p in parts] == [(4, 2), (4, 4)]
    one = g.split(x, splitSize=6, dim=1)
    assert isinstance(one, tuple) and len(one) == 1
    left, right = g.split(x, splitSections=[3, 3], dim=1, outputs=["left", "right"])
    assert (left.name, right.name) == ("left", "right")
    joined = g.cat(left, right, dim=1)
    assert joined.shape == (4, 6)
    assert g.cat([left, right], dim=0).shape == (8, 3)


def test_optional_outputs_are_produced_only_when_named() -> None:
    g = Graph()
    x = g.input("x", shape=("batch", 16))
    weight = g.constant("w", np.ones(16, np.float32))
    y = g.layer_norm(x, weight, normalizedShape=[16])
    assert isinstance(y, Value) and g.nodes[-1].outputs == ("layer_norm_0", None, None)
    _y2, mean, _rstd = g.layer_norm(x, biasOptional=weight, normalizedShape=[16], outputs=["y2", "mean", "rstd"])
    assert g.nodes[-1].inputs == ("x", None, "w")
    assert mean.dtype == aclpipe.DType.float32 and mean.shape == ("batch", 1)


def test_refused_call_leaves_no_gap_in_names() -> None:
    g = Graph()
    x = g.input("x", shape=(4,))
    with pytest.raises(GraphError):
        g.relu(x, bogus=1)
    assert g.relu(x).name == "relu_0"


def test_shape_mismatch_names_the_node_at_the_builder_call() -> None:
    g = Graph()
    a = g.input("a", shape=(4, 8))
    b = g.input("b", shape=(3, 5))
    with pytest.raises(GraphError, match=r"node 'fc' \(Matmul\): aclnnMatmul: .*expected"):
        g.matmul(a, b, name="fc")
    c = g.input("c", shape=(8, 5), dtype="float16")
    with pytest.raises(GraphError, match=r"node 'matmul_0' \(Matmul\).*dtype"):
        g.matmul(a, c)
    assert g.nodes == ()


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda g, x: g.op("Matmull", x, x), r"unknown op 'Matmull'.*did you mean Matmul"),
        (lambda g, x: g.relu(x, alpha=1), r"node 'relu_0' \(Relu\): unknown attribute\(s\) alpha"),
        (lambda g, x: g.relu(x, x), r"takes 1 inputs \(self\), got 2"),
        (lambda g, x: g.relu(np.zeros(3)), r"is ndarray, not a Value \(wrap arrays with g.constant"),
        (lambda g, x: g.relu(Graph("other").input("y", (4,))), r"dangling value 'y': it belongs to graph 'other'"),
        (lambda g, x: g.input("x", (4,)), r"duplicate name 'x'.*already an input"),
        (lambda g, x: g.relu(x, name="x"), r"duplicate name 'x'"),
        (lambda g, x: g.constant("c", np.zeros(3)), r"constant 'c': float64 is not an NPU dtype: cast"),
        (lambda g, x: g.constant("c", np.zeros(3, np.complex64)), r"constant 'c'"),
        (lambda g, x: g.output("y", None), r"output 'y' is given NoneType"),
        (lambda g, x: g.input("z", (4, -1)), r"input 'z': dim 1 is -1"),
        (lambda g, x: g.input("z", (4,), dtype="float128"), r"input 'z': unknown dtype"),
        (lambda g, x: g.add(x, x, add_0=1), r"unknown attribute"),
        (lambda g, x: g.split(x, splitSize=2, outputs=["a", "b", "c"]), r"gives 2 outputs"),
        (lambda g, x: g.split(x, splitSections=[2, 2], outputs=["a", "a"]), r"duplicate output names"),
        (lambda g, x: g.split(g.input("d", (None,)), splitSize=2), r"number of outputs depends on shapes"),
        (lambda g, x: g.value("nothing"), r"has no value 'nothing'"),
    ],
)
def test_builder_errors(build, message) -> None:  # type: ignore[no-untyped-def]
    g = Graph("g")
    x = g.input("x", shape=(4,))
    with pytest.raises(GraphError, match=message):
        build(g, x)


def test_unknown_builder_is_an_attribute_error_with_hints() -> None:
    g = Graph()
    with pytest.raises(AttributeError, match="did you mean matmul"):
        g.matmull  # noqa: B018
    assert not hasattr(g, "_private_thing")


def test_duplicate_output_names() -> None:
    g, y = mlp()
    with pytest.raises(GraphError, match="already has an output 'y'"):
        g.output("y", y)
