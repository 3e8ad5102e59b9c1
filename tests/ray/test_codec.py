"""Bodies of the Serve application: JSON, .npy and .npz, and the errors for bad ones."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from aclpipe.ray.codec import JSON, NPY, NPZ, RequestError, decode_request, encode_response


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def test_json_in_and_out():
    inputs, answer = decode_request(b'{"x": [[1, 2]]}', "application/json; charset=utf-8", ["x"])
    assert inputs == {"x": [[1, 2]]} and answer == JSON
    assert decode_request(b'{"inputs": {"x": [1]}}', JSON, ["x"])[0] == {"x": [1]}
    body, media = encode_response({"y": np.array([[0.5, 1.0]], np.float32)}, JSON)
    assert json.loads(body) == {"y": [[0.5, 1.0]]} and media == JSON


def test_npy_for_one_input_and_npz_for_several():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    inputs, answer = decode_request(npy(x), NPY, ["x"])
    np.testing.assert_array_equal(inputs["x"], x)
    body, media = encode_response({"y": x}, answer)
    assert media == NPY and np.array_equal(np.load(io.BytesIO(body)), x)
    body, media = encode_response({"y": x, "z": x + 1}, answer)  # two outputs: an archive
    assert media == NPZ and set(np.load(io.BytesIO(body)).files) == {"y", "z"}
    archive = io.BytesIO()
    np.savez(archive, a=x, b=x)
    inputs, answer = decode_request(archive.getvalue(), NPZ, ["a", "b"])
    assert set(inputs) == {"a", "b"} and answer == NPZ


@pytest.mark.parametrize(("body", "media", "names", "status", "message"), [
    (b"{not json", JSON, ["x"], 400, "not JSON"),
    (b"[1, 2]", JSON, ["x"], 400, "JSON object"),
    (npy(np.ones(2)), NPY, ["a", "b"], 400, "send .npz"),
    (b"garbage", NPY, ["x"], 400, "not a .npy"),
    (b"x", "text/csv", ["x"], 415, "unsupported content type"),
])
def test_bad_bodies_say_what_to_send(body, media, names, status, message):
    with pytest.raises(RequestError, match=message) as info:
        decode_request(body, media, names)
    assert info.value.status == status
