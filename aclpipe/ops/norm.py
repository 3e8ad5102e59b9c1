"""Normalization: ``LayerNorm``, ``RmsNorm`` and inference-mode ``BatchNorm``.

Each kernel keeps its statistics in fp32 in the workspace (per-row mean and rstd for
LayerNorm, per-row rstd for RmsNorm, per-channel scale and shift for BatchNorm), written and
read back there, so a short workspace is refused at launch and a shared one is a hazard.
Inputs are float32, float16 or bfloat16; fp16/bf16 compute in fp32.  Weights, biases and
running statistics may have the input's dtype or float32.  Statistic outputs
(``meanOutOptional``, ``rstdOutOptional``, ``rstdOut``) are inferred as float32 and may also
have the input's dtype.

- ``LayerNorm(input, weightOptional, biasOptional; normalizedShape, eps=1e-5) -> out,
  meanOutOptional, rstdOutOptional``: ``normalizedShape`` (non-empty) must equal the
  trailing dims of ``input``; the statistics have shape ``[A1..Ai, 1..1]``.  ``infer``
  describes all three outputs; pass None at prepare for the statistics you do not want.
- ``RmsNorm(x, gamma; epsilon=1e-6) -> yOut, rstdOut``: ``gamma``'s shape equals the
  trailing dims of ``x``; ``rstdOut`` (shape ``[A1..Ai, 1..1]``) may be None.
- ``BatchNorm(input, weight, bias, runningMean, runningVar; training=False, momentum, eps=1e-5)
  -> output``: inference only (``training=True`` is 161002), layouts NC, NCL and NCHW with
  channels on dim 1; ``weight``/``bias`` may be None (ones/zeros); ``momentum`` is ignored.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..dtypes import DType, Format
from ..tensor import TensorDesc
from .base import OpPlan, OpSpec, op_error
from .checks import (
    FLOATS,
    argument,
    compute_view,
    kept_view,
    need,
    need_dtype,
    need_output,
    need_rank,
    scratch_layout,
    scratch_view,
    store,
    target_view,
)
from .fp_errors import fp_errors_ignored, ignore_fp_errors
from .registry import register

__all__ = ["BatchNormOp", "LayerNormOp", "RmsNormOp"]


# -- shared checks ------------------------------------------------------------------------------
def _epsilon(op: str, name: str, attrs: Mapping[str, Any], default: float) -> float:
    value = attrs.get(name, default)
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise op_error(op, name, "a finite number >= 0", repr(value))
    return float(value)


def _parameter(op: str, name: str, tensor: TensorDesc | None, shape: tuple[int, ...], dtype: DType,
               *, required: bool) -> TensorDesc | None:
    """An affine parameter or running statistic: exactly ``shape``, dtype ``dtype`` or float32."""
    if tensor is None:
        if required:
            raise op_error(op, name, f"a tensor of shape {list(shape)}", "NULL", null=True)
        return None
    need(op, name, tensor)
    need_dtype(op, name, tensor, {dtype, DType.float32})
    if tuple(tensor.shape) != tuple(shape):
        raise op_error(op, name, f"shape {list(shape)}", list(tensor.shape))
    return tensor


def _optional_output(op: str, name: str, out: TensorDesc | None, shape: tuple[int, ...],
                     dtype: DType) -> TensorDesc | None:
    return None if out is None else need_output(op, name, out, shape, {dtype, DType.float32})


def _trailing(op: str, name: str, x: TensorDesc, shape: tuple[int, ...]) -> tuple[int, int, tuple[int, ...]]:
    """``shape`` must equal the trailing dims of ``x``: returns rows, columns and the
    statistics' shape ``[A1..Ai, 1..1]``."""
    count = len(shape)
    if not 1 <= count <= x.ndim or tuple(x.shape[x.ndim - count:]) != tuple(shape):
        raise op_error(op, name, f"the trailing dims of input {list(x.shape)} (non-empty)", list(shape))
    columns = math.prod(shape)
    rows = math.prod(x.shape[:x.ndim - count])
    return rows, columns, tuple(x.shape[:x.ndim - count]) + (1,) * count


def _flat(array: np.ndarray | None, size: int, fill: float) -> np.ndarray:
    """A parameter (any float dtype) as a flat fp32 vector; ``fill`` when absent."""
    if array is None:
        return np.full(size, fill, dtype=np.float32)
    return array.astype(np.float32, copy=False).reshape(size)


def _scale_shift(values: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None) -> None:
    """``values *= weight; values += bias`` in place over the last axis (absent: 1 and 0)."""
    if weight is not None:
        values *= weight.astype(np.float32, copy=False).reshape(-1)
    if bias is not None:
        values += bias.astype(np.float32, copy=False).reshape(-1)


def _cost(tensors: Sequence[TensorDesc | None], flops_per_element: float, numel: int) -> tuple[float, float]:
    return flops_per_element * numel, float(sum(t.nbytes for t in tensors if t is not None))


# -- LayerNorm -----------------------------------------------------------------------------------
class LayerNormOp(OpSpec):
    """``out = (input - mean) * rstd * weight + bias`` over the trailing ``normalizedShape``."""

    name = "LayerNorm"
    inputs = ("input", "weightOptional", "biasOptional")
    outputs = ("out", "meanOutOptional", "rstdOutOptional")
    attrs = {"normalizedShape": None, "eps": 1e-5}

    def _check(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]
               ) -> tuple[TensorDesc, int, int, tuple[int, ...], float]:
        x = need(self.name, "input", argument(inputs, 0))
        need_dtype(self.name, "input", x, FLOATS)
        normalized = attrs.get("normalizedShape")
        if normalized is None:
            raise op_error(self.name, "normalizedShape", "a non-empty list of ints", "NULL", null=True)
        if isinstance(normalized, (int, np.integer)):
            normalized = [normalized]
        if not isinstance(normalized, (list, tuple)) or not all(
                isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in normalized):
            raise op_error(self.name, "normalizedShape", "a non-empty list of ints", repr(normalized))
        shape = tuple(int(d) for d in normalized)
        rows, columns, stats_shape = _trailing(self.name, "normalizedShape", x, shape)
        for index, name in ((1, "weightOptional"), (2, "biasOptional")):
            _parameter(self.name, name, argument(inputs, index), shape, x.dtype, required=False)
        return x, rows, columns, stats_shape, _epsilon(self.name, "eps", attrs, 1e-5)

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        x, _, _, stats_shape, _ = self._check(inputs, attrs)
        stats = TensorDesc.contiguous(stats_shape, DType.float32)
        return [TensorDesc.contiguous(x.shape, x.dtype), stats, stats]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        x, rows, columns, stats_shape, eps = self._check(inputs, attrs)
        out = need_output(self.name, "out", argument(outputs, 0), x.shape, x.dtype)
        mean_out = _optional_output(self.name, "meanOutOptional", argument(outputs, 1), stats_shape, x.dtype)
        rstd_out = _optional_output(self.name, "rstdOutOptional", argument(outputs, 2), stats_shape, x.dtype)
        workspace_size, (mean_at, rstd_at) = scratch_layout(rows * 4, rows * 4)
        dtype, shape = x.dtype, x.shape

        inverse_columns = 1.0 / columns if columns else math.nan  # an empty row's mean is nan

        def kernel(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            assert ins[0] is not None and outs[0] is not None
            if rows == 0:
                return
            values = compute_view(ins[0], dtype).reshape(rows, columns)
            mean = scratch_view(workspace, mean_at, (rows,), np.float32)
            rstd = scratch_view(workspace, rstd_at, (rows,), np.float32)
            target = target_view(outs[0], (rows, columns), np.float32)
            with ignore_fp_errors():  # an empty normalized shape gives nan, like PyTorch
                np.add.reduce(values, axis=1, out=mean)
                mean *= inverse_columns
                centered = np.subtract(values, mean[:, None], out=target)
                np.add.reduce(np.square(centered), axis=1, out=rstd)  # pairwise, as np.sum
                rstd *= inverse_columns
                rstd += eps
                np.sqrt(rstd, out=rstd)
                np.reciprocal(rstd, out=rstd)
                centered *= rstd[:, None]
                _scale_shift(centered, argument(ins, 1), argument(ins, 2))
            if target is None:
                store(outs[0], centered.reshape(shape))
            for index, statistic in ((1, mean), (2, rstd)):
                statistic_out = argument(outs, index)
                if statistic_out is not None:
                    store(statistic_out, statistic.reshape(stats_shape))

        def bind(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None],
                 workspace: np.ndarray | None) -> Callable[[], None]:
            """fp32 input, parameters and output (contiguous): every view made once, the same
            numpy calls as ``kernel`` on them; anything else runs ``kernel``."""
            x, weight, bias = ins[0], argument(ins, 1), argument(ins, 2)
            target = None if outs[0] is None else target_view(outs[0], (rows, columns), np.float32)
            values = kept_view(x, (rows, columns))
            scale, shift = kept_view(weight, (columns,)), kept_view(bias, (columns,))
            if (values is None or values.dtype != np.float32 or target is None
                    or any(p is not None and (q is None or q.dtype != np.float32)
                           for p, q in ((weight, scale), (bias, shift)))):
                return functools.partial(kernel, ins, outs, workspace)
            mean = scratch_view(workspace, mean_at, (rows,), np.float32)
            rstd = scratch_view(workspace, rstd_at, (rows,), np.float32)
            mean_rows, rstd_rows = mean[:, None], rstd[:, None]
            statistics = [(statistic_out, statistic.reshape(stats_shape))
                          for statistic_out, statistic in ((argument(outs, 1), mean), (argument(outs, 2), rstd))
                          if statistic_out is not None]

            def run() -> None:
                np.add.reduce(values, axis=1, out=mean)
                np.multiply(mean, inverse_columns, out=mean)
                np.subtract(values, mean_rows, out=target)
                np.add.reduce(np.square(target), axis=1, out=rstd)
                np.multiply(rstd, inverse_columns, out=rstd)
                np.add(rstd, eps, out=rstd)
                np.sqrt(rstd, out=rstd)
                np.reciprocal(rstd, out=rstd)
                np.multiply(target, rstd_rows, out=target)
                if scale is not None:
                    np.multiply(target, scale, out=target)
                if shift is not None:
                    np.add(target, shift, out=target)
                for statistic_out, statistic in statistics:
                    store(statistic_out, statistic)

            return fp_errors_ignored(run)

        flops, traffic = _cost([*inputs, out, mean_out, rstd_out], 8.0, x.numel)
        return OpPlan(kernel, workspace_size, flops, traffic, variant="rows-fp32-stats", bind=bind)


# -- RmsNorm -------------------------------------------------------------------------------------
class RmsNormOp(OpSpec):
    """``yOut = x * rstd * gamma`` with ``rstd = 1 / sqrt(mean(x^2) + epsilon)``."""

    name = "RmsNorm"
    inputs = ("x", "gamma")
    outputs = ("yOut", "rstdOut")
    attrs = {"epsilon": 1e-6}

    def _check(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]
               ) -> tuple[TensorDesc, int, int, tuple[int, ...], float]:
        x = need(self.name, "x", argument(inputs, 0))
        need_dtype(self.name, "x", x, FLOATS)
        gamma = need(self.name, "gamma", argument(inputs, 1))
        need_dtype(self.name, "gamma", gamma, {x.dtype, DType.float32})
        rows, columns, stats_shape = _trailing(self.name, "gamma", x, gamma.shape)
        return x, rows, columns, stats_shape, _epsilon(self.name, "epsilon", attrs, 1e-6)

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        x, _, _, stats_shape, _ = self._check(inputs, attrs)
        return [TensorDesc.contiguous(x.shape, x.dtype), TensorDesc.contiguous(stats_shape, DType.float32)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        x, rows, columns, stats_shape, epsilon = self._check(inputs, attrs)
        out = need_output(self.name, "yOut", argument(outputs, 0), x.shape, x.dtype)
        rstd_out = _optional_output(self.name, "rstdOut", argument(outputs, 1), stats_shape, x.dtype)
        workspace_size, (rstd_at,) = scratch_layout(rows * 4)
        dtype, shape = x.dtype, x.shape

        def kernel(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            assert ins[0] is not None and ins[1] is not None and outs[0] is not None
            if rows == 0:
                return
            values = compute_view(ins[0], dtype).reshape(rows, columns)
            rstd = scratch_view(workspace, rstd_at, (rows,), np.float32)
            target = target_view(outs[0], (rows, columns), np.float32)
            with ignore_fp_errors():
                np.add.reduce(np.square(values), axis=1, out=rstd)
                rstd /= columns
                rstd += epsilon
                np.sqrt(rstd, out=rstd)
                np.reciprocal(rstd, out=rstd)
                result = np.multiply(values, rstd[:, None], out=target)
                _scale_shift(result, argument(ins, 1), None)
            if target is None:
                store(outs[0], result.reshape(shape))
            rstd_target = argument(outs, 1)
            if rstd_target is not None:
                store(rstd_target, rstd.reshape(stats_shape))

        flops, traffic = _cost([*inputs, out, rstd_out], 4.0, x.numel)
        return OpPlan(kernel, workspace_size, flops, traffic, variant="rows-fp32-stats")


# -- BatchNorm -----------------------------------------------------------------------------------
class BatchNormOp(OpSpec):
    """Inference batch norm: ``output = (input - runningMean) / sqrt(runningVar + eps) * weight + bias``."""

    name = "BatchNorm"
    inputs = ("input", "weight", "bias", "runningMean", "runningVar")
    outputs = ("output",)
    attrs = {"training": False, "momentum": 0.1, "eps": 1e-5}

    def _check(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> tuple[TensorDesc, float]:
        x = need(self.name, "input", argument(inputs, 0))
        need_dtype(self.name, "input", x, FLOATS)
        need_rank(self.name, "input", x, (2, 3, 4))
        if x.format not in (Format.ND, Format.NC, Format.NCL, Format.NCHW):
            raise op_error(self.name, "input", "format ND, NC, NCL or NCHW (channels on dim 1)", x.format.name)
        if attrs.get("training", False) not in (False, 0, None):
            raise op_error(self.name, "training", "False (aclpipe runs BatchNorm in inference mode only)",
                           repr(attrs.get("training")))
        channels = (x.shape[1],)
        for index, name in enumerate(self.inputs[1:], start=1):
            _parameter(self.name, name, argument(inputs, index), channels, x.dtype, required=index >= 3)
        return x, _epsilon(self.name, "eps", attrs, 1e-5)

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        x, _ = self._check(inputs, attrs)
        return [TensorDesc.contiguous(x.shape, x.dtype, format=x.format)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        x, eps = self._check(inputs, attrs)
        out = need_output(self.name, "output", argument(outputs, 0), x.shape, x.dtype)
        channels = x.shape[1]
        workspace_size, (scale_at, shift_at) = scratch_layout(channels * 4, channels * 4)
        dtype, shape = x.dtype, x.shape
        broadcast = (channels,) + (1,) * (x.ndim - 2)

        def kernel(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None],
                   workspace: np.ndarray | None) -> None:
            assert ins[0] is not None and outs[0] is not None
            if channels == 0:
                return
            scale = scratch_view(workspace, scale_at, (channels,), np.float32)
            shift = scratch_view(workspace, shift_at, (channels,), np.float32)
            target = target_view(outs[0], shape, np.float32)
            with ignore_fp_errors():  # the channel vectors in the workspace: the same fp32 steps, no temporaries
                np.add(_flat(argument(ins, 4), channels, 1.0), np.float32(eps), out=scale)
                np.sqrt(scale, out=scale)
                np.divide(_flat(argument(ins, 1), channels, 1.0), scale, out=scale)
                np.multiply(_flat(argument(ins, 3), channels, 0.0), scale, out=shift)
                np.subtract(_flat(argument(ins, 2), channels, 0.0), shift, out=shift)
                result = np.multiply(compute_view(ins[0], dtype), scale.reshape(broadcast), out=target)
                result += shift.reshape(broadcast)
            if target is None:
                store(outs[0], result)

        flops, traffic = _cost([*inputs, out], 2.0, x.numel)
        return OpPlan(kernel, workspace_size, flops, traffic, variant="channel-fp32-scale")


for _spec in (LayerNormOp(), RmsNormOp(), BatchNormOp()):
    register(_spec)
