"""Untrusted request bodies and values (issue 23, sections 3 and 4): each is one typed error
that Serve answers with HTTP 400, never a traceback (HTTP 500), never a value changed silently,
and nothing is read or inflated before its header and name are checked."""

from __future__ import annotations

import io
import pickle
import warnings
import zipfile

import numpy as np
import pytest

import aclpipe
from aclpipe.errors import InputCastError, InputFormatError
from aclpipe.graph.limits import LoadLimits
from aclpipe.ray.codec import JSON, NPY, NPZ, RequestError, decode_request
from aclpipe.ray.host import PipelineHost


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def claiming(shape: tuple[int, ...]) -> bytes:
    """A .npy header declaring ``shape`` float32, and no data."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": "<f4", "fortran_order": False, "shape": shape})
    return buffer.getvalue()


def archive(*members: tuple[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about a repeated name, which is the point
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zipped:
            for name, data in members:
                zipped.writestr(name, data)
    return buffer.getvalue()


X = np.ones((2, 3), np.float32)
GOOD = archive(("x.npy", npy(X)))
RAMP = archive(("x.npy", npy(np.arange(1000, dtype=np.float32))))


def damaged(body: bytes, start: int, data: bytes) -> bytes:
    return body[:start] + data + body[start + len(data):]


BAD_BODIES = {
    "json_nan": (b'{"x": [1.0, NaN]}', JSON, "holds NaN, which is not a number"),
    "json_infinity": (b'{"x": [Infinity]}', JSON, "holds Infinity"),
    "json_minus_infinity": (b'{"x": [-Infinity]}', JSON, "holds -Infinity"),
    "json_deep": (b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", JSON, "nested too deep"),
    "npy_huge_header": (claiming((1 << 45,)), NPY, "over the limit of 1073741824 bytes per array"),
    "npy_truncated": (claiming((1000,)), NPY, "is truncated: its header declares 4000 bytes of data, the file has 0"),
    "npz_truncated": (GOOD[:len(GOOD) // 2], NPZ, "is not a readable .npz archive"),
    "npz_bad_zip": (b"PK\x03\x04 garbage", NPZ, "is not a readable .npz archive"),
    "npz_bad_deflate": (damaged(RAMP, 100, b"\xff" * 10), NPZ, "Error -3 while decompressing data"),
    "npz_bad_crc": (damaged(RAMP, 200, bytes([RAMP[200] ^ 1])), NPZ, "Bad CRC-32 for file 'x.npy'"),
    "npz_raw_bytes": (archive(("x", b"raw bytes, not an array")), NPZ, "member 'x' is not a .npy array"),
    "npz_duplicate": (archive(("x.npy", npy(X)), ("x.npy", npy(X + 1))), NPZ, "two members named 'x'"),
    "npz_unused_bomb": (archive(("x.npy", npy(X)), ("junk.npy", claiming((1 << 38,)))), NPZ,
                        "['junk'], which feed no input"),
    "npz_huge_member": (archive(("x.npy", claiming((1 << 38,)))), NPZ, "over the limit"),
    "npz_as_npy": (GOOD, NPY, "send one array as application/x-npy"),
}


@pytest.mark.parametrize(("body", "media", "message"), list(BAD_BODIES.values()), ids=list(BAD_BODIES))
def test_bad_bodies_are_one_typed_error_answered_with_400(body, media, message):
    with pytest.raises(RequestError, match=message.replace("[", r"\[").replace("]", r"\]")) as info:
        decode_request(body, media, ["x"])
    assert info.value.status == 400 and isinstance(info.value, InputFormatError)
    copy = pickle.loads(pickle.dumps(info.value))  # Ray hands errors across processes pickled
    assert type(copy) is RequestError and copy.status == 400 and str(copy) == str(info.value)


def test_archive_members_are_bounded_by_the_graph_loaders_limits():
    two = archive(("x.npy", npy(X)), ("y.npy", npy(X)))
    assert set(decode_request(two, NPZ, ["x", "y"])[0]) == {"x", "y"}
    with pytest.raises(RequestError, match="LoadLimits.max_total_constant_bytes"):
        decode_request(two, NPZ, ["x", "y"], LoadLimits(max_total_constant_bytes=X.nbytes * 2 - 1))
    with pytest.raises(RequestError, match="LoadLimits.max_constant_bytes"):
        decode_request(npy(X), NPY, ["x"], LoadLimits(max_constant_bytes=X.nbytes - 1))


def test_good_bodies_still_read():
    inputs, answer = decode_request(GOOD, NPZ, ["x"])
    assert answer == NPZ
    np.testing.assert_array_equal(inputs["x"], X)
    fortran = np.asfortranarray(np.arange(6, dtype=np.int64).reshape(2, 3))
    np.testing.assert_array_equal(decode_request(npy(fortran), NPY, ["x"])[0]["x"], fortran)
    assert decode_request(b'{"x": [[1, 2.5]]}', JSON, ["x"])[0] == {"x": [[1, 2.5]]}


@pytest.fixture(scope="module")
def host():
    g = aclpipe.Graph("ints")
    n = g.input("n", shape=(None, 2), dtype="int32")
    f = g.input("f", shape=(None, 2), dtype="float32")
    g.output("m", g.op("Add", n, n))
    g.output("g", g.op("Add", f, f))
    host = PipelineHost(g, backend="sim")
    yield host
    host.pipeline.close()


@pytest.mark.parametrize(("name", "value", "message"), [
    ("n", [[1.9, -2.7]], "float64 values cannot become int32 without changing them"),
    ("n", [[2**40, 1]], "values from 1 to 1099511627776 do not fit int32"),
    ("n", [[2**70, 1]], "integers too large for any numpy dtype"),
    ("f", [[1.0, None]], "null (None), which is not a number"),
    ("f", [[1e300, 1.0]], "overflows float32 to infinity"),
    ("f", [["1", "2"]], "text"),
    ("f", [[1.0], [1.0, 2.0]], "not an array of numbers"),
])
def test_request_values_are_never_changed_silently(host, name, value, message):
    with pytest.raises(InputCastError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        host.arrays({name: value})
    assert info.value.input == name and isinstance(info.value, ValueError)  # Serve's 400


def test_request_values_that_fit_are_converted(host):
    arrays = host.arrays({"n": [[-5, 2**31 - 1]], "f": [[1, 2]]})
    assert arrays["n"].dtype == np.int32 and arrays["n"].tolist() == [[-5, 2**31 - 1]]
    assert arrays["f"].dtype == np.float32 and arrays["f"].tolist() == [[1.0, 2.0]]
