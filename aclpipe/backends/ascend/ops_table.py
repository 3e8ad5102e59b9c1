"""Catalog ops to aclnn calls: which function, and each argument in the header's order.

A row lists the phase-one parameters before ``workspaceSize, executor``: catalog inputs
``IN(i)`` and outputs ``OUT(i)`` become ``aclTensor *`` (NULL when absent), attributes become
scalars, int arrays, plain numbers or a dtype.  Attribute defaults come from the catalog's
``OpSpec.attrs``, so both backends read the same values.

``IN(i)``/``OUT(i)`` use the catalog's numbering, which is also the index given to
``aclSetInputTensorAddr``/``aclSetOutputTensorAddr``: the position among the op's tensor
inputs (outputs) in header order.  The catalog orders them as the headers do, except that
``InplaceCopy``'s written ``selfRef`` is the catalog's output 0 (it refuses repeatable
executors on the fake, as same-address copies do on CANN, so it is never re-pointed), and so
is ``InplaceScatterUpdate``'s ``data`` (catalog inputs ``indices`` 0 and ``updates`` 1).  That
one is repeatable: the decoder captures it with ``data`` bound to its cache buffer, whose
address never changes; how real CANN numbers an in-place tensor for
``aclSetInputTensorAddr`` is unverified, so re-pointing ``indices``/``updates`` by the
catalog's numbers is the fake's convention, not yet CANN's.

Prototypes: reference/acl_api.md section 3 (ops-math, ops-nn headers; RmsNorm from its doc); the
issue-14 rows (Elu ... MaxPool2dWithIndices) from the ops-nn/ops-math op_api headers and docs.
Catalog ops not listed (LSTM/GRU/RNN, whose ``aclnnLSTM`` takes tensor lists; GatherNd and
ScatterNd, whose catalog forms add ``batchDims``/``reduce``; Einsum's tensor list; the
quantized integer products) raise ``UnsupportedOpError`` on this backend.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...dtypes import as_dtype
from ...tensor import TensorDesc
from .tensors import CallArguments

__all__ = ["IN", "OPS", "OUT", "Arg", "BuiltCall", "OpBinding"]

Tensors = Sequence[TensorDesc | None]
Convert = Callable[[CallArguments, Tensors, Tensors, Mapping[str, Any]], Any]


@dataclass(frozen=True)
class Arg:
    """One phase-one parameter: how to make its C value from the call."""

    kind: str  # "input", "output" or "attr"
    key: int | str
    convert: Convert


@dataclass
class BuiltCall:
    """The C values of one phase-one call and the tensor handles by catalog index."""

    values: list[Any]
    inputs: dict[int, Any] = field(default_factory=dict)
    outputs: dict[int, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class OpBinding:
    """How the catalog op ``op`` calls ``aclnn<op>GetWorkspaceSize`` and ``aclnn<op>``."""

    op: str
    arguments: tuple[Arg, ...]

    @property
    def phase_one(self) -> str:
        return f"aclnn{self.op}GetWorkspaceSize"

    @property
    def phase_two(self) -> str:
        return f"aclnn{self.op}"

    def build(self, handles: CallArguments, inputs: Tensors, outputs: Tensors, attrs: Mapping[str, Any]) -> BuiltCall:
        call = BuiltCall([])
        for argument in self.arguments:
            value = argument.convert(handles, inputs, outputs, attrs)
            call.values.append(value)
            if argument.kind == "input":
                call.inputs[int(argument.key)] = value
            elif argument.kind == "output":
                call.outputs[int(argument.key)] = value
        return call


def _nth(tensors: Tensors, index: int) -> TensorDesc | None:
    return tensors[index] if index < len(tensors) else None


def IN(index: int) -> Arg:
    """The ``index``-th catalog input, as an ``aclTensor *`` argument."""
    return Arg("input", index, lambda handles, ins, outs, attrs: handles.tensor(_nth(ins, index)))


def OUT(index: int) -> Arg:
    """The ``index``-th catalog output, as an ``aclTensor *`` argument."""
    return Arg("output", index, lambda handles, ins, outs, attrs: handles.tensor(_nth(outs, index)))


def _attr(name: str, convert: Callable[[CallArguments, Any, Tensors], Any]) -> Arg:
    return Arg("attr", name, lambda handles, ins, outs, attrs: convert(handles, attrs.get(name), ins))


def SCALAR(name: str) -> Arg:
    return _attr(name, lambda handles, value, ins: handles.scalar(value))


def INT(name: str) -> Arg:
    return _attr(name, lambda handles, value, ins: int(value))


def DOUBLE(name: str) -> Arg:
    return _attr(name, lambda handles, value, ins: float(value))


def INT_ARRAY(name: str) -> Arg:
    return _attr(name, lambda handles, value, ins: handles.int_array([value] if isinstance(value, int) else value))


def DTYPE(name: str) -> Arg:
    return _attr(name, lambda handles, value, ins: int(as_dtype(value)))


def _permutation(handles: CallArguments, value: Any, ins: Tensors) -> Any:
    source = _nth(ins, 0)
    rank = source.ndim if source is not None else 0
    return handles.int_array([int(d) % rank if rank else int(d) for d in value])


_APPROXIMATE = {0: 0, 1: 1, "none": 0, "tanh": 1}


def _approximate(handles: CallArguments, value: Any, ins: Tensors) -> int:
    return _APPROXIMATE[value.lower() if isinstance(value, str) else int(value)]


def _row(op: str, *arguments: Arg) -> tuple[str, OpBinding]:
    return op, OpBinding(op, arguments)


def BOOL(name: str) -> Arg:
    return _attr(name, lambda handles, value, ins: bool(value))


def _shape_dim(name: str, reduce: Callable[[tuple[int, ...]], int]) -> Arg:
    """An int64 that restates the first input's shape (GroupNorm's N, C, HxW)."""
    def convert(handles: CallArguments, value: Any, ins: Tensors) -> int:
        source = _nth(ins, 0)
        return int(value) if value is not None else reduce(source.shape if source is not None else ())
    return _attr(name, convert)


def _stride_or_kernel(handles: CallArguments, value: Any, ins: Tensors, attrs: Mapping[str, Any]) -> Any:
    stride = attrs.get("stride")
    return handles.int_array(stride if stride not in (None, []) else attrs.get("kernelSize"))


def _product(shape: tuple[int, ...]) -> int:
    total = 1
    for size in shape:
        total *= size
    return total


_UNARY = ("Relu", "Gelu", "Silu", "Sigmoid", "Tanh", "Exp", "Selu", "Mish")
_PRODUCTS = ("Matmul", "Mm", "BatchMatMul")

#: Catalog op name -> binding.
OPS: dict[str, OpBinding] = dict([
    _row("Add", IN(0), IN(1), SCALAR("alpha"), OUT(0)),
    _row("Adds", IN(0), SCALAR("other"), SCALAR("alpha"), OUT(0)),
    _row("Sub", IN(0), IN(1), SCALAR("alpha"), OUT(0)),
    _row("Subs", IN(0), SCALAR("other"), SCALAR("alpha"), OUT(0)),
    _row("Mul", IN(0), IN(1), OUT(0)),
    _row("Muls", IN(0), SCALAR("other"), OUT(0)),
    _row("Div", IN(0), IN(1), OUT(0)),
    _row("Divs", IN(0), SCALAR("other"), OUT(0)),
    *(_row(op, IN(0), OUT(0)) for op in _UNARY),
    _row("GeluV2", IN(0), _attr("approximate", _approximate), OUT(0)),
    _row("Softmax", IN(0), INT("dim"), OUT(0)),
    _row("LayerNorm", IN(0), INT_ARRAY("normalizedShape"), IN(1), IN(2), DOUBLE("eps"), OUT(0), OUT(1), OUT(2)),
    _row("RmsNorm", IN(0), IN(1), DOUBLE("epsilon"), OUT(0), OUT(1)),
    *(_row(op, IN(0), IN(1), OUT(0), INT("cubeMathType")) for op in _PRODUCTS),
    _row("Addmm", IN(0), IN(1), IN(2), SCALAR("beta"), SCALAR("alpha"), OUT(0), INT("cubeMathType")),
    _row("Cast", IN(0), DTYPE("dtype"), OUT(0)),
    _row("Permute", IN(0), _attr("dims", _permutation), OUT(0)),
    _row("Embedding", IN(0), IN(1), OUT(0)),
    _row("InplaceCopy", OUT(0), IN(0)),
    # issue 26: what a decoder step needs (the toy GPT of aclpipe.decode.toy_model; the catalog's
    # Where is aclnnSWhere), and the decoder's cache write (aclpipe/decode/cache_graph.py)
    _row("Minimum", IN(0), IN(1), OUT(0)),
    _row("Neg", IN(0), OUT(0)),
    _row("LogicalAnd", IN(0), IN(1), OUT(0)),
    _row("IndexSelect", IN(0), INT("dim"), IN(1), OUT(0)),
    ("Where", OpBinding("SWhere", (IN(0), IN(1), IN(2), OUT(0)))),
    _row("InplaceScatterUpdate", OUT(0), IN(0), IN(1), INT("axis")),
    # issue 14 (prototypes in cdefs.PHASE_ONE)
    _row("Elu", IN(0), SCALAR("alpha"), SCALAR("scale"), SCALAR("inputScale"), OUT(0)),
    _row("Celu", IN(0), SCALAR("alpha"), OUT(0)),
    _row("Softplus", IN(0), SCALAR("beta"), SCALAR("threshold"), OUT(0)),
    _row("Triu", IN(0), INT("diagonal"), OUT(0)),
    _row("Tril", IN(0), INT("diagonal"), OUT(0)),
    _row("Cumsum", IN(0), INT("dim"), _attr("dtype", lambda handles, value, ins: int(as_dtype(
        value if value is not None else _nth(ins, 0).dtype))), OUT(0)),  # type: ignore[union-attr]
    _row("CumsumV2", IN(0), INT("dim"), BOOL("exclusive"), BOOL("reverse"), OUT(0)),
    _row("OneHot", IN(0), INT("numClasses"), IN(1), IN(2), INT("axis"), OUT(0)),
    _row("Scatter", IN(0), INT("dim"), IN(1), IN(2), INT("reduce"), OUT(0)),
    _row("GroupNorm", IN(0), IN(1), IN(2), _shape_dim("N", lambda shape: shape[0]),
         _shape_dim("C", lambda shape: shape[1]), _shape_dim("HxW", lambda shape: _product(shape[2:])), INT("group"),
         DOUBLE("eps"), OUT(0), OUT(1), OUT(2)),
    _row("MaxPool2dWithIndices", IN(0), INT_ARRAY("kernelSize"),
         Arg("attr", "stride", lambda handles, ins, outs, attrs: _stride_or_kernel(handles, None, ins, attrs)),
         INT_ARRAY("padding"), INT_ARRAY("dilation"), BOOL("ceilMode"), OUT(0), OUT(1)),
])
