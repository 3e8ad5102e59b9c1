"""Resize on the simulator against onnxruntime's ONNX Resize (onnx's reference evaluator when
onnxruntime is not installed; the reference differs from onnxruntime by one pixel where a
source coordinate lands within rounding error of an integer, e.g. half_pixel_symmetric)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import OpCall, prepare, random_array, run_op
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from aclpipe.errors import InvalidArgumentError
from aclpipe.tensor import TensorDesc

SHAPE = (1, 2, 5, 7)


def _reference(x, scales=None, sizes=None, roi=None, **attrs):
    """ONNX Resize-19 on ``x``, run by onnxruntime (or onnx.reference)."""
    names = ["x", "roi", "scales", "sizes"]
    given = [x, np.array(roi if roi is not None else [], np.float32),
             np.array(scales if scales is not None else [], np.float32),
             np.array(sizes if sizes is not None else [], np.int64)]
    initializers = [numpy_helper.from_array(value, name) for name, value in zip(names[1:], given[1:])]
    inputs = ["x", "roi", "scales" if scales is not None else "", "sizes" if sizes is not None else ""]
    node = helper.make_node("Resize", inputs, ["y"], **attrs)
    graph = helper.make_graph([node], "resize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    # Given fractional scales, align_corners divides by scale * length - 1 in the ONNX reference
    # (and the conformance data) but by the integer size - 1 in onnxruntime: the op follows the
    # reference there.
    fractional = scales is not None and any(s * n != int(s * n) for s, n in zip(scales, x.shape))
    try:
        import onnxruntime
    except ImportError:
        onnxruntime = None
    if onnxruntime is None or (fractional and attrs.get("coordinate_transformation_mode") == "align_corners"):
        return ReferenceEvaluator(model).run(None, {"x": x})[0]
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _attrs(mode, transform, nearest="round_prefer_floor", **extra):
    onnx_attrs = {"mode": mode, "coordinate_transformation_mode": transform, "nearest_mode": nearest}
    ours = {"mode": mode, "coordinateTransformationMode": transform, "nearestMode": nearest}
    for key, (onnx_key, value) in extra.items():
        onnx_attrs[onnx_key] = value
        ours[key] = bool(value) if isinstance(value, int) and onnx_key != "cubic_coeff_a" else value
    return onnx_attrs, ours


TRANSFORMS = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric"]


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("nearest", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
@pytest.mark.parametrize("scales", [(1, 1, 2.5, 1.5), (1, 1, 0.6, 0.5)])
def test_nearest_matches_the_onnx_reference(device, transform, nearest, scales):
    x = random_array(np.random.default_rng(14), SHAPE, "float32")
    onnx_attrs, ours = _attrs("nearest", transform, nearest)
    sizes = [math.floor(n * s) for n, s in zip(SHAPE, scales)]
    (out,) = run_op(device, "Resize", [x], {**ours, "sizes": sizes, "scales": list(scales)}, layout="transposed")
    np.testing.assert_array_equal(out, _reference(x, scales=scales, **onnx_attrs))


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("sizes", [(1, 2, 9, 12), (1, 2, 3, 4)])
def test_linear_and_cubic_match_the_onnx_reference(device, mode, transform, sizes):
    x = random_array(np.random.default_rng(15), SHAPE, "float32")
    onnx_attrs, ours = _attrs(mode, transform)
    (out,) = run_op(device, "Resize", [x], {**ours, "sizes": list(sizes)}, layout="strided")
    np.testing.assert_allclose(out, _reference(x, sizes=sizes, **onnx_attrs), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode,extra", [
    ("linear", {"antialias": ("antialias", 1)}),
    ("cubic", {"antialias": ("antialias", 1)}),
    ("linear", {"antialias": ("antialias", 1), "excludeOutside": ("exclude_outside", 1)}),
    ("cubic", {"excludeOutside": ("exclude_outside", 1), "cubicCoeffA": ("cubic_coeff_a", -0.5)}),
])
def test_antialias_and_exclude_outside(device, mode, extra):
    x = random_array(np.random.default_rng(16), SHAPE, "float32")
    onnx_attrs, ours = _attrs(mode, "half_pixel", **extra)
    sizes = (1, 2, 3, 3)
    (out,) = run_op(device, "Resize", [x], {**ours, "sizes": list(sizes)})
    np.testing.assert_allclose(out, _reference(x, sizes=sizes, **onnx_attrs), rtol=1e-5, atol=1e-5)


def test_tf_crop_and_resize_uses_the_roi_and_extrapolates(device):
    x = random_array(np.random.default_rng(17), SHAPE, "float32")
    roi = [0, 0, -0.2, 0.1, 1, 1, 0.8, 1.3]
    onnx_attrs, ours = _attrs("linear", "tf_crop_and_resize", extrapolationValue=("extrapolation_value", 9.0))
    sizes = (1, 2, 4, 6)
    (out,) = run_op(device, "Resize", [x], {**ours, "sizes": list(sizes), "roi": roi})
    np.testing.assert_allclose(out, _reference(x, sizes=sizes, roi=roi, **onnx_attrs), rtol=1e-5, atol=1e-5)


def test_nearest_copies_any_dtype_exactly(device):
    x = random_array(np.random.default_rng(18), (2, 3, 4), "int8", low=-100, high=100)
    (out,) = run_op(device, "Resize", [x], {"sizes": [2, 6, 8], "mode": "nearest",
                                             "coordinateTransformationMode": "asymmetric", "nearestMode": "floor"})
    np.testing.assert_array_equal(out, x.repeat(2, axis=1).repeat(2, axis=2))


def test_intermediate_dims_live_in_the_workspace(device):
    x = np.zeros(SHAPE, np.float32)
    one_dim = OpCall(device, "Resize", [x], {"sizes": [1, 2, 10, 7], "mode": "linear"})
    two_dims = OpCall(device, "Resize", [x], {"sizes": [1, 2, 10, 14], "mode": "linear"})
    assert one_dim.workspace_size == 0
    assert two_dims.workspace_size >= 2 * (1 * 2 * 10 * 7 * 4)
    stream = device.create_stream()
    with pytest.raises(InvalidArgumentError):
        two_dims.launch(stream, None, 0)
    stream.sync()


@pytest.mark.parametrize("dtype,attrs,needle", [
    ("float32", {}, "sizes"),
    ("float32", {"sizes": [1, 2, 3]}, "sizes"),
    ("int32", {"sizes": [2, 4], "mode": "linear"}, "dtype"),
    ("float32", {"sizes": [2, 4], "mode": "area"}, "mode"),
    ("float32", {"sizes": [2, 4], "scales": [1.0, 0.0]}, "scales"),
    ("float32", {"sizes": [2, 4], "coordinateTransformationMode": "tf_crop_and_resize"}, "roi"),
])
def test_phase_one_refuses_bad_arguments(dtype, attrs, needle):
    with pytest.raises(InvalidArgumentError) as caught:
        prepare("Resize", [TensorDesc.contiguous((2, 3), dtype)], attrs)
    assert "aclnnResize" in str(caught.value) and needle in str(caught.value)
