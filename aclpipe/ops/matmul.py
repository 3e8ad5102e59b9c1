"""Matrix products on the cube unit: Matmul, BatchMatMul, Mm, Addmm.

Semantics follow PyTorch (``torch.matmul``, ``torch.bmm``, ``torch.mm``, ``torch.addmm``);
every op takes ``cubeMathType`` (aclnn's ``int8_t``, 0..4, default 0).  On float32 inputs the
simulator, which models an Atlas A2 part, applies it as that part does
(reference/acl_api.md section 3):

- 0 KEEP_DTYPE and 4 USE_FP32_ADD: exact float32 products;
- 1 ALLOW_FP32_DOWN_PRECISION and 3 USE_HF32: operands rounded to HF32 (11 mantissa bits);
- 2 USE_FP16: operands rounded to float16.

float16 and bfloat16 operands ignore the mode: they are widened to float32, multiplied with
float32 accumulation, and rounded once when stored.

The workspace is real.  A matrix operand that is not contiguous (transposed, sliced) gets
a region of the workspace; the kernel copies it there and multiplies from that copy, so a
short workspace is refused at launch and a workspace shared by unordered launches races.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..dtypes import DType
from ..tensor import TensorDesc
from .base import Bind, Kernel, OpPlan, OpSpec, op_error
from .checks import (
    FLOATS,
    broadcast_shapes,
    compute_view,
    need,
    need_dtype,
    need_output,
    need_rank,
    need_same_dtype,
    scratch_layout,
    scratch_view,
    store,
)
from .registry import register

__all__ = [
    "CUBE_MATH_TYPES",
    "Staging",
    "cube_math_type",
    "cube_operand",
    "matmul_shape",
    "plan_staging",
    "round_to_hf32",
    "rows_product",
    "staged",
]

#: aclnn ``cubeMathType`` values and their names.
CUBE_MATH_TYPES = {0: "KEEP_DTYPE", 1: "ALLOW_FP32_DOWN_PRECISION", 2: "USE_FP16", 3: "USE_HF32",
                   4: "USE_FP32_ADD"}


def cube_math_type(op: str, attrs: Mapping[str, Any]) -> int:
    """The validated ``cubeMathType`` attribute (default 0, KEEP_DTYPE)."""
    value = attrs.get("cubeMathType", 0)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value not in CUBE_MATH_TYPES:
        names = ", ".join(f"{code} {name}" for code, name in CUBE_MATH_TYPES.items())
        raise op_error(op, "cubeMathType", f"an int8 in 0..4 ({names})", repr(value))
    return int(value)


def round_to_hf32(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to HF32 (1 sign, 8 exponent, 11 mantissa bits), nearest."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    bits = values.view(np.uint32)
    rounded = ((bits + np.uint32(0x800)) & np.uint32(0xFFFFF000)).view(np.float32)
    # Rounding NaN/inf bit patterns could carry into the sign: keep non-finite values as they are.
    return np.where(np.isfinite(values), rounded, values)


def cube_operand(array: np.ndarray, dtype: DType, mode: int) -> np.ndarray:
    """An operand as the cube unit reads it: compute dtype, rounded as ``mode`` says."""
    values = compute_view(array, dtype)
    if dtype != DType.float32:
        return values
    if mode == 2:
        return values.astype(np.float16).astype(np.float32)
    if mode in (1, 3):
        return round_to_hf32(values)
    return values


# -- workspace staging of non-contiguous operands ------------------------------------------
@dataclass(frozen=True)
class Staging:
    """Where the contiguous copy of input ``index`` lives in the workspace."""

    index: int
    offset: int


def plan_staging(inputs: Sequence[TensorDesc | None], indices: Sequence[int]) -> tuple[list[Staging], int]:
    """Workspace regions for the non-contiguous ones among ``inputs[indices]``, and the total size."""
    chosen = [i for i in indices if (t := inputs[i]) is not None and t.numel and not t.is_contiguous]
    total, offsets = scratch_layout(*(inputs[i].nbytes for i in chosen))  # type: ignore[union-attr]
    return [Staging(index, offset) for index, offset in zip(chosen, offsets)], total


def staged(views: Sequence[np.ndarray | None], workspace: np.ndarray | None,
           stagings: Sequence[Staging]) -> list[np.ndarray | None]:
    """``views`` with each staged operand replaced by its contiguous copy in the workspace."""
    result = list(views)
    for staging in stagings:
        view = result[staging.index]
        assert view is not None
        region = scratch_view(workspace, staging.offset, view.shape, view.dtype)
        np.copyto(region, view)
        result[staging.index] = region
    return result


# -- shapes -------------------------------------------------------------------------------
def matmul_shape(op: str, names: tuple[str, str], a: tuple[int, ...],
                 b: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    """``torch.matmul`` output shape of ``a @ b`` and the flops ``2*M*N*K*batch``."""
    for name, shape in zip(names, (a, b)):
        if not shape:
            raise op_error(op, name, "at least 1 dim", "a 0-d tensor")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise op_error(op, names[1], f"{a2[-1]} rows to match {names[0]}{list(a)}'s last dim",
                       f"{names[1]}{list(b)}")
    batch = broadcast_shapes(op, [(f"{names[0]} batch dims", a2[:-2]), (f"{names[1]} batch dims", b2[:-2])])
    out = batch + (a2[-2:-1] if len(a) > 1 else ()) + (b2[-1:] if len(b) > 1 else ())
    return out, 2 * a2[-2] * b2[-1] * a2[-1] * math.prod(batch)


# -- the ops --------------------------------------------------------------------------------
def rows_product(a: np.ndarray, b: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """``np.matmul(a, b, out=out)``, a batch of ``a`` against one matrix ``b`` as one BLAS call
    over all of its rows: numpy calls BLAS once per batch entry, slower for the few rows of a
    transformer's batch (a BERT layer's 32 x 1536 x 384: 206 us against 283 us)."""
    if b.ndim != 2 or a.ndim < 3 or not a.flags.c_contiguous or (out is not None and not out.flags.c_contiguous):
        return np.matmul(a, b, out=out)
    rows = np.matmul(a.reshape(-1, a.shape[-1]), b, out=None if out is None else out.reshape(-1, b.shape[-1]))
    return out if out is not None else rows.reshape(a.shape[:-1] + b.shape[-1:])


class _CubeProduct(OpSpec):
    """Shared phase one and kernel: ``out = alpha * (A @ B) + beta * C`` with optional C."""

    inputs: tuple[str, ...] = ("self", "mat2")
    attrs = {"cubeMathType": 0}
    matrix_indices = (0, 1)  # where A and B sit among the inputs
    ranks: tuple[int, ...] | None = None  # allowed operand ranks (None: torch.matmul's)

    def _operands(self, inputs: Sequence[TensorDesc | None]) -> list[TensorDesc]:
        if len(inputs) != len(self.inputs):
            raise op_error(self.name, "inputs", f"{len(self.inputs)} tensors {self.inputs}", len(inputs))
        tensors = [need(self.name, name, tensor) for name, tensor in zip(self.inputs, inputs)]
        for name, tensor in zip(self.inputs, tensors):
            need_dtype(self.name, name, tensor, FLOATS)
        need_same_dtype(self.name, self.inputs, tensors)
        if self.ranks is not None:
            for index in self.matrix_indices:
                need_rank(self.name, self.inputs[index], tensors[index], self.ranks)
        return tensors

    def _shape(self, tensors: list[TensorDesc], attrs: Mapping[str, Any]) -> tuple[tuple[int, ...], int]:
        a_index, b_index = self.matrix_indices
        names = (self.inputs[a_index], self.inputs[b_index])
        return matmul_shape(self.name, names, tensors[a_index].shape, tensors[b_index].shape)

    def _scales(self, attrs: Mapping[str, Any]) -> tuple[float, float]:
        return 1.0, 0.0  # (alpha, beta)

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        tensors = self._operands(inputs)
        cube_math_type(self.name, attrs)
        self._scales(attrs)
        shape, _ = self._shape(tensors, attrs)
        return [TensorDesc.contiguous(shape, tensors[0].dtype)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        tensors = self._operands(inputs)
        mode = cube_math_type(self.name, attrs)
        shape, flops = self._shape(tensors, attrs)
        alpha, beta = self._scales(attrs)
        out = need_output(self.name, "out", outputs[0] if outputs else None, shape, tensors[0].dtype)
        stagings, workspace_size = plan_staging(tensors, self.matrix_indices)
        traffic = sum(t.nbytes for t in tensors) + out.nbytes + 2 * sum(tensors[s.index].nbytes for s in stagings)
        kernel = self._kernel(tensors[0].dtype, mode, alpha, beta, stagings)
        bind = self._bind(kernel, tensors[0].dtype, mode, alpha, beta, stagings)
        return OpPlan(kernel, workspace_size, float(flops), float(traffic), cube=True,
                      variant=CUBE_MATH_TYPES[mode], notes={"staged": [s.index for s in stagings]}, bind=bind)

    def _bind(self, kernel: Kernel, dtype: DType, mode: int, alpha: float, beta: float,
              stagings: list[Staging]) -> Bind:
        """Exact fp32 products (modes 0 and 4) into an fp32 output: the staging regions and
        operands found once, then ``kernel``'s numpy calls (the addend, when there is one, added
        in place after the product: the same two roundings); anything else runs ``kernel``."""
        a_index, b_index = self.matrix_indices
        addend_index = 0 if len(self.inputs) == 3 and beta != 0.0 else None

        def bind(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray | None],
                 workspace: np.ndarray | None) -> Callable[[], None]:
            out = outputs[0]
            addend = inputs[addend_index] if addend_index is not None else None
            if (dtype != DType.float32 or mode not in (0, 4) or out is None or out.dtype != np.float32
                    or (addend is not None and (addend.dtype != np.float32 or np.may_share_memory(addend, out)))):
                return functools.partial(kernel, inputs, outputs, workspace)
            operands = list(inputs)
            copies = []
            for staging in stagings:
                view = operands[staging.index]
                assert view is not None
                region = scratch_view(workspace, staging.offset, view.shape, view.dtype)
                copies.append((region, view))
                operands[staging.index] = region
            a, b = operands[a_index], operands[b_index]
            assert a is not None and b is not None
            scale = np.float32(beta)

            def run() -> None:
                for region, view in copies:
                    np.copyto(region, view)
                rows_product(a, b, out)
                if alpha != 1.0:
                    np.multiply(out, np.float32(alpha), out=out)
                if addend is not None:
                    np.add(out, addend if beta == 1.0 else scale * addend, out=out)

            return run

        return bind

    def _kernel(self, dtype: DType, mode: int, alpha: float, beta: float, stagings: list[Staging]) -> Kernel:
        a_index, b_index = self.matrix_indices
        addend_index = 0 if len(self.inputs) == 3 else None
        direct = addend_index is None or beta == 0.0

        def kernel(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            views = staged(inputs, workspace, stagings)
            a, b, out = views[a_index], views[b_index], outputs[0]
            assert a is not None and b is not None and out is not None
            # Straight into the output when nothing is added (an addend may be the output itself).
            target = out if direct and out.dtype == np.float32 else None
            product = rows_product(cube_operand(a, dtype, mode), cube_operand(b, dtype, mode), target)
            if alpha != 1.0:
                product *= np.float32(alpha)
            if not direct:
                addend = views[addend_index] if addend_index is not None else None
                if addend is not None:
                    product = product + np.float32(beta) * compute_view(addend, dtype)
            if target is None:
                store(out, product)

        return kernel


class Matmul(_CubeProduct):
    """``torch.matmul``: 1-D operands are promoted and their dim removed; batch dims broadcast."""

    name = "Matmul"


class BatchMatMul(_CubeProduct):
    """``torch.bmm``: ``[B, M, K] @ [B, K, N] -> [B, M, N]`` (batch sizes must be equal)."""

    name = "BatchMatMul"
    ranks = (3,)

    def _shape(self, tensors: list[TensorDesc], attrs: Mapping[str, Any]) -> tuple[tuple[int, ...], int]:
        if tensors[0].shape[0] != tensors[1].shape[0]:
            raise op_error(self.name, "mat2", f"batch size {tensors[0].shape[0]} (same as self)",
                           f"mat2{list(tensors[1].shape)}")
        return super()._shape(tensors, attrs)


class Mm(_CubeProduct):
    """``torch.mm``: 2-D by 2-D only."""

    name = "Mm"
    ranks = (2,)


class Addmm(_CubeProduct):
    """``torch.addmm``: ``out = beta * self + alpha * (mat1 @ mat2)``; ``self`` broadcasts to
    ``[M, N]``; with ``beta == 0`` ``self`` is ignored (NaN in it does not propagate)."""

    name = "Addmm"
    inputs = ("self", "mat1", "mat2")
    attrs = {"beta": 1.0, "alpha": 1.0, "cubeMathType": 0}
    matrix_indices = (1, 2)
    ranks = (2,)

    def _shape(self, tensors: list[TensorDesc], attrs: Mapping[str, Any]) -> tuple[tuple[int, ...], int]:
        shape, flops = super()._shape(tensors, attrs)
        addend = tensors[0].shape
        if len(addend) > 2 or broadcast_shapes(self.name, [("self", addend), ("mat1 @ mat2", shape)]) != shape:
            raise op_error(self.name, "self", f"a shape that broadcasts to {list(shape)}", list(addend))
        return shape, flops

    def _scales(self, attrs: Mapping[str, Any]) -> tuple[float, float]:
        scales = []
        for key in ("alpha", "beta"):
            value = attrs.get(key, 1.0)
            value = 1.0 if value is None else value
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise op_error(self.name, key, "a real number", repr(value))
            scales.append(float(value))
        return scales[0], scales[1]


for _spec in (Matmul(), BatchMatMul(), Mm(), Addmm()):
    register(_spec)
