"""Reshape, Squeeze, Unsqueeze, Flatten, Transpose: descriptors over the same storage.

A view is checked by reading it on the device: a Cast to its own dtype copies the viewed
elements into a contiguous buffer, which must equal numpy's view of the same array.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import desc, random

from aclpipe.dtypes import DType
from aclpipe.errors import InvalidArgumentError
from aclpipe.ops import get_op
from aclpipe.ops.views import view_strides
from aclpipe.tensor import TensorDesc

ALL_DTYPES = [d.name for d in DType]


def read_view(device, view: TensorDesc) -> np.ndarray:
    """The elements a descriptor shows, copied out through the device."""
    out = device.alloc(max(view.nbytes, 1))
    target = TensorDesc.contiguous(view.shape, view.dtype, out.address)
    executor = device.backend.op_prepare("Cast", [view], [target], {"dtype": view.dtype})
    stream = device.create_stream()
    device.backend.op_launch(executor, 0, 0, stream.handle)
    stream.sync()
    return device.download(out, view.dtype, view.shape)


def uploaded(device, array: np.ndarray):
    """(descriptor, buffer): keep the buffer referenced while the descriptor is used."""
    buffer = device.upload(array)
    return TensorDesc.contiguous(array.shape, array.dtype, buffer.address), buffer


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_views_share_storage_and_show_numpys_elements(device, dtype):
    x = random((2, 3, 4), dtype, 1)
    base, _storage = uploaded(device, x)
    cases = [
        ("Transpose", {"dim0": 0, "dim1": -1}, np.swapaxes(x, 0, 2)),
        ("Reshape", {"shape": [4, -1]}, x.reshape(4, 6)),
        ("Flatten", {"startDim": 1}, x.reshape(2, 12)),
        ("Unsqueeze", {"dim": -1}, x[..., None]),
        ("Squeeze", {"dim": None}, x),
    ]
    for op, attrs, expected in cases:
        view = get_op(op).view(base, attrs)
        assert view.address == base.address and view.shape == expected.shape
        np.testing.assert_array_equal(read_view(device, view), expected)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8", "bool"])
def test_views_compose_over_strided_inputs(device, dtype):
    x = random((4, 1, 6), dtype, 2)
    base, _storage = uploaded(device, x)
    transposed = get_op("Transpose").view(base, {"dim0": 0, "dim1": 2})  # [6, 1, 4]
    squeezed = get_op("Squeeze").view(transposed, {"dim": [1, 0]})  # dim 0 has size 6: kept
    assert squeezed.shape == (6, 4) and not squeezed.is_contiguous
    unsqueezed = get_op("Unsqueeze").view(squeezed, {"dim": 1})
    np.testing.assert_array_equal(read_view(device, unsqueezed), x.transpose(2, 1, 0)[:, 0][:, None, :])
    split = get_op("Reshape").view(squeezed, {"shape": [3, 2, 2, 2]})  # splits dims: still a view
    np.testing.assert_array_equal(read_view(device, split), x[:, 0].T.reshape(3, 2, 2, 2))
    with pytest.raises(InvalidArgumentError) as caught:
        get_op("Flatten").view(squeezed, {})  # merging transposed dims needs a copy
    assert caught.value.code == 161002 and "contiguous copy" in str(caught.value)


def test_view_keeps_the_storage_offset(device):
    x = random((5, 4), "float32", 3)
    base, _storage = uploaded(device, x)
    row_block = TensorDesc((3, 4), DType.float32, (4, 1), 8, address=base.address)
    view = get_op("Reshape").view(row_block, {"shape": [12]})
    assert view.offset == 8
    np.testing.assert_array_equal(read_view(device, view), x[2:].reshape(12))


@pytest.mark.parametrize("shape, strides, new_shape", [
    ((4, 6), (6, 1), (2, 2, 3, 2)),
    ((6, 4), (1, 6), (24,)),
    ((6, 4), (1, 6), (3, 2, 4)),
    ((2, 3, 4), (24, 4, 1), (2, 12)),
    ((2, 3, 4), (24, 4, 1), (6, 4)),
    ((3, 1, 4), (4, 100, 1), (12,)),
    ((), (), (1, 1)),
    ((1, 1), (7, 3), ()),
])
def test_view_strides_agree_with_numpy(shape, strides, new_shape):
    itemsize = 4
    storage = np.arange(200, dtype=np.float32)
    array = np.lib.stride_tricks.as_strided(storage, shape, tuple(s * itemsize for s in strides))
    ours = view_strides(shape, strides, new_shape)
    try:
        theirs = array.view()
        theirs.shape = new_shape  # numpy refuses when the reshape would need a copy
    except AttributeError:
        assert ours is None
        return
    assert ours is not None
    ours_view = np.lib.stride_tricks.as_strided(storage, new_shape, tuple(s * itemsize for s in ours))
    np.testing.assert_array_equal(ours_view, theirs)


def test_infer_gives_contiguous_outputs_and_prepare_refuses_to_launch():
    strided = desc((3, 4), strides=(1, 3))
    (out,) = get_op("Reshape").infer([strided], {"shape": [-1]})
    assert out.shape == (12,) and out.is_contiguous and out.address == 0
    assert get_op("Transpose").is_view
    with pytest.raises(InvalidArgumentError) as caught:
        get_op("Transpose").prepare([strided], [desc((4, 3))], {"dim0": 0, "dim1": 1})
    assert caught.value.code == 161002 and "no launch" in str(caught.value)


@pytest.mark.parametrize("op, x, attrs, code, needle", [
    ("Reshape", None, {"shape": [2]}, 161001, "self"),
    ("Reshape", desc((2, 3)), {"shape": [4, -1]}, 161002, "shape"),
    ("Reshape", desc((2, 3)), {"shape": [-1, -1]}, 161002, "shape"),
    ("Reshape", desc((2, 3)), {"shape": [5]}, 161002, "6 elements"),
    ("Squeeze", desc((2, 1)), {"dim": 2}, 161002, "dim"),
    ("Unsqueeze", desc((2, 1)), {"dim": 3}, 161002, "dim"),
    ("Unsqueeze", desc((2, 1)), {}, 161002, "dim"),
    ("Flatten", desc((2, 1, 3)), {"startDim": 2, "endDim": 1}, 161002, "endDim"),
    ("Transpose", desc((2, 1)), {"dim0": 0, "dim1": 2}, 161002, "dim1"),
])
def test_bad_view_arguments(op, x, attrs, code, needle):
    for call in (lambda: get_op(op).view(x, attrs), lambda: get_op(op).infer([x], attrs)):
        with pytest.raises(InvalidArgumentError) as caught:
            call()
        assert caught.value.code == code
        assert f"aclnn{op}" in str(caught.value) and needle in str(caught.value)
