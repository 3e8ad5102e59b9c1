"""View operations: Reshape, Squeeze, Unsqueeze, Flatten, Transpose.

A view changes only the descriptor: :meth:`OpSpec.view` returns a :class:`TensorDesc`
over the *same storage* (same address, new shape/strides/offset, format ND) and nothing
is launched.  Decisions:

- ``prepare`` validates its arguments like any op and then refuses with 161002: a view has
  no kernel, and a no-op launch would declare reads and writes of memory it never touches.
  Callers (the graph layer, OpRunner) ask ``spec.is_view`` and call ``view`` instead.
- ``infer`` gives the contiguous output descriptor (address 0) like every op, and does not
  check that a view is possible: the output *shape* is defined either way.
- ``Reshape(shape)`` (one ``-1`` allowed) and ``Flatten(startDim=0, endDim=-1)`` return a
  view whenever PyTorch's ``view`` would (merged dims must be contiguous with each other);
  otherwise ``view`` raises 161002 saying a contiguous copy is needed, and the graph layer
  inserts an ``InplaceCopy`` first.
- ``Squeeze(dim=None)``: ``None`` removes every size-1 dim; an int or list removes those of
  the named dims that have size 1 (others are left alone, like PyTorch).
- ``Unsqueeze(dim)``: ``dim`` in ``[-ndim-1, ndim]``.  ``Transpose(dim0, dim1)``: a stride swap.

Every dtype is accepted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..dtypes import Format
from ..tensor import TensorDesc, contiguous_strides
from .base import OpPlan, OpSpec, op_error
from .checks import ALL, need, need_dtype, normalize_dim, normalize_dims
from .registry import register

__all__ = ["Flatten", "Reshape", "Squeeze", "Transpose", "Unsqueeze", "view_strides"]

Layout = tuple[tuple[int, ...], tuple[int, ...]]  # (shape, strides)


def view_strides(shape: tuple[int, ...], strides: tuple[int, ...],
                 new_shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """Strides that show a ``shape``/``strides`` tensor as ``new_shape`` without copying, or None.

    PyTorch's ``computeStride``: walk both shapes from the innermost dim, in chunks of old
    dims that are contiguous with each other; each chunk must map onto whole new dims.
    """
    if math.prod(shape) == 0:
        return contiguous_strides(new_shape)
    if not shape:
        shape, strides = (1,), (1,)
    new_strides = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base = strides[-1]
    tensor_numel = view_numel = 1
    for tensor_d in range(len(shape) - 1, -1, -1):
        tensor_numel *= shape[tensor_d]
        chunk_ends = tensor_d == 0 or (shape[tensor_d - 1] != 1 and
                                       strides[tensor_d - 1] != tensor_numel * chunk_base)
        if not chunk_ends:
            continue
        while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
            new_strides[view_d] = view_numel * chunk_base
            view_numel *= new_shape[view_d]
            view_d -= 1
        if view_numel != tensor_numel:
            return None
        if tensor_d > 0:
            chunk_base = strides[tensor_d - 1]
            tensor_numel = view_numel = 1
    return tuple(new_strides) if view_d == -1 else None


class _View(OpSpec):
    """Shared contract; subclasses give the layout (shape and strides) of the view."""

    inputs = ("self",)
    is_view = True

    def _shape(self, x: TensorDesc, attrs: Mapping[str, Any]) -> tuple[int, ...]:
        raise NotImplementedError

    def _layout(self, x: TensorDesc, attrs: Mapping[str, Any]) -> Layout:
        """Default: a new shape over the same elements in the same order (Reshape-like)."""
        shape = self._shape(x, attrs)
        strides = view_strides(x.shape, x.strides, shape)
        if strides is None:
            raise op_error(self.name, "self", f"strides that allow a {list(shape)} view without copying "
                           "(insert a contiguous copy, e.g. InplaceCopy, first)", f"{x}")
        return shape, strides

    def _input(self, inputs: Sequence[TensorDesc | None]) -> TensorDesc:
        x = need(self.name, "self", inputs[0] if inputs else None)
        need_dtype(self.name, "self", x, ALL)
        return x

    def view(self, input: TensorDesc, attrs: Mapping[str, Any]) -> TensorDesc:
        x = self._input([input])
        shape, strides = self._layout(x, attrs)
        return TensorDesc(shape, x.dtype, strides, x.offset, Format.ND, x.address)

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        x = self._input(inputs)
        return [TensorDesc.contiguous(self._shape(x, attrs), x.dtype)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        self._shape(self._input(inputs), attrs)
        raise op_error(self.name, "launch", "no launch: views only change the descriptor "
                       f"(call get_op({self.name!r}).view(desc, attrs), which shares the input's storage)",
                       "a phase-one call for a kernel")


class Reshape(_View):
    """A view with a new shape over the same elements (launches nothing)."""

    name = "Reshape"
    attrs = {"shape": None}

    def _shape(self, x: TensorDesc, attrs: Mapping[str, Any]) -> tuple[int, ...]:
        wanted: Any = attrs.get("shape")
        valid = isinstance(wanted, (list, tuple)) and all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= -1 for v in wanted)
        if not valid or sum(v == -1 for v in wanted) > 1:
            raise op_error(self.name, "shape", "a list of ints >= 0 with at most one -1", repr(wanted))
        known = math.prod(int(v) for v in wanted if v != -1)
        if -1 in wanted:
            if known == 0 or x.numel % known:
                raise op_error(self.name, "shape", f"a shape whose -1 can be resolved for {x.numel} elements",
                               list(wanted))
            return tuple(x.numel // known if v == -1 else int(v) for v in wanted)
        if known != x.numel:
            raise op_error(self.name, "shape", f"{x.numel} elements (self is {list(x.shape)})", list(wanted))
        return tuple(int(v) for v in wanted)


class Flatten(_View):
    """A view: dims ``axis..`` folded into one (launches nothing)."""

    name = "Flatten"
    attrs = {"startDim": 0, "endDim": -1}

    def _shape(self, x: TensorDesc, attrs: Mapping[str, Any]) -> tuple[int, ...]:
        start = normalize_dim(self.name, "startDim", attrs.get("startDim", 0), x.ndim)
        end = normalize_dim(self.name, "endDim", attrs.get("endDim", -1), x.ndim)
        if start > end:
            raise op_error(self.name, "endDim", f"a dim at or after startDim {start}", end)
        if x.ndim == 0:
            return (1,)
        return x.shape[:start] + (math.prod(x.shape[start:end + 1]),) + x.shape[end + 1:]


class Squeeze(_View):
    """A view without the given size-1 dims (launches nothing)."""

    name = "Squeeze"
    attrs = {"dim": None}

    def _removed(self, x: TensorDesc, attrs: Mapping[str, Any]) -> set[int]:
        dims = normalize_dims(self.name, "dim", attrs.get("dim"), x.ndim)
        return {d for d in dims if d < x.ndim and x.shape[d] == 1}

    def _shape(self, x: TensorDesc, attrs: Mapping[str, Any]) -> tuple[int, ...]:
        return self._layout(x, attrs)[0]

    def _layout(self, x: TensorDesc, attrs: Mapping[str, Any]) -> Layout:
        removed = self._removed(x, attrs)
        kept = [d for d in range(x.ndim) if d not in removed]
        return tuple(x.shape[d] for d in kept), tuple(x.strides[d] for d in kept)


class Unsqueeze(_View):
    """A view with size-1 dims inserted (launches nothing)."""

    name = "Unsqueeze"
    attrs = {"dim": None}

    def _shape(self, x: TensorDesc, attrs: Mapping[str, Any]) -> tuple[int, ...]:
        return self._layout(x, attrs)[0]

    def _layout(self, x: TensorDesc, attrs: Mapping[str, Any]) -> Layout:
        dim = normalize_dim(self.name, "dim", attrs.get("dim"), x.ndim + 1)
        stride = x.shape[dim] * x.strides[dim] if dim < x.ndim else 1
        return (x.shape[:dim] + (1,) + x.shape[dim:], x.strides[:dim] + (stride,) + x.strides[dim:])


class Transpose(_View):
    """A view with two axes (or all, reversed) swapped (launches nothing)."""

    name = "Transpose"
    attrs = {"dim0": 0, "dim1": 1}

    def _shape(self, x: TensorDesc, attrs: Mapping[str, Any]) -> tuple[int, ...]:
        return self._layout(x, attrs)[0]

    def _layout(self, x: TensorDesc, attrs: Mapping[str, Any]) -> Layout:
        first = normalize_dim(self.name, "dim0", attrs.get("dim0", 0), x.ndim)
        second = normalize_dim(self.name, "dim1", attrs.get("dim1", 1), x.ndim)
        if x.ndim == 0:
            return (), ()
        order = list(range(x.ndim))
        order[first], order[second] = order[second], order[first]
        return tuple(x.shape[d] for d in order), tuple(x.strides[d] for d in order)


for _spec in (Reshape(), Squeeze(), Unsqueeze(), Flatten(), Transpose()):
    register(_spec)
