"""``Einsum(tensors; equation)``: ``aclnnEinsum``, Einstein summation over a list of tensors.

The equation is numpy's (and ONNX's): comma-separated subscripts of lowercase or uppercase
letters per operand, an optional ``...`` standing for broadcast dims, and an optional
``->`` output; without it the output holds, in alphabetical order, the letters that appear
once (after the ``...`` dims).  Phase one parses it, checks each operand's rank and that
every letter has one size (1 broadcasts), and infers the output shape.

Operands share one dtype (floats, int32 or int64).  Floats are computed in float32 and ints in
int64; the result is accumulated in that dtype in the workspace (``numel(out) * itemsize``
bytes) before it is stored, so a short workspace is refused at launch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..dtypes import DType
from ..tensor import TensorDesc
from .base import OpPlan, OpSpec, op_error
from .checks import (
    FLOATS,
    need,
    need_dtype,
    need_output,
    need_same_dtype,
    scratch_view,
    store,
)
from .registry import register

__all__ = ["Einsum", "EinsumEquation", "parse_equation"]

_TERM = re.compile(r"^[A-Za-z]*(\.\.\.)?[A-Za-z]*$")
_DTYPES = FLOATS | {DType.int32, DType.int64}


@dataclass(frozen=True)
class EinsumEquation:
    """A parsed equation: the operand terms, the output term (``...`` kept as text)."""

    inputs: tuple[str, ...]
    output: str

    @property
    def text(self) -> str:
        return f"{','.join(self.inputs)}->{self.output}"


def parse_equation(op: str, equation: Any, count: int) -> EinsumEquation:
    """Split and check ``equation`` for ``count`` operands; fill in an implicit output."""
    if not isinstance(equation, str):
        raise op_error(op, "equation", "a string such as 'ij,jk->ik'", repr(equation), null=equation is None)
    text = equation.replace(" ", "")
    left, arrow, right = text.partition("->")
    terms = tuple(left.split(","))
    if len(terms) != count or not all(_TERM.match(term) for term in terms):
        raise op_error(op, "equation", f"{count} comma-separated subscripts of letters (and '...')", repr(equation))
    if arrow:
        if not _TERM.match(right) or len(set(right.replace("...", ""))) != len(right.replace("...", "")):
            raise op_error(op, "equation", "an output of distinct letters (and '...')", repr(equation))
        output = right
    else:
        letters = "".join(term.replace("...", "") for term in terms)
        once = "".join(sorted(letter for letter in set(letters) if letters.count(letter) == 1))
        output = ("..." if any("..." in term for term in terms) else "") + once
    known = set("".join(terms))
    if any(letter not in known for letter in output.replace("...", "")):
        raise op_error(op, "equation", "output letters that appear in the inputs", repr(equation))
    return EinsumEquation(terms, output)


def _output_shape(op: str, equation: EinsumEquation, shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    sizes: dict[str, int] = {}
    ellipsis: tuple[int, ...] = ()
    for index, (term, shape) in enumerate(zip(equation.inputs, shapes)):
        letters = term.replace("...", "")
        if len(shape) < len(letters) or ("..." not in term and len(shape) != len(letters)):
            raise op_error(op, f"tensors[{index}]", f"rank {len(letters)} for subscript {term!r}", list(shape))
        cut = term.find("...")
        if cut < 0:
            named = list(zip(term, shape))
        else:
            rest = len(term) - cut - 3
            middle = shape[cut:len(shape) - rest]
            try:
                ellipsis = tuple(np.broadcast_shapes(ellipsis, middle))
            except ValueError:
                raise op_error(op, f"tensors[{index}]", f"'...' dims that broadcast with {list(ellipsis)}",
                               list(middle)) from None
            named = list(zip(term[:cut], shape[:cut])) + list(zip(term[cut + 3:], shape[len(shape) - rest:]))
        for letter, size in named:
            have = sizes.get(letter, 1)
            if have != size and 1 not in (have, size):
                raise op_error(op, f"tensors[{index}]", f"size {have} for subscript {letter!r}", size)
            sizes[letter] = max(have, size) if 0 not in (have, size) else 0
    out: list[int] = []
    for part in re.split(r"(\.\.\.)", equation.output):
        out.extend(ellipsis if part == "..." else (sizes[letter] for letter in part))
    return tuple(out)


class Einsum(OpSpec):
    name = "Einsum"
    inputs = ("tensors",)
    outputs = ("output",)
    attrs = {"equation": None}

    def _check(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]
               ) -> tuple[list[TensorDesc], EinsumEquation, tuple[int, ...]]:
        if not inputs:
            raise op_error(self.name, "tensors", "at least one tensor", "an empty list", null=True)
        tensors = [need(self.name, f"tensors[{i}]", t) for i, t in enumerate(inputs)]
        need_dtype(self.name, "tensors[0]", tensors[0], _DTYPES)
        need_same_dtype(self.name, [f"tensors[{i}]" for i in range(len(tensors))], tensors)
        equation = parse_equation(self.name, attrs.get("equation"), len(tensors))
        return tensors, equation, _output_shape(self.name, equation, [t.shape for t in tensors])

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        tensors, _, shape = self._check(inputs, attrs)
        return [TensorDesc.contiguous(shape, tensors[0].dtype)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        tensors, equation, shape = self._check(inputs, attrs)
        dtype = tensors[0].dtype
        out = need_output(self.name, "output", outputs[0] if outputs else None, shape, dtype)
        compute = np.dtype(np.float32) if dtype.is_floating else np.dtype(np.int64)
        workspace_size = out.numel * compute.itemsize
        text = equation.text

        def kernel(views: Sequence[np.ndarray | None], results: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            assert all(view is not None for view in views) and results[0] is not None
            accumulated = scratch_view(workspace, 0, shape, compute)
            operands = [np.asarray(view).astype(compute, copy=False) for view in views]
            np.copyto(accumulated, np.einsum(text, *operands, optimize=len(operands) > 2))  # type: ignore[arg-type]
            store(results[0], accumulated)

        flops = 2.0 * max(out.numel, 1) * max((t.numel for t in tensors), default=1)
        return OpPlan(kernel, workspace_size, flops, float(sum(t.nbytes for t in tensors) + out.nbytes),
                      cube=dtype.is_floating)


register(Einsum())
