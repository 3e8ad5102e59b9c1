"""Request and response bodies of the Serve application: JSON, ``.npy`` and ``.npz``.

- ``application/json``: ``{"x": [[...]], ...}`` (or ``{"inputs": {...}}``); the answer is
  ``{"y": [[...]], ...}``.
- ``application/x-npy``: one array, for a graph with one input; the answer is one ``.npy``
  array when the graph has one output, else an ``.npz`` archive.
- ``application/x-npz``: an archive of arrays by input name; the answer is an archive too.

Bodies are untrusted.  JSON without ``NaN``/``Infinity`` (not JSON, and not numbers a
client meant) and nested no deeper than the parser allows; ``.npy`` and ``.npz`` read through
:mod:`aclpipe.graph.npy`, headers and member names checked against the graph's inputs and
:class:`~aclpipe.graph.limits.LoadLimits` before any data is read, a member that feeds no
input never inflated.  Every bad body raises :class:`RequestError` (an
:class:`~aclpipe.InputFormatError`) with the status to answer: 400, or 415 for an unknown
media type.  Values are checked afterwards, by the one input rule
(:func:`aclpipe.pipeline.batches.as_input`, applied by :meth:`PipelineHost.arrays`).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

import numpy as np

from ..errors import InputFormatError
from ..graph.limits import DEFAULT_LIMITS, LoadLimits
from ..graph.npy import NpzArchive, read_array

__all__ = ["JSON", "NPY", "NPZ", "RequestError", "decode_request", "encode_response"]

#: numpy's stubs type ``savez``'s keyword arrays as if they could be its own options.
_savez: Callable[..., None] = np.savez

JSON, NPY, NPZ = "application/json", "application/x-npy", "application/x-npz"
_BODY = "the request body"


class RequestError(InputFormatError):
    """A request the server cannot read; ``status`` is the HTTP status to answer."""

    def __init__(self, message: str, status: int = 400, *, input: str | None = None):
        self.status = status
        super().__init__(message, input=input)

    def __reduce__(self) -> Any:
        return (type(self), (str(self), self.status))


def decode_request(body: bytes, content_type: str, input_names: Sequence[str],
                   limits: LoadLimits = DEFAULT_LIMITS) -> tuple[dict[str, Any], str]:
    """The inputs a request carries, and the media type to answer in."""
    kind = content_type.split(";")[0].strip().lower() or JSON
    if kind == JSON:
        document = _json(body)
        if isinstance(document, Mapping) and isinstance(document.get("inputs"), Mapping):
            document = document["inputs"]
        if not isinstance(document, Mapping):
            raise RequestError('send a JSON object of inputs by name, e.g. {"x": [[1, 2]]}')
        return dict(document), JSON
    if kind in (NPY, "application/octet-stream"):
        if len(input_names) != 1:
            raise RequestError(f"a .npy body is one array, but the graph takes {list(input_names)}; send .npz")
        if body.startswith(b"PK"):
            raise RequestError("send one array as application/x-npy and several as application/x-npz")
        return {input_names[0]: read_array(io.BytesIO(body), len(body), _BODY, limits.max_constant_bytes,
                                           RequestError)}, NPY
    if kind == NPZ:
        return _archive(body, input_names, limits), NPZ
    raise RequestError(f"unsupported content type {kind!r}: send {JSON}, {NPY} or {NPZ}", status=415)


def _json(body: bytes) -> Any:
    try:
        return json.loads(body or b"{}", parse_constant=_no_constant)
    except RequestError:
        raise
    except RecursionError:
        raise RequestError("the JSON body is nested too deep to read; an input has as many levels of lists as "
                           "dimensions") from None
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
        raise RequestError(f"the body is not JSON: {error}") from None


def _no_constant(name: str) -> NoReturn:
    raise RequestError(f"the JSON body holds {name}, which is not a number (JSON has no NaN or Infinity); send "
                       "finite numbers, or an .npy/.npz body for arrays that hold NaN or infinity")


def _archive(body: bytes, input_names: Sequence[str], limits: LoadLimits) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` body, every member's name checked before any is inflated."""
    with NpzArchive(io.BytesIO(body), _BODY, RequestError, limits) as archive:
        unknown = [name for name in archive.names if name not in input_names]
        if unknown:
            raise RequestError(f"{_BODY} holds {unknown}, which feed no input; the graph takes {list(input_names)}")
        return {name: archive.read(name) for name in archive.names}


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
