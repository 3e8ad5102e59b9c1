"""Request and response bodies of the Serve application: JSON, ``.npy`` and ``.npz``.

- ``application/json``: ``{"x": [[...]], ...}`` (or ``{"inputs": {...}}``); the answer is
  ``{"y": [[...]], ...}``.
- ``application/x-npy``: one array, for a graph with one input; the answer is one ``.npy``
  array when the graph has one output, else an ``.npz`` archive.
- ``application/x-npz``: an archive of arrays by input name; the answer is an archive too.

Bad bodies raise :class:`RequestError` with the status to answer (400 or 415).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["JSON", "NPY", "NPZ", "RequestError", "decode_request", "encode_response"]

#: numpy's stubs type ``savez``'s keyword arrays as if they could be its own options.
_savez: Callable[..., None] = np.savez

JSON, NPY, NPZ = "application/json", "application/x-npy", "application/x-npz"


class RequestError(ValueError):
    """A request the server cannot read; ``status`` is the HTTP status to answer."""

    def __init__(self, message: str, status: int = 400):
        self.status = status
        super().__init__(message)


def decode_request(body: bytes, content_type: str, input_names: Sequence[str]) -> tuple[dict[str, Any], str]:
    """The inputs a request carries, and the media type to answer in."""
    kind = content_type.split(";")[0].strip().lower() or JSON
    if kind == JSON:
        try:
            document = json.loads(body or b"{}")
        except ValueError as error:
            raise RequestError(f"the body is not JSON: {error}") from None
        if isinstance(document, Mapping) and isinstance(document.get("inputs"), Mapping):
            document = document["inputs"]
        if not isinstance(document, Mapping):
            raise RequestError('send a JSON object of inputs by name, e.g. {"x": [[1, 2]]}')
        return dict(document), JSON
    if kind in (NPY, "application/octet-stream"):
        if len(input_names) != 1:
            raise RequestError(f"a .npy body is one array, but the graph takes {list(input_names)}; send .npz")
        return {input_names[0]: _load(body, allow_archive=False)}, NPY
    if kind == NPZ:
        archive = _load(body, allow_archive=True)
        return {name: archive[name] for name in archive.files}, NPZ
    raise RequestError(f"unsupported content type {kind!r}: send {JSON}, {NPY} or {NPZ}", status=415)


def encode_response(outputs: Mapping[str, np.ndarray], media_type: str) -> tuple[bytes, str]:
    """The answer's body and media type (see the module docstring)."""
    if media_type == JSON:
        return json.dumps({name: np.asarray(value).tolist() for name, value in outputs.items()}).encode(), JSON
    buffer = io.BytesIO()
    if media_type == NPY and len(outputs) == 1:
        np.save(buffer, np.asarray(next(iter(outputs.values()))), allow_pickle=False)
        return buffer.getvalue(), NPY
    _savez(buffer, **{name: np.asarray(value) for name, value in outputs.items()})
    return buffer.getvalue(), NPZ


def _load(body: bytes, *, allow_archive: bool) -> Any:
    try:
        loaded = np.load(io.BytesIO(body), allow_pickle=False)
    except (ValueError, OSError, EOFError) as error:
        raise RequestError(f"the body is not a .npy/.npz file: {error}") from None
    if isinstance(loaded, np.lib.npyio.NpzFile) != allow_archive:
        raise RequestError("send one array as application/x-npy and several as application/x-npz")
    return loaded
