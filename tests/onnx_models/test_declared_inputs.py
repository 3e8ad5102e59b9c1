"""How load_onnx reads declared input dims: ``dim_value: -1`` and the other "unknown" forms
exporters write are dynamic dims (with a warning for the invalid negative ones)."""

from __future__ import annotations

import anyio
import numpy as np
import pytest
from model_kit import make_model, run_pipeline, tensor
from onnx import helper

from aclpipe.onnx.importer import DynamicDimWarning, load_onnx


def _relu(dims):
    return make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", dims)], [tensor("y", None)])


def test_a_negative_dim_value_is_a_dynamic_dim_with_a_warning_naming_the_input():
    with pytest.warns(DynamicDimWarning, match=r"input 'x' declares dim 0 as -1"):
        graph = load_onnx(_relu([-1, 3]))
    assert graph.inputs["x"].shape == (None, 3)
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    (result,) = anyio.run(run_pipeline, graph, [{"x": x}])
    np.testing.assert_array_equal(result["y"], np.maximum(x, 0))


def test_every_negative_dim_is_dynamic_and_each_one_warns():
    with pytest.warns(DynamicDimWarning) as caught:
        graph = load_onnx(_relu([-1, -7, 2]))
    assert graph.inputs["x"].shape == (None, None, 2)
    assert len(caught) == 2 and "dim 1 as -7" in str(caught[1].message)


@pytest.mark.parametrize("param", ["?", "-1", "unk", "None"])
def test_unknown_dim_params_are_unnamed_dims_so_two_of_them_need_not_match(param):
    model = make_model([helper.make_node("Add", ["a", "b"], ["y"])],
                       [tensor("a", [param, 1]), tensor("b", [1, param])], [tensor("y", None)])
    graph = load_onnx(model)
    assert graph.inputs["a"].shape == (None, 1)
    a, b = np.ones((2, 1), np.float32), np.ones((1, 5), np.float32)
    (result,) = anyio.run(run_pipeline, graph, [{"a": a, "b": b}])
    assert result["y"].shape == (2, 5)


def test_named_dims_stay_named():
    graph = load_onnx(_relu(["batch", 3]))
    assert graph.inputs["x"].shape == ("batch", 3)
