"""Batch shapes a pipeline is fed: shape buckets, and batches with no rows.

Shape buckets.  A server answering requests of any size would prepare one program per batch
size it ever sees.  With ``Pipeline(..., buckets=(1, 4, 16, 64))`` a batch of ``n`` rows is
padded up to the smallest bucket that holds it (repeating its last row, so the padding holds
values the real rows already have), run with that bucket's program, and every output is
sliced back to its first ``n`` rows; a batch larger than the largest bucket runs at its own
size.  The *batch* is the first dim of every input whose first dim is dynamic (``None`` or a
name).  This is only right for graphs whose rows are independent (each output row depends on
its own input row alone, as in per-sample inference) and whose outputs all lead with the
batch dim; the latter is checked, the former is the caller's promise.

Inputs.  :func:`check_inputs` checks one run's inputs against the graph (names, dtypes), and
:func:`as_input` is the one rule every entry point applies to an input's values: an input is
never changed silently.  ``Pipeline.run`` takes the declared dtype only; the CLI's files and
the Ray host's and Serve's requests (JSON has no dtypes) may also arrive in another dtype of
numbers, converted when numpy calls the cast same-kind (or it is integers into integers) *and*
every value survives it: an integer within the target's range, a float that does not overflow
to infinity.  Anything
else (floats into an int input, ``uint8`` 200 into ``int8``, 1e300 into ``float32``, JSON
``null``, text) is an :class:`~aclpipe.InputCastError` naming the input.

Empty batches.  A batch with a zero-size dim whose outputs are all empty too (the usual case:
an empty batch) runs nothing: the result is empty arrays of the bound shapes and dtypes, and
no program is prepared for it.  When an output would still hold values (a reduction over
the empty dim), the batch runs on the device like any other: zero-size tensors there take no
bytes, and the reduction gives its identity (0 for a sum).
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..dtypes import DType, as_dtype
from ..errors import DeviceOutOfMemory, GraphError, InputCastError

if TYPE_CHECKING:
    from ..graph import Graph
    from ..plan import Plan

__all__ = ["ShapeBuckets", "as_input", "check_inputs", "empty_result", "has_empty_input"]


class ShapeBuckets:
    """Pad batches up to prepared sizes, and slice the results back.

    Parameters
    ----------
    graph:
        The graph; its inputs with a dynamic first dim carry the batch.
    sizes:
        Bucket sizes (positive ints, any order, no duplicates needed).
    """

    def __init__(self, graph: Graph, sizes: Iterable[int]):
        try:
            values = list(sizes)
        except TypeError:
            raise TypeError(f"buckets must be a sequence of positive ints, got {sizes!r}") from None
        bad = [size for size in values if isinstance(size, bool) or not isinstance(size, (int, np.integer))
               or size < 1]
        if not values or bad:
            raise ValueError(f"buckets must be positive ints (batch sizes to prepare), got {values!r}")
        self.sizes: tuple[int, ...] = tuple(sorted({int(size) for size in values}))
        self.inputs = tuple(name for name, spec in graph.inputs.items()
                            if spec.shape and not isinstance(spec.shape[0], int))
        if not self.inputs:
            declared = {name: spec.shape for name, spec in graph.inputs.items()}
            raise ValueError(f"buckets need an input whose first dim is dynamic (None or a name); graph "
                             f"{graph.name!r} has none: {declared}")

    def bucket(self, rows: int) -> int | None:
        """The bucket a batch of ``rows`` runs in; None when it runs at its own size."""
        index = bisect.bisect_left(self.sizes, rows)
        return self.sizes[index] if index < len(self.sizes) else None

    def pad(self, arrays: Mapping[str, np.ndarray], skip: Collection[str] = (), *, memory: int | None = None
            ) -> tuple[dict[str, np.ndarray], int | None]:
        """The arrays padded to their bucket, and the real row count to slice back to (None
        when nothing was padded).  Inputs in ``skip`` (host values: their contents are part
        of the program) are never padded.

        Raises
        ------
        DeviceOutOfMemory
            The padded inputs alone take more than ``memory`` bytes (the device's): checked
            before anything is padded, so a large bucket never allocates its copies on the host
            for a run that cannot fit on the device.
        """
        target = self._target(arrays, skip)
        if target is None:
            return dict(arrays), None
        names, count, size = target
        if memory is not None:
            _check_padded_size(arrays, names, count, size, memory)
        padded = dict(arrays)
        for name in names:
            array = arrays[name]
            # Repeat the last real row: padding then holds values the real rows already have.
            filler = np.repeat(array[-1:], size - count, axis=0)
            padded[name] = np.concatenate([array, filler], axis=0)
        return padded, count

    def padded_shapes(self, arrays: Mapping[str, np.ndarray], skip: Collection[str] = ()) -> dict[str, Any]:
        """What :meth:`pad` would give, with each padded input as its shape instead of a padded
        copy (enough for :meth:`Graph.signature` and planning)."""
        target = self._target(arrays, skip)
        shapes: dict[str, Any] = dict(arrays)
        if target is not None:
            names, _, size = target
            for name in names:
                shapes[name] = (size, *arrays[name].shape[1:])
        return shapes

    def _target(self, arrays: Mapping[str, np.ndarray], skip: Collection[str]) -> tuple[list[str], int, int] | None:
        """The inputs to pad, their row count and the bucket's; None when nothing is padded."""
        names = [name for name in self.inputs if name not in skip]
        if not names:
            return None
        rows = {name: int(arrays[name].shape[0]) for name in names}
        if len(set(rows.values())) > 1:
            raise ValueError(f"with buckets, inputs {list(self.inputs)} share the batch (their first dim), "
                             f"so they must have as many rows; got {rows}")
        count = next(iter(rows.values()))
        size = self.bucket(count)
        if size is None or size == count or count == 0:
            return None
        return names, count, size

    def check_once(self, checked: set[int], plans: Iterable[Plan], rows: int | None) -> None:
        """:meth:`check_outputs` of ``plans`` for the bucket a batch of ``rows`` (padded; None:
        not padded) ran in, unless that bucket is in ``checked`` (the program's), which it joins."""
        size = self.bucket(rows) if rows is not None else None
        if size is not None and size not in checked:
            for plan in plans:
                self.check_outputs(plan, size)
            checked.add(size)

    @staticmethod
    def check_outputs(plan: Plan, size: int) -> None:
        """Refuse a graph whose outputs do not all lead with the batch (``size`` rows)."""
        for output, value in plan.outputs.items():
            shape = plan.values[value].desc.shape
            if not shape or shape[0] != size:
                raise GraphError(f"buckets pad the batch to {size} rows, but output {output!r} has shape "
                                 f"{tuple(shape)}: its first dim is not the batch, so the padding cannot be "
                                 "sliced off; use buckets only with graphs whose outputs lead with the batch")

    @staticmethod
    def slice(outputs: Mapping[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
        """Each output's first ``rows`` rows (copies, so the padded arrays can go)."""
        return {name: array[:rows].copy() for name, array in outputs.items()}

    def __repr__(self) -> str:
        return f"<ShapeBuckets {list(self.sizes)} over {list(self.inputs)}>"


def _check_padded_size(arrays: Mapping[str, np.ndarray], names: Iterable[str], count: int, size: int,
                       memory: int) -> None:
    """Refuse padding ``count`` rows of ``names`` up to ``size`` when the result would not fit
    in ``memory`` bytes of device memory."""
    needed = {name: size * (arrays[name].nbytes // count) for name in names}
    total = sum(needed.values())
    if total > memory:
        raise DeviceOutOfMemory(detail=(
            f"bucket {size}: a batch of {count} rows padded to the bucket of {size} rows needs {total} bytes for "
            f"its inputs alone ({needed}), more than the device's {memory} bytes; add a smaller bucket between "
            f"{count} and {size}, or send smaller batches"), requested=total, limit=memory)


def check_inputs(graph: Graph, inputs: Mapping[str, Any], *, convert: bool = False) -> dict[str, np.ndarray]:
    """The inputs of one run as arrays; a ValueError naming what the graph takes when one is
    missing or unknown, and :func:`as_input`'s :class:`~aclpipe.InputCastError` (also a
    TypeError) when one's values do not fit."""
    expected = graph.inputs
    missing = [name for name in expected if name not in inputs]
    unknown = [name for name in inputs if name not in expected]
    if missing or unknown:
        raise ValueError(f"graph {graph.name!r} takes inputs {list(expected)}; missing {missing}, unknown {unknown}")
    return {name: as_input(name, inputs[name], spec.dtype, convert=convert) for name, spec in expected.items()}


def as_input(name: str, value: Any, dtype: Any, *, convert: bool = True) -> np.ndarray:
    """``value`` as an array of ``dtype`` (what the graph declares for input ``name``), with no
    value changed (module docstring).

    Parameters
    ----------
    name:
        The input's name, for the error.
    value:
        An array, or anything ``numpy.asarray`` takes (nested lists from JSON).
    dtype:
        The graph's dtype for the input.
    convert:
        Whether another dtype of numbers is converted when every value survives; False takes
        ``dtype`` only (``Pipeline.run``: the caller converts, explicitly).

    Raises
    ------
    InputCastError
        Not numbers, or a cast that would change a value or that numpy does not call same-kind.
    """
    want = as_dtype(dtype)
    try:
        array = np.asarray(value)
    except (ValueError, TypeError, OverflowError, RecursionError) as error:  # ragged lists, nested too deep
        raise InputCastError(f"input {name!r}: not an array of numbers: {' '.join(str(error).split())}",
                             input=name) from None
    if array.dtype == want.numpy:
        return array
    if not convert:
        raise InputCastError(f"input {name!r}: expected dtype {want.name} (as the graph declares), got "
                             f"{array.dtype}; convert with array.astype('{want.name}')", input=name)
    return _cast(name, array, want)


def _cast(name: str, array: np.ndarray, want: DType) -> np.ndarray:
    """``array`` cast to ``want``, refused unless numpy calls it same-kind (or it is integers into
    integers) and no value changes beyond a float's rounding: integers must lie in range,
    finite floats stay finite."""
    seen, target = array.dtype, want.numpy
    if seen.kind not in "biuf" and not (seen.kind == "V" and seen == as_dtype("bfloat16").numpy):
        raise InputCastError(f"input {name!r}: expected numbers ({want.name}), got {_not_numbers(array)}",
                             input=name)
    # Integers into an unsigned dtype too (numpy calls int64 to uint8 unsafe, but JSON's integers
    # arrive as int64): the range check below keeps every value.
    integers = seen.kind in "biu" and want.is_integer
    if not integers and not np.can_cast(seen, target, "same_kind"):
        raise InputCastError(f"input {name!r}: {seen} values cannot become {want.name} without changing them "
                             f"(numpy calls the cast unsafe: {seen} to {want.name} is not same-kind); send "
                             f"{want.name} values", input=name)
    if want.is_integer and array.size:
        info = np.iinfo(target)
        low, high = int(array.min()), int(array.max())
        if low < info.min or high > info.max:
            raise InputCastError(f"input {name!r}: {seen} values from {low} to {high} do not fit {want.name} "
                                 f"({info.min} to {info.max}); they would wrap around, so they are refused",
                                 input=name)
    with np.errstate(over="ignore", invalid="ignore"):
        converted = array.astype(target)
    if want.is_floating and array.size:
        overflow = np.isinf(converted) & ~np.isinf(array)
        if overflow.any():
            first = array[overflow].flat[0].item()
            raise InputCastError(f"input {name!r}: {seen} value {first!r} overflows {want.name} to infinity (its "
                                 f"largest value is {float(np.finfo(target).max):g}); scale the values, or "
                                 "declare a wider dtype in the graph", input=name)
    return converted


def _not_numbers(array: np.ndarray) -> str:
    if array.dtype.kind == "O":
        values = array.reshape(-1).tolist()
        if any(value is None for value in values):
            return "null (None), which is not a number"
        if any(isinstance(value, int) for value in values):
            return "integers too large for any numpy dtype (over 64 bits)"
        return f"Python objects ({', '.join(sorted({type(value).__name__ for value in values}))})"
    kinds = {"c": "complex numbers", "U": "text", "S": "bytes", "M": "dates", "m": "time spans"}
    return f"{array.dtype} ({kinds.get(array.dtype.kind, 'not plain numbers')})"


def has_empty_input(graph: Graph, arrays: Mapping[str, np.ndarray]) -> bool:
    """Whether any input copied to the device (not a host value) has a zero-size dim."""
    host = graph.host_inputs
    return any(array.size == 0 for name, array in arrays.items() if name not in host)


def empty_result(graph: Graph, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
    """The result of a batch with a zero-size dim when every output is empty too (empty arrays of
    the bound shapes and dtypes, computed without the device); None when an output would hold
    values, which the device then computes like any other batch."""
    key = graph.signature(**arrays)
    bound = graph.bind(**key.bind_arguments())
    result: dict[str, np.ndarray] = {}
    for output, value in bound.outputs.items():
        desc = bound.values[value].desc
        if int(np.prod(desc.shape, dtype=np.int64)) != 0:
            return None
        result[output] = np.empty(desc.shape, dtype=desc.dtype.numpy)
    return result
