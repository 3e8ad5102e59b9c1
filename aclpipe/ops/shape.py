"""Data movement that materializes a new tensor: Cast, Permute, InplaceCopy, Cat, Split, Slice, Expand.

Every op here takes every aclpipe dtype (float32, float16, bfloat16, int8, uint8, int32,
int64, bool), reads strided inputs as they are and writes contiguous-or-strided outputs.
None needs a workspace.  Decisions beyond the aclnn headers:

- ``Cast(dtype)``: float to integer truncates toward zero; NaN or out-of-range values give
  whatever the platform conversion gives (as on the device, undefined); to bool is ``!= 0``.
- ``InplaceCopy``: aclnn's ``selfRef`` is written, so it is modelled as the *output*
  (``inputs = (src,)``, ``outputs = (selfRef,)``) and launches declare the write.  ``src``
  broadcasts to ``selfRef``'s shape and is cast to its dtype.  ``infer`` gives a contiguous
  tensor of ``src``'s shape and dtype: the plain copy the graph layer inserts to make a
  non-contiguous view contiguous.
- ``Cat(dim)``: any number of inputs (``inputs`` names the list ``tensors``); dtypes promote
  as in PyTorch and the output must have the promoted dtype.
- ``Split(dim, splitSections | splitSize)``: any number of outputs.  Give exactly one of the
  two attributes; an int is a chunk size (the last chunk may be shorter, like
  ``torch.split(t, 2)``), a list gives each section's size and must sum to the dim.
- ``Slice(dim, start, end, step)``: Python/PyTorch slicing (negative start/end wrap, out
  of range clamps, ``None`` means the ends), ``step >= 1``.
- ``Expand(size)``: ``torch.Tensor.expand`` (``-1`` keeps a dim, new dims go in front),
  materialized as a copy.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ..dtypes import DType, as_dtype, promote_types
from ..tensor import TensorDesc
from .base import Kernel, OpPlan, OpSpec, op_error
from .checks import (
    ALL,
    broadcast_shapes,
    need,
    need_dtype,
    need_output,
    normalize_dim,
    normalize_dims,
)
from .fp_errors import fp_errors_ignored, ignore_fp_errors
from .registry import register

__all__ = [
    "Cast",
    "Cat",
    "Expand",
    "InplaceCopy",
    "Permute",
    "Slice",
    "Split",
    "copy_into",
    "copy_plan",
    "int_attr",
]


def copy_into(out: np.ndarray, value: np.ndarray) -> None:
    """Write ``value`` into ``out``, converting dtype; conversions of NaN/out-of-range values are
    undefined on the device, so numpy's warnings about them are silenced (for nothing on a stream
    worker, which ignores them already: ``np.errstate`` costs 1.5 µs, more than a small copy)."""
    with ignore_fp_errors():
        np.copyto(out, value, casting="unsafe")


def _bind_copies(kernel: Kernel, sources: Callable[[np.ndarray], Any], views: Sequence[np.ndarray | None],
                 results: Sequence[np.ndarray | None], workspace: np.ndarray | None) -> Callable[[], None]:
    """A data-movement plan's ``bind``: ``sources(input)`` (one view, or a list for several
    outputs) made once when each is a view of the input's bytes, then :func:`copy_into` each
    output from it; when one is not (a copy would keep one launch's data), ``kernel`` runs."""
    source, outs = views[0], [result for result in results if result is not None]
    if source is None or source.size == 0 or len(outs) != len(results):
        return functools.partial(kernel, views, results, workspace)
    moved = sources(source)
    pairs = list(zip(outs, moved if isinstance(moved, list) else [moved]))
    if len(pairs) != len(results) or not all(np.may_share_memory(part, source) for _, part in pairs):
        return functools.partial(kernel, views, results, workspace)
    if len(pairs) == 1:  # the usual case: one copy, no Python frame of its own
        return fp_errors_ignored(functools.partial(np.copyto, pairs[0][0], pairs[0][1], casting="unsafe"))

    def run() -> None:
        for result, part in pairs:
            np.copyto(result, part, casting="unsafe")

    return fp_errors_ignored(run)


def int_attr(op: str, name: str, value: Any, *, minimum: int | None = None, optional: bool = False) -> int | None:
    """An integer attribute (``None`` allowed when ``optional``)."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or (minimum is not None and value < minimum):
        bound = f" >= {minimum}" if minimum is not None else ""
        raise op_error(op, name, f"an integer{bound}", repr(value))
    return int(value)


def copy_plan(kernel: Kernel, tensors: Sequence[TensorDesc | None]) -> OpPlan:
    """The plan of a pure data-movement kernel: no flops, every byte read or written once."""
    return OpPlan(kernel, 0, 0.0, float(sum(t.nbytes for t in tensors if t is not None)))


def _pieces(dim: int, sizes: Sequence[int]) -> list[tuple[slice, ...]]:
    """Index tuples of consecutive pieces of ``sizes`` along ``dim`` (what Cat joins, Split cuts)."""
    bounds = np.cumsum([0, *sizes]).tolist()
    return [(slice(None),) * dim + (slice(start, end),) for start, end in itertools.pairwise(bounds)]


def _single(op: str, inputs: Sequence[TensorDesc | None], name: str = "self") -> TensorDesc:
    tensor = need(op, name, inputs[0] if inputs else None)
    need_dtype(op, name, tensor, ALL)
    return tensor


class _Movement(OpSpec):
    """One input, one output computed by ``transform(view, attrs) -> array`` on the host."""

    inputs = ("self",)

    def _output(self, x: TensorDesc, attrs: Mapping[str, Any]) -> tuple[tuple[int, ...], DType]:
        raise NotImplementedError

    def _transform(self, x: TensorDesc, attrs: Mapping[str, Any]) -> Any:
        """``f(view) -> array`` that the kernel copies into the output."""
        raise NotImplementedError

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        shape, dtype = self._output(_single(self.name, inputs), attrs)
        return [TensorDesc.contiguous(shape, dtype)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        x = _single(self.name, inputs)
        shape, dtype = self._output(x, attrs)
        out = need_output(self.name, "out", outputs[0] if outputs else None, shape, dtype)
        transform = self._transform(x, attrs)

        def kernel(views: Sequence[np.ndarray | None], results: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            assert views[0] is not None and results[0] is not None
            copy_into(results[0], transform(views[0]))

        return replace(copy_plan(kernel, [x, out]), bind=functools.partial(_bind_copies, kernel, transform))


class Cast(_Movement):
    """``aclnnCast``: the tensor converted to ``dtype``."""

    name = "Cast"
    attrs = {"dtype": None}

    def _output(self, x: TensorDesc, attrs: Mapping[str, Any]) -> tuple[tuple[int, ...], DType]:
        try:
            dtype = as_dtype(attrs.get("dtype"))
        except TypeError as error:
            raise op_error(self.name, "dtype", "an aclpipe dtype", f"{attrs.get('dtype')!r} ({error})") from None
        return x.shape, dtype

    def _transform(self, x: TensorDesc, attrs: Mapping[str, Any]) -> Any:
        return lambda view: view


class Permute(_Movement):
    """``aclnnPermute``: the axes reordered by ``dims`` (a copy)."""

    name = "Permute"
    attrs = {"dims": None}

    def _dims(self, x: TensorDesc, attrs: Mapping[str, Any]) -> tuple[int, ...]:
        dims = attrs.get("dims")
        if dims is None or isinstance(dims, (int, np.integer)) or len(dims) != x.ndim:
            raise op_error(self.name, "dims", f"a permutation of the {x.ndim} dims", repr(dims))
        return normalize_dims(self.name, "dims", dims, x.ndim)

    def _output(self, x: TensorDesc, attrs: Mapping[str, Any]) -> tuple[tuple[int, ...], DType]:
        return tuple(x.shape[d] for d in self._dims(x, attrs)), x.dtype

    def _transform(self, x: TensorDesc, attrs: Mapping[str, Any]) -> Any:
        dims = self._dims(x, attrs)
        return lambda view: np.transpose(view, dims)


class Slice(_Movement):
    """``aclnnSlice``: ``start:end:step`` along ``dim`` (a copy)."""

    name = "Slice"
    attrs = {"dim": 0, "start": None, "end": None, "step": 1}

    def _slice(self, x: TensorDesc, attrs: Mapping[str, Any]) -> tuple[int, slice]:
        if x.ndim == 0:
            raise op_error(self.name, "self", "at least 1 dim", "a 0-d tensor")
        dim = normalize_dim(self.name, "dim", attrs.get("dim", 0), x.ndim)
        start = int_attr(self.name, "start", attrs.get("start"), optional=True)
        end = int_attr(self.name, "end", attrs.get("end"), optional=True)
        step = int_attr(self.name, "step", attrs.get("step", 1), minimum=1)
        return dim, slice(start, end, step)

    def _output(self, x: TensorDesc, attrs: Mapping[str, Any]) -> tuple[tuple[int, ...], DType]:
        dim, selection = self._slice(x, attrs)
        length = len(range(*selection.indices(x.shape[dim])))
        return x.shape[:dim] + (length,) + x.shape[dim + 1:], x.dtype

    def _transform(self, x: TensorDesc, attrs: Mapping[str, Any]) -> Any:
        dim, selection = self._slice(x, attrs)
        index = (slice(None),) * dim + (selection,)
        return lambda view: view[index]


class Expand(_Movement):
    """``aclnnExpand``: broadcast to ``size`` (a copy, not a view)."""

    name = "Expand"
    attrs = {"size": None}

    def _output(self, x: TensorDesc, attrs: Mapping[str, Any]) -> tuple[tuple[int, ...], DType]:
        size = attrs.get("size")
        if size is None or isinstance(size, (int, np.integer)) or len(size) < x.ndim:
            raise op_error(self.name, "size", f"a list of at least {x.ndim} ints", repr(size))
        lead = len(size) - x.ndim
        shape = []
        for axis, wanted in enumerate(size):
            wanted = int_attr(self.name, "size", wanted, minimum=-1)
            old = x.shape[axis - lead] if axis >= lead else None
            if wanted == -1 and old is not None:
                wanted = old
            if wanted == -1 or (old is not None and old != 1 and wanted != old):
                raise op_error(self.name, "size", f"a size {list(x.shape)} expands to (-1 only for existing "
                               "dims, changes only where the dim is 1)", list(size))
            shape.append(wanted)
        return tuple(shape), x.dtype

    def _transform(self, x: TensorDesc, attrs: Mapping[str, Any]) -> Any:
        shape, _ = self._output(x, attrs)
        return lambda view: np.broadcast_to(view, shape)


class InplaceCopy(OpSpec):
    """``aclnnInplaceCopy``: copy ``src`` into ``selfRef`` (strided on either side)."""

    name = "InplaceCopy"
    inputs = ("src",)
    outputs = ("selfRef",)

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        src = _single(self.name, inputs, "src")
        return [TensorDesc.contiguous(src.shape, src.dtype)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        src = _single(self.name, inputs, "src")
        target = need(self.name, "selfRef", outputs[0] if outputs else None)
        need_dtype(self.name, "selfRef", target, ALL)
        shape = target.shape
        if broadcast_shapes(self.name, [("selfRef", shape), ("src", src.shape)]) != shape:
            raise op_error(self.name, "src", f"a shape that broadcasts to selfRef's {list(shape)}",
                           list(src.shape))

        def kernel(views: Sequence[np.ndarray | None], results: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            assert views[0] is not None and results[0] is not None
            copy_into(results[0], np.broadcast_to(views[0], shape))

        return copy_plan(kernel, [src, target])


class Cat(OpSpec):
    """``torch.cat``: ``inputs`` is the whole list of tensors (any number >= 1)."""

    name = "Cat"
    inputs = ("tensors",)
    attrs = {"dim": 0}

    def _output(self, inputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> tuple[tuple[int, ...], DType, int]:
        if not inputs:
            raise op_error(self.name, "tensors", "at least one tensor", "an empty list", null=True)
        tensors = [need(self.name, f"tensors[{i}]", t) for i, t in enumerate(inputs)]
        first = tensors[0]
        dim = normalize_dim(self.name, "dim", attrs.get("dim", 0), first.ndim)
        dtype = first.dtype
        for index, tensor in enumerate(tensors):
            need_dtype(self.name, f"tensors[{index}]", tensor, ALL)
            others = tensor.shape[:dim] + tensor.shape[dim + 1:]
            if tensor.ndim != first.ndim or others != first.shape[:dim] + first.shape[dim + 1:]:
                raise op_error(self.name, f"tensors[{index}]", f"the shape of tensors[0] {list(first.shape)} "
                               f"except along dim {dim}", list(tensor.shape))
            dtype = promote_types(dtype, tensor.dtype)
        if first.ndim == 0:
            raise op_error(self.name, "tensors[0]", "at least 1 dim", "a 0-d tensor")
        total = sum(t.shape[dim] for t in tensors)
        return first.shape[:dim] + (total,) + first.shape[dim + 1:], dtype, dim

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        shape, dtype, _ = self._output(inputs, attrs)
        return [TensorDesc.contiguous(shape, dtype)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        shape, dtype, dim = self._output(inputs, attrs)
        out = need_output(self.name, "out", outputs[0] if outputs else None, shape, dtype)
        pieces = _pieces(dim, [t.shape[dim] for t in inputs if t is not None])

        def kernel(views: Sequence[np.ndarray | None], results: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            result = results[0]
            assert result is not None
            for view, piece in zip(views, pieces):
                assert view is not None
                copy_into(result[piece], view)

        return copy_plan(kernel, list(inputs) + [out])


class Split(OpSpec):
    """``torch.split``: ``outputs`` is the whole list of sections."""

    name = "Split"
    outputs = ("outs",)
    inputs = ("self",)
    attrs = {"splitSections": None, "splitSize": None, "dim": 0}

    def _sections(self, x: TensorDesc, attrs: Mapping[str, Any]) -> tuple[int, list[int]]:
        given = [key for key in ("splitSections", "splitSize") if attrs.get(key) is not None]
        if len(given) != 1:
            raise op_error(self.name, "splitSections/splitSize", "exactly one of them", given or "neither")
        key, value = given[0], attrs[given[0]]
        if x.ndim == 0:
            raise op_error(self.name, "self", "at least 1 dim", "a 0-d tensor")
        dim = normalize_dim(self.name, "dim", attrs.get("dim", 0), x.ndim)
        length = x.shape[dim]
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            chunk = int_attr(self.name, key, value, minimum=1)
            assert chunk is not None
            return dim, [min(chunk, length - start) for start in range(0, length, chunk)] or [0]
        if not isinstance(value, (list, tuple)):
            raise op_error(self.name, key, "an int (chunk size) or a list of section sizes", repr(value))
        sizes = [int_attr(self.name, key, v, minimum=0) for v in value]
        if sum(sizes) != length:  # type: ignore[arg-type]
            raise op_error(self.name, key, f"sizes summing to {length} (dim {dim})", list(value))
        return dim, sizes  # type: ignore[return-value]

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        x = _single(self.name, inputs)
        dim, sizes = self._sections(x, attrs)
        return [TensorDesc.contiguous(x.shape[:dim] + (size,) + x.shape[dim + 1:], x.dtype) for size in sizes]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        x = _single(self.name, inputs)
        dim, sizes = self._sections(x, attrs)
        if len(outputs) != len(sizes):
            raise op_error(self.name, "outs", f"{len(sizes)} tensors (sections {sizes})", len(outputs))
        for index, size in enumerate(sizes):
            need_output(self.name, f"outs[{index}]", outputs[index], x.shape[:dim] + (size,) + x.shape[dim + 1:],
                        x.dtype)
        pieces = _pieces(dim, sizes)

        def kernel(views: Sequence[np.ndarray | None], results: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            source = views[0]
            assert source is not None
            for result, piece in zip(results, pieces):
                assert result is not None
                copy_into(result, source[piece])

        def split(source: np.ndarray) -> list[np.ndarray]:
            return [source[piece] for piece in pieces]

        return replace(copy_plan(kernel, [x] + list(outputs)), bind=functools.partial(_bind_copies, kernel, split))


for _spec in (Cast(), Permute(), InplaceCopy(), Cat(), Split(), Slice(), Expand()):
    register(_spec)
