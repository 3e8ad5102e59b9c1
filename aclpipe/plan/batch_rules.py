"""Where each catalog op puts the batch axis: one rule per op family (see :mod:`.batch_axis`).

A rule gets one node of a bound graph with, per input, the axis that carries the batch (None:
the input does not depend on the batch) and answers, per output, the axis the batch lands on,
or raises :class:`BatchBreak` saying why the node lets one row's values reach another row
(a reduction, a scan or a normalization over the batch axis, a contraction of it, a reshape
that folds it into other dims, an operand indexed by it that does not carry it, ...).

A rule may only answer when row ``i`` of every output is computed from row ``i`` of the
batched inputs and from unbatched inputs alone.  An op without a rule breaks the batch: new
ops stay unbatched until someone writes down why their rows are independent.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..tensor import TensorDesc

__all__ = ["RULES", "BatchBreak", "Site"]

Axis = int | None


class BatchBreak(Exception):
    """A node mixes, reduces or moves the batch rows; the message says how."""


@dataclass(frozen=True)
class Site:
    """One node as a rule sees it: descriptors and batch axes of its inputs (``None`` for an
    optional input not given), descriptors of its outputs, attributes, and the batch size."""

    op: str
    inputs: tuple[TensorDesc | None, ...]
    axes: tuple[Axis, ...]
    outputs: tuple[TensorDesc | None, ...]
    attrs: Mapping[str, Any]
    rows: int

    def batched(self) -> list[int]:
        """Indices of the inputs that carry the batch."""
        return [index for index, axis in enumerate(self.axes) if axis is not None]

    def only(self, index: int) -> int:
        """The batch axis of input ``index``, refusing when any other input carries the batch too."""
        others = [i for i in self.batched() if i != index]
        if others:
            raise BatchBreak(f"input {others[0]} carries the batch as well as input {index}, and {self.op} "
                             "combines them across rows")
        axis = self.axes[index]
        if axis is None:
            raise BatchBreak(f"the batch reaches {self.op} through an input that indexes or weights it")
        return axis

    def dim(self, name: str, default: Any, rank: int) -> int:
        """Attribute ``name`` as a non-negative axis of a rank-``rank`` tensor."""
        value = self.attrs.get(name, default)
        return int(value) % max(rank, 1)

    def dims(self, name: str, rank: int) -> set[int]:
        """Attribute ``name`` (None or empty: every axis) as a set of non-negative axes."""
        value = self.attrs.get(name)
        if value is None or (isinstance(value, (list, tuple)) and not value):
            return set(range(rank))
        items = value if isinstance(value, (list, tuple)) else [value]
        return {int(item) % max(rank, 1) for item in items}

    def rank(self, index: int) -> int:
        """The rank of input ``index`` (0 when it is not given)."""
        desc = self.inputs[index]
        return 0 if desc is None else desc.ndim


Rule = Callable[[Site], tuple[Axis, ...]]


def _all_outputs(site: Site, axis: Axis) -> tuple[Axis, ...]:
    return tuple(axis for _ in site.outputs)


def _unbatched(site: Site) -> tuple[Axis, ...] | None:
    """Outputs of a node no batched value reaches: they do not depend on the batch."""
    return None if site.batched() else _all_outputs(site, None)


def broadcast(site: Site) -> tuple[Axis, ...]:
    """Elementwise with numpy broadcasting: every batched operand must put the batch on the same
    output axis, and every other operand must be 1 (or absent) there, so row i reads row i."""
    rank = max((desc.ndim for desc in site.inputs if desc is not None), default=0)
    placed: set[int] = set()
    for desc, axis in zip(site.inputs, site.axes):
        if desc is not None and axis is not None:
            placed.add(rank - desc.ndim + axis)
    if len(placed) != 1:
        raise BatchBreak(f"its operands carry the batch on different axes {sorted(placed)}, so {site.op} "
                         "pairs rows of one request with rows of another")
    (out_axis,) = placed
    for index, (desc, axis) in enumerate(zip(site.inputs, site.axes)):
        at = out_axis - (rank - desc.ndim) if desc is not None else -1
        if desc is not None and axis is None and at >= 0 and desc.shape[at] != 1:
            raise BatchBreak(f"input {index} (shape {list(desc.shape)}) is not batched but has {desc.shape[at]} "
                             f"entries along the batch axis {out_axis}, so each row reads another row's entry")
    return _all_outputs(site, out_axis)


def unary(site: Site) -> tuple[Axis, ...]:
    """One tensor in, same shape out, each element from its own: the batch stays put."""
    return _all_outputs(site, site.only(0))


def along_dim(dim_attr: str, default: int, what: str) -> Rule:
    """Shape kept, values combined along ``dim_attr`` (a scan, a softmax, a top-k)."""
    def rule(site: Site) -> tuple[Axis, ...]:
        axis = site.only(0)
        if site.dim(dim_attr, default, site.rank(0)) == axis:
            raise BatchBreak(f"{site.op} {what} along dim {axis}, the batch axis")
        return _all_outputs(site, axis)
    return rule


def reduce(dims_attr: str, keep_attr: str, single: bool = False) -> Rule:
    """A reduction: the batch axis must survive it, and moves left past the dims it drops."""
    def rule(site: Site) -> tuple[Axis, ...]:
        axis, rank = site.only(0), site.rank(0)
        dims = {site.dim(dims_attr, 0, rank)} if single else site.dims(dims_attr, rank)
        if axis in dims:
            raise BatchBreak(f"{site.op} reduces the batch axis {axis} (dims {sorted(dims)})")
        kept = bool(site.attrs.get(keep_attr, False))
        return _all_outputs(site, axis if kept else axis - sum(1 for d in dims if d < axis))
    return rule


def trailing_norm(count: Callable[[Site], int], what: str) -> Rule:
    """A normalization over the last ``count(site)`` dims; weights must not carry the batch."""
    def rule(site: Site) -> tuple[Axis, ...]:
        axis = site.only(0)
        if axis >= site.rank(0) - count(site):
            raise BatchBreak(f"{site.op} normalizes over {what}, which include the batch axis {axis}")
        return _all_outputs(site, axis)
    return rule


def samples_first(site: Site) -> tuple[Axis, ...]:
    """NC... ops (convolutions, pools, group norm): each sample along dim 0 is computed alone."""
    axis = site.only(0)
    if axis != 0:
        raise BatchBreak(f"{site.op} works per sample along dim 0, but the batch is on axis {axis}")
    if site.op == "BatchNorm" and site.attrs.get("training", False):
        raise BatchBreak("BatchNorm in training mode takes its statistics over the samples")
    return _all_outputs(site, 0)


def matmul(site: Site) -> tuple[Axis, ...]:
    """``torch.matmul`` broadcasting: the batch may be rows of ``self``, columns of ``mat2`` or a
    broadcast batch dim of both; never the contracted dim."""
    first, second = (1, 2) if site.op == "Addmm" else (0, 1)
    a, b = site.inputs[first], site.inputs[second]
    if a is None or b is None:
        raise BatchBreak(f"{site.op} without both matrices")
    if any(axis is not None for axis in site.axes[second + 1:]):  # MatmulInteger's zero points
        raise BatchBreak(f"{site.op}'s zero points carry the batch")
    stack = max(a.ndim - 2, b.ndim - 2, 0)
    placed: dict[int, int] = {}
    for index, desc, role in ((first, a, "self"), (second, b, "mat2")):
        axis = site.axes[index]
        if axis is None:
            continue
        if desc.ndim == 1 or axis == (desc.ndim - 1 if role == "self" else desc.ndim - 2):
            raise BatchBreak(f"{site.op} contracts the batch axis {axis} of {role} {list(desc.shape)}")
        if role == "self" and axis == desc.ndim - 2:
            placed[index] = stack
        elif role == "mat2" and axis == desc.ndim - 1:
            placed[index] = stack + (1 if a.ndim >= 2 else 0)
        else:
            placed[index] = stack - (desc.ndim - 2) + axis
    if len(set(placed.values())) != 1:
        raise BatchBreak(f"{site.op} multiplies rows of one request with columns of another")
    (out_axis,) = set(placed.values())
    if out_axis < stack:  # a broadcast stack dim: the unbatched matrix must be 1 (or absent) there
        for desc, index in ((a, first), (b, second)):
            at = out_axis - (stack - (desc.ndim - 2))
            if site.axes[index] is None and desc.ndim > 2 and at >= 0 and desc.shape[at] != 1:
                raise BatchBreak(f"an unbatched matrix {list(desc.shape)} has {desc.shape[at]} entries along "
                                 f"the batch axis {out_axis}")
    if site.op == "Addmm":
        _addend_fits(site, out_axis)
    return _all_outputs(site, out_axis)


def _addend_fits(site: Site, out_axis: int) -> None:
    """Addmm's ``self`` is broadcast onto the product: batched on the same axis, or 1 there."""
    desc, axis, out = site.inputs[0], site.axes[0], site.outputs[0]
    if desc is None or out is None:
        return
    at = out_axis - (out.ndim - desc.ndim)
    if axis is None and at >= 0 and desc.shape[at] != 1:
        raise BatchBreak(f"the unbatched addend {list(desc.shape)} has {desc.shape[at]} entries along the batch axis")
    if axis is not None and at != axis:
        raise BatchBreak("the addend carries the batch on another axis than the product")


def reshape(site: Site) -> tuple[Axis, ...]:
    """A reshape keeps the batch when the elements before it and the batch dim are unchanged, so
    each request's block of elements stays one block (row-major order)."""
    axis, source, out = site.only(0), site.inputs[0], site.outputs[0]
    assert source is not None and out is not None
    before = math.prod(source.shape[:axis])
    for position in range(out.ndim):
        if math.prod(out.shape[:position]) == before and out.shape[position] == source.shape[axis]:
            return (position,)
    raise BatchBreak(f"{site.op} {list(source.shape)} -> {list(out.shape)} folds the batch axis {axis} "
                     "into other dims")


def permute(site: Site) -> tuple[Axis, ...]:
    """Transpose and Permute move the batch axis where the permutation sends it."""
    axis, rank = site.only(0), site.rank(0)
    if site.op == "Transpose":
        first, second = site.dim("dim0", 0, rank), site.dim("dim1", 1, rank)
        return (second if axis == first else first if axis == second else axis,)
    order = [int(d) % rank for d in site.attrs["dims"]]
    return (order.index(axis),)


def expand(site: Site) -> tuple[Axis, ...]:
    """Expand adds leading dims and stretches size-1 dims; the batch dim (never 1 here) stays."""
    source, out = site.inputs[0], site.outputs[0]
    assert source is not None and out is not None
    return (site.only(0) + out.ndim - source.ndim,)


def cut(dim_attr: str, default: int) -> Rule:
    """Slice and Split cut along a dim: any but the batch axis."""
    def rule(site: Site) -> tuple[Axis, ...]:
        axis = site.only(0)
        if site.dim(dim_attr, default, site.rank(0)) == axis:
            raise BatchBreak(f"{site.op} cuts along the batch axis {axis}")
        return _all_outputs(site, axis)
    return rule


def cat(site: Site) -> tuple[Axis, ...]:
    """Every operand batched on the same axis, joined along another."""
    if len(set(site.axes)) != 1:
        raise BatchBreak("Cat joins batched and unbatched (or differently batched) tensors")
    axis = site.axes[0]
    assert axis is not None
    if site.dim("dim", 0, site.rank(0)) == axis:
        raise BatchBreak(f"Cat joins along the batch axis {axis}")
    return (axis,)


def indexing(site: Site) -> tuple[Axis, ...]:
    """Gather, IndexSelect and Embedding: the batch may ride on the data (not along the indexed
    dim) or, for IndexSelect and Embedding, on the indices (picking from unbatched data)."""
    data, index = site.axes
    if site.op == "Embedding":
        data, index = index, data  # inputs are (weight, indices)
        if index is not None:
            raise BatchBreak("Embedding's table carries the batch")
        return (data,)
    rank = site.rank(0)
    dim = site.dim("dim", 0, rank)
    if data is not None and data == dim:
        raise BatchBreak(f"{site.op} picks along the batch axis {dim}")
    if site.op == "Gather":  # torch.gather reads self where index says, index and self row for row
        if data is None or index != data:
            raise BatchBreak("Gather needs self and index batched on the same axis")
        return (data,)
    if data is not None and index is not None:
        raise BatchBreak("IndexSelect with both data and index batched")
    return (data if data is not None else dim,)


def one_hot(site: Site) -> tuple[Axis, ...]:
    """OneHot inserts the class axis; the batch moves right past it."""
    axis, rank = site.only(0), site.rank(0)
    inserted = int(site.attrs.get("axis", -1)) % (rank + 1)
    return (axis if axis < inserted else axis + 1,)


def quantize(site: Site) -> tuple[Axis, ...]:
    """Per-tensor or per-channel (de/re)quantization: elementwise unless the scale runs along the batch."""
    axis = site.only(0)
    scale = site.inputs[1]
    if scale is not None and scale.numel > 1 and site.dim("axis", 1, site.rank(0)) == axis:
        raise BatchBreak(f"{site.op}'s scale runs along the batch axis {axis}")
    return _all_outputs(site, axis)


def prelu(site: Site) -> tuple[Axis, ...]:
    axis = site.only(0)
    weight = site.inputs[1]
    channel = 1 if site.rank(0) >= 2 else 0
    if weight is not None and weight.numel > 1 and axis == channel:
        raise BatchBreak(f"Prelu's weight runs along the batch axis {axis} (the channels)")
    return (axis,)


def resize(site: Site) -> tuple[Axis, ...]:
    """Resize copies a dim whose size and scale do not change; any other is resampled."""
    axis, source, out = site.only(0), site.inputs[0], site.outputs[0]
    assert source is not None and out is not None
    scales = site.attrs.get("scales")
    if (out.shape[axis] != source.shape[axis] or (scales is not None and float(scales[axis]) != 1.0)
            or site.attrs.get("coordinateTransformationMode") == "tf_crop_and_resize"):
        raise BatchBreak(f"Resize resamples the batch axis {axis}")
    return (axis,)


def pad(site: Site) -> tuple[Axis, ...]:
    axis = site.only(0)
    pairs = list(site.attrs.get("paddings") or ())
    if any(int(v) for v in pairs[2 * axis: 2 * axis + 2]):
        raise BatchBreak(f"PadV3 pads the batch axis {axis}")
    return (axis,)  # every mode reads only along the dims it pads


def triangle(site: Site) -> tuple[Axis, ...]:
    axis = site.only(0)
    if axis >= site.rank(0) - 2:
        raise BatchBreak(f"{site.op} masks the last two dims, which include the batch axis {axis}")
    return (axis,)


def einsum(site: Site) -> tuple[Axis, ...]:
    """Each batched operand's batch letter must be one letter, kept in the output and absent from
    unbatched operands (which would index it)."""
    equation = str(site.attrs.get("equation", "")).replace(" ", "")
    if "..." in equation or "->" not in equation:
        raise BatchBreak("Einsum with '...' or an implicit output is not analysed")
    operands, output = equation.split("->")
    terms = operands.split(",")
    letters = {terms[i][axis] for i, axis in enumerate(site.axes) if axis is not None}
    if len(letters) != 1:
        raise BatchBreak(f"Einsum's operands carry the batch under different letters {sorted(letters)}")
    (letter,) = letters
    if any(terms[i].count(letter) > 1 for i, axis in enumerate(site.axes) if axis is not None):
        raise BatchBreak(f"an Einsum operand repeats the batch letter {letter!r} (a diagonal across requests)")
    if letter not in output:
        raise BatchBreak(f"Einsum sums over the batch letter {letter!r}")
    if any(letter in terms[i] for i, axis in enumerate(site.axes) if axis is None):
        raise BatchBreak(f"an unbatched Einsum operand is indexed by the batch letter {letter!r}")
    return (output.index(letter),)


def recurrent(site: Site) -> tuple[Axis, ...]:
    """RNN, GRU and LSTM run each sequence of the batch alone: ``X``, ``sequenceLens`` and the
    initial states may carry the batch on their B axis (which ``layout`` places), weights not."""
    first = bool(site.attrs.get("layout") or 0)  # layout=1: [B, T, ...]
    state = 0 if first else 1
    # X, W, R, B, sequenceLens, initialH, initialC, P: where each may carry the batch.
    allowed = (0 if first else 1, None, None, None, 0, state, state, None)
    for index, axis in enumerate(site.axes):
        if axis is not None and axis != allowed[index]:
            raise BatchBreak(f"{site.op} input {index} carries the batch on axis {axis}, not on its batch "
                             f"axis {allowed[index]} (layout={int(first)})")
    return tuple(axis for axis in (0 if first else 2, state, state)[:len(site.outputs)])


def _norm_count(site: Site) -> int:
    shape = site.attrs.get("normalizedShape")
    return len(shape) if isinstance(shape, (list, tuple)) else 1


def _gamma_count(site: Site) -> int:
    gamma = site.inputs[1]
    return gamma.ndim if gamma is not None else 1


_UNARY = ("Abs Ceil Celu Clamp Cast Elu Erf Exp Floor Gelu GeluV2 Hardsigmoid Hardswish InplaceCopy LeakyRelu "
          "Log LogicalNot Mish Neg Reciprocal Relu Round Rsqrt Selu Sigmoid Sign Silu Softplus Sqrt Tanh Adds "
          "Subs Muls Divs")
_BROADCAST = ("Add Sub Mul Div Fmod Remainder Maximum Minimum Pow EqTensor NeTensor GtTensor GeTensor LtTensor "
              "LeTensor LogicalAnd LogicalOr LogicalXor Where")
_SAMPLES = ("Convolution ConvTranspose ConvolutionInteger AvgPool2d AvgPool3d MaxPool2d MaxPool3d MaxPool2dWithIndices "
            "AdaptiveAvgPool2d GroupNorm BatchNorm LocalResponseNorm")

#: Op name -> its rule.  Ops missing here break the batch (module docstring).
RULES: dict[str, Rule] = {
    **dict.fromkeys(_UNARY.split(), unary),
    **dict.fromkeys(_BROADCAST.split(), broadcast),
    **dict.fromkeys(_SAMPLES.split(), samples_first),
    **dict.fromkeys(("Matmul", "BatchMatMul", "Mm", "Addmm", "MatmulInteger"), matmul),
    **dict.fromkeys(("Reshape", "Flatten", "Squeeze", "Unsqueeze"), reshape),
    **dict.fromkeys(("Transpose", "Permute"), permute),
    **dict.fromkeys(("Gather", "IndexSelect", "Embedding"), indexing),
    **dict.fromkeys(("Quantize", "Dequantize", "Requantize"), quantize),
    "Softmax": along_dim("dim", -1, "normalizes"),
    "LogSoftmax": along_dim("dim", -1, "normalizes"),
    "Cumsum": along_dim("dim", 0, "accumulates"),
    "CumsumV2": along_dim("dim", 0, "accumulates"),
    "Topk": along_dim("dim", -1, "ranks"),
    "ReduceSum": reduce("dims", "keepDims"),
    "Mean": reduce("dim", "keepDim"),
    "Prod": reduce("dim", "keepDim"),
    "Amax": reduce("dim", "keepdim"),
    "Amin": reduce("dim", "keepdim"),
    "ArgMax": reduce("dim", "keepdim", single=True),
    "ArgMin": reduce("dim", "keepdim", single=True),
    "LayerNorm": trailing_norm(_norm_count, "its normalizedShape dims"),
    "RmsNorm": trailing_norm(_gamma_count, "the dims of gamma"),
    "Expand": expand,
    "Slice": cut("dim", 0),
    "Split": cut("dim", 0),
    "Cat": cat,
    "OneHot": one_hot,
    "Prelu": prelu,
    "Resize": resize,
    "PadV3": pad,
    "Tril": triangle,
    "Triu": triangle,
    "Einsum": einsum,
    **dict.fromkeys(("RNN", "GRU", "LSTM"), recurrent),
}


def rule_for(op: str) -> Rule | None:
    """The rule of ``op``, or None when the op has none (it then breaks the batch)."""
    return RULES.get(op)


def apply(rule: Rule, site: Site) -> tuple[Axis, ...]:
    """``rule`` at ``site``, or the unbatched answer when no input carries the batch."""
    unbatched = _unbatched(site)
    return unbatched if unbatched is not None else rule(site)

