"""Untrusted ONNX models: every malformed model is a typed aclpipe error naming the file or the
node, sizes are checked before anything is allocated, and external data stays in the model's
folder.  Each test here is a defect found by loading hostile models (issue 15)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import onnx
import pytest
from model_kit import make_model, tensor
from onnx import TensorProto, helper, numpy_helper

from aclpipe.errors import GraphError
from aclpipe.onnx.importer import load_onnx
from aclpipe.onnx.validate import OnnxLimits


def _peak_bytes(load):
    """Run ``load()``; the peak of Python-traced allocations meanwhile (numpy's included)."""
    tracemalloc.start()
    try:
        try:
            load()
        except GraphError:
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _int64(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


# -- sizes are checked before allocating ------------------------------------------------------
def test_constant_of_shape_does_not_allocate_a_huge_host_array():
    model = make_model([helper.make_node("ConstantOfShape", ["shape"], ["y"])], [], [tensor("y", None)],
                       [_int64("shape", [20000, 20000])])
    assert _peak_bytes(lambda: load_onnx(model)) < 64 << 20  # np.full made 3.2 GB here


def test_folding_sizes_its_result_before_computing_it():
    model = make_model([helper.make_node("Expand", ["one", "shape"], ["y"])], [], [tensor("y", None)],
                       [_int64("shape", [20000, 20000]),
                        numpy_helper.from_array(np.ones(1, np.float32), "one")])
    assert _peak_bytes(lambda: load_onnx(model)) < 64 << 20  # the fold took 1.6 GB despite the 16 MB limit
    graph = load_onnx(model)
    assert [node.op for node in graph.nodes] == ["Expand"]  # computed on the device instead


def test_a_tensor_over_the_limit_is_refused_naming_the_value_its_size_and_the_limit():
    model = make_model([helper.make_node("ConstantOfShape", ["shape"], ["y"], name="huge")], [],
                       [tensor("y", None)], [_int64("shape", [1 << 20, 1 << 20])])
    with pytest.raises(GraphError, match=r"huge.*float32\[1048576, 1048576\], 4398046511104 bytes, more than the "
                                         r"limit of 4294967296 bytes \(OnnxLimits.tensor_bytes\)"):
        load_onnx(model)
    small = OnnxLimits(tensor_bytes=1 << 10)
    with pytest.raises(GraphError, match="limit of 1024 bytes"):
        load_onnx(make_model([helper.make_node("ConstantOfShape", ["shape"], ["y"])], [], [tensor("y", None)],
                             [_int64("shape", [64, 64])]), limits=small)


def test_constant_of_shape_refuses_negative_dims_and_multi_element_values():
    for shape, value in (([2, -3], None), ([2], numpy_helper.from_array(np.ones(2, np.float32)))):
        node = helper.make_node("ConstantOfShape", ["shape"], ["y"], name="cos")
        if value is not None:
            node.attribute.append(helper.make_attribute("value", value))
        with pytest.raises(GraphError, match="cos"):
            load_onnx(make_model([node], [], [tensor("y", None)], [_int64("shape", shape)]))


def test_node_count_and_nesting_limits():
    nodes = [helper.make_node("Relu", ["x" if i == 0 else f"h{i - 1}"], [f"h{i}"]) for i in range(50)]
    model = make_model(nodes, [tensor("x", [2])], [tensor("h49", None)])
    with pytest.raises(GraphError, match=r"more than 10 nodes \(OnnxLimits.model_nodes\)"):
        load_onnx(model, limits=OnnxLimits(model_nodes=10))
    with pytest.raises(GraphError, match=r"more than 10 nodes \(OnnxLimits.graph_nodes"):
        load_onnx(model, limits=OnnxLimits(graph_nodes=10))
    with pytest.raises(ValueError, match="positive int"):
        OnnxLimits(depth=0)


# -- malformed structure is a GraphError naming the file and the node ------------------------
def test_an_undefined_graph_output_is_a_graph_error_not_a_key_error(tmp_path):
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [2])], [tensor("missing", None)])
    path = tmp_path / "bad.onnx"
    onnx.save(model, str(path))
    with pytest.raises(GraphError, match=r"bad.onnx: .*output 'missing' is not produced"):
        load_onnx(path)


def test_a_data_less_initializer_is_a_graph_error_naming_it():
    empty = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[3])
    model = make_model([helper.make_node("Add", ["x", "w"], ["y"])], [tensor("x", [3])], [tensor("y", None)],
                       [empty])
    with pytest.raises(GraphError, match=r"initializer 'w' \(dims \[3\].*does not match"):
        load_onnx(model)


def test_two_nodes_writing_one_output_are_refused():
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["y"], name="second")]
    with pytest.raises(GraphError, match=r"second.*'y' is written twice"):
        load_onnx(make_model(nodes, [tensor("x", [3])], [tensor("y", None)]))


def test_a_node_output_may_not_shadow_an_outer_value():
    branch = helper.make_graph([helper.make_node("Neg", ["x"], ["x"])], "shadow", [], [tensor("x", None)])
    node = helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)
    with pytest.raises(GraphError, match="shadows a value of an enclosing graph"):
        load_onnx(make_model([node], [tensor("x", [3]), tensor("c", [], TensorProto.BOOL)], [tensor("y", None)]))


def test_an_attribute_of_the_wrong_type_is_refused():
    node = helper.make_node("Softmax", ["x"], ["y"], name="soft")
    node.attribute.append(helper.make_attribute("axis", 0.5))
    with pytest.raises(GraphError, match=r"soft.*attribute 'axis' is of type FLOAT, Softmax takes INT"):
        load_onnx(make_model([node], [tensor("x", [3, 4])], [tensor("y", None)]))


def test_an_attribute_the_schema_does_not_define_is_refused():
    node = helper.make_node("Relu", ["x"], ["y"], name="r", alpha=0.1)
    with pytest.raises(GraphError, match=r"'r' has attribute 'alpha', which Relu .* does not define"):
        load_onnx(make_model([node], [tensor("x", [3])], [tensor("y", None)]))


def test_a_node_with_too_many_inputs_is_refused():
    node = helper.make_node("Relu", ["x", "x"], ["y"], name="r")
    with pytest.raises(GraphError, match=r"'r' has 2 inputs; Relu .* takes 1"):
        load_onnx(make_model([node], [tensor("x", [3])], [tensor("y", None)]))


def test_a_node_reading_an_undefined_name_is_refused_at_load_even_with_dynamic_dims():
    node = helper.make_node("Add", ["x", "nowhere"], ["y"], name="add")
    with pytest.raises(GraphError, match=r"'add' reads 'nowhere', which no earlier node"):
        load_onnx(make_model([node], [tensor("x", ["n"])], [tensor("y", None)]))


def test_subgraphs_nested_beyond_the_limit_are_refused():
    inner = helper.make_graph([helper.make_node("Identity", ["x"], ["o0"])], "b0", [], [tensor("o0", None)])
    for depth in range(1, 6):
        other = helper.make_graph([helper.make_node("Identity", ["x"], [f"e{depth}"])], f"e{depth}", [],
                                  [tensor(f"e{depth}", None)])
        node = helper.make_node("If", ["c"], [f"o{depth}"], then_branch=inner, else_branch=other)
        inner = helper.make_graph([node], f"b{depth}", [], [tensor(f"o{depth}", None)])
    model = make_model(list(inner.node), [tensor("x", [3]), tensor("c", [], TensorProto.BOOL)],
                       [tensor("o5", None)])
    with pytest.raises(GraphError, match=r"nested 4 deep, more than the limit of 3"):
        load_onnx(model, limits=OnnxLimits(depth=3))


@pytest.mark.parametrize("data", [b"", b"\x08\x07\x12garbage\xff\xff", b"\xff" * 64])
def test_bytes_that_are_not_a_model_are_a_graph_error(data):
    with pytest.raises(GraphError, match="not a readable ONNX model|has no outputs"):
        load_onnx(data)


def test_a_truncated_file_is_a_graph_error_naming_it(tmp_path):
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [3])], [tensor("y", None)])
    path = tmp_path / "cut.onnx"
    path.write_bytes(model.SerializeToString()[:-7])
    with pytest.raises(GraphError, match=r"cut.onnx: not a readable ONNX model"):
        load_onnx(path)


def test_protobuf_nesting_beyond_its_limit_is_a_graph_error():
    nested = b"\x0a\x00"
    for _ in range(200):  # ModelProto.graph(7) -> GraphProto.node(1) -> NodeProto.attribute(5) -> ...g(6)
        nested = b"\x32" + _varint(len(nested)) + nested  # AttributeProto.g
        nested = b"\x2a" + _varint(len(nested)) + nested  # NodeProto.attribute
        nested = b"\x0a" + _varint(len(nested)) + nested  # GraphProto.node
    data = b"\x3a" + _varint(len(nested)) + nested  # ModelProto.graph
    with pytest.raises(GraphError, match="not a readable ONNX model|nested too deeply"):
        load_onnx(data)


def _varint(value):
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


# -- external data stays in the model's folder ------------------------------------------------
def _external_model(location):
    weight = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4])
    weight.data_location = TensorProto.EXTERNAL
    entry = weight.external_data.add()
    entry.key, entry.value = "location", location
    return make_model([helper.make_node("Add", ["x", "w"], ["y"])], [tensor("x", [4])], [tensor("y", None)],
                      [weight])


@pytest.mark.parametrize("location", ["../secret.bin", "sub/../../secret.bin", "link.bin", "{absolute}"])
def test_external_data_outside_the_models_folder_is_refused(tmp_path, location):
    folder = tmp_path / "model"
    folder.mkdir()
    secret = tmp_path / "secret.bin"
    np.arange(4, dtype=np.float32).tofile(secret)
    (folder / "link.bin").symlink_to(secret)
    path = folder / "m.onnx"
    path.write_bytes(_external_model(location.format(absolute=secret)).SerializeToString())
    with pytest.raises(GraphError, match=r"m.onnx: not a readable ONNX model"):
        load_onnx(path)


def test_external_data_inside_the_folder_loads(tmp_path):
    np.arange(4, dtype=np.float32).tofile(tmp_path / "weights.bin")
    path = tmp_path / "m.onnx"
    path.write_bytes(_external_model("weights.bin").SerializeToString())
    np.testing.assert_array_equal(load_onnx(path).constants["w"], np.arange(4, dtype=np.float32))


def test_a_model_given_as_bytes_never_reads_external_data_from_the_working_directory(tmp_path, monkeypatch):
    np.arange(4, dtype=np.float32).tofile(tmp_path / "weights.bin")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(GraphError, match=r"initializer 'w' keeps its data in an external file that was not loaded"):
        load_onnx(_external_model("weights.bin").SerializeToString())  # it read ./weights.bin before


# -- found by the fuzz tests (test_fuzz_loading.py) --------------------------------------------
def test_a_missing_required_attribute_is_refused():
    node = helper.make_node("Loop", ["trips", "", "x"], ["y"], name="loop")  # no body
    model = make_model([node], [tensor("x", [3]), tensor("trips", [], TensorProto.INT64)], [tensor("y", None)])
    with pytest.raises(GraphError, match=r"'loop' lacks the required attribute\(s\) \['body'\] of Loop"):
        load_onnx(model)


def test_a_flag_attribute_outside_0_and_1_is_refused():
    node = helper.make_node("ReduceSum", ["x"], ["y"], name="sum", keepdims=-1)
    with pytest.raises(GraphError, match=r"'sum': attribute 'keepdims' is a 0/1 flag, it is -1"):
        load_onnx(make_model([node], [tensor("x", [2, 3])], [tensor("y", None)]))


def test_an_attribute_set_twice_is_refused():
    node = helper.make_node("Softmax", ["x"], ["y"], name="soft", axis=0)
    node.attribute.append(helper.make_attribute("axis", 1))
    with pytest.raises(GraphError, match="sets attribute 'axis' twice"):
        load_onnx(make_model([node], [tensor("x", [2, 3])], [tensor("y", None)]))


def test_names_that_are_not_utf8_are_a_graph_error():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [3])], [tensor("y", None)])
    data = model.SerializeToString().replace(b"Relu", b"R\xfflu")  # proto2 strings are not validated
    with pytest.raises(GraphError, match="not valid UTF-8"):
        load_onnx(data)


def test_a_view_without_its_input_is_a_graph_error_naming_the_node():
    node = helper.make_node("Reshape", ["", "shape"], ["y"], name="view")
    model = make_model([node], [], [tensor("y", None)], [_int64("shape", [2])])
    with pytest.raises(GraphError, match="view"):
        load_onnx(model)
