"""Convolution (aclnnConvolution), 1-D over NCL, 2-D over NCHW and 3-D over NCDHW, as im2col + matmul.

Phase one sizes the workspace to hold the im2col buffer in float32 (the compute dtype for
every supported input dtype): ``N * C_in * prod(kernel) * prod(out_spatial) * 4`` bytes.
The kernel unfolds the (zero-padded) input into exactly those workspace bytes and
multiplies the weight by them per group, so a short or shared workspace gives an error or
wrong results.  ``cubeMathType`` acts as in :mod:`aclpipe.ops.matmul`.  2-D convolutions
with many taps per output channel (depthwise ones) unfold by whole rows instead, with their
own workspace layout (:mod:`aclpipe.ops.conv_rows`); a 1x1 kernel with stride 1 and no
padding multiplies its input where it lies, with no workspace.

Transposed convolution (``transposed=True``) is not implemented: phase one refuses it with
161002.  ``outputPadding`` is validated (non-negative, one value or one per spatial dim)
but only matters for transposed convolution, so it is otherwise unused.

Geometry helpers (:func:`int_list`, :func:`window_output_size`, :class:`Window`) are shared
with :mod:`aclpipe.ops.pool`.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..dtypes import DType, Format
from ..tensor import TensorDesc
from .base import Bind, Kernel, OpPlan, OpSpec, op_error
from .checks import (
    FLOATS,
    kept_view,
    need,
    need_dtype,
    need_output,
    need_same_dtype,
    scratch_view,
    store,
    target_view,
)
from .conv_rows import RowsGeometry, rows_geometry, rows_run
from .matmul import cube_math_type, cube_operand
from .registry import register

__all__ = ["Convolution", "Window", "int_list", "spatial_format", "window_output_size"]

_SPATIAL_FORMAT = {1: Format.NCL, 2: Format.NCHW, 3: Format.NCDHW}


def int_list(op: str, name: str, value: Any, count: int, minimum: int) -> tuple[int, ...]:
    """``value`` (an int, or a list of 1 or ``count`` ints, each >= ``minimum``) as ``count`` ints."""
    items = [value] if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else value
    try:
        items = list(items)
    except TypeError:
        raise op_error(op, name, f"a list of {count} ints", repr(value)) from None
    valid = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= minimum for v in items)
    if not valid or len(items) not in (1, count):
        raise op_error(op, name, f"1 or {count} ints >= {minimum}", repr(value))
    return tuple(int(v) for v in items) * (count if len(items) == 1 else 1)


def window_output_size(op: str, name: str, size: int, kernel: int, stride: int, padding: int,
                       dilation: int, ceil_mode: bool = False) -> int:
    """PyTorch's output length of a sliding window (convolution and pooling)."""
    span = dilation * (kernel - 1) + 1
    room = size + 2 * padding - span
    if room < 0:
        raise op_error(op, name, f"an input of at least {span - 2 * padding} along each spatial dim "
                       f"(kernel span {span}, padding {padding})", size)
    out = (-(-room // stride) if ceil_mode else room // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1  # the last window must start inside the input or the left padding
    return out


@dataclass(frozen=True)
class Window:
    """A sliding window over the trailing spatial dims, one entry per dim, and the output
    length PyTorch gives for it (shared by convolution and pooling)."""

    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    out: tuple[int, ...]

    @classmethod
    def fit(cls, op: str, name: str, sizes: Sequence[int], kernel: Sequence[int], stride: Sequence[int],
            padding: Sequence[int], dilation: Sequence[int], ceil_mode: bool = False) -> Window:
        out = tuple(window_output_size(op, name, size, k, s, p, d, ceil_mode)
                    for size, k, s, p, d in zip(sizes, kernel, stride, padding, dilation))
        return cls(tuple(kernel), tuple(stride), tuple(padding), tuple(dilation), out)

    def padded(self, values: np.ndarray, fill: float) -> np.ndarray:
        """``values`` padded on the trailing dims so that every window (ceil mode too) fits."""
        pads = [(0, 0)] * (values.ndim - len(self.kernel))
        for size, k, s, p, d, o in zip(values.shape[-len(self.kernel):], self.kernel, self.stride, self.padding,
                                       self.dilation, self.out):
            pads.append((p, max((o - 1) * s + d * (k - 1) + 1 - size - p, 0)))
        return np.pad(values, pads, constant_values=fill)

    def slices(self) -> Iterator[tuple[tuple[int, ...], tuple[slice, ...]]]:
        """For each kernel position, its index and the slices of the padded input it meets."""
        for position in itertools.product(*(range(k) for k in self.kernel)):
            yield position, tuple(slice(p * d, p * d + s * (o - 1) + 1, s)
                                  for p, s, d, o in zip(position, self.stride, self.dilation, self.out))


def spatial_format(op: str, name: str, tensor: TensorDesc, spatial_dims: Sequence[int]) -> int:
    """Spatial rank of an NCL / NCHW (or ND) tensor; refuses other layouts."""
    dims = tensor.ndim - 2
    if dims not in spatial_dims:
        layouts = " or ".join(f"{d + 2}-D ({_SPATIAL_FORMAT[d].name})" for d in spatial_dims)
        raise op_error(op, name, layouts, f"{tensor.ndim}-D {list(tensor.shape)}")
    if tensor.format not in (Format.ND, _SPATIAL_FORMAT[dims]):
        raise op_error(op, name, f"format ND or {_SPATIAL_FORMAT[dims].name}", tensor.format.name)
    return dims


@dataclass(frozen=True)
class _ConvCall:
    """What phase one learned about one convolution call."""

    x: TensorDesc
    weight: TensorDesc
    bias: TensorDesc | None
    groups: int
    window: Window

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.x.shape[0], self.weight.shape[0]) + self.window.out


class Convolution(OpSpec):
    """``torch.nn.functional.conv1d`` / ``conv2d`` / ``conv3d`` with ``groups``; ``bias`` is optional and may
    have any float dtype."""

    name = "Convolution"
    inputs = ("input", "weight", "bias")
    outputs = ("output",)
    attrs = {"stride": [1], "padding": [0], "dilation": [1], "transposed": False, "outputPadding": [0],
             "groups": 1, "cubeMathType": 0}

    def _call(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> _ConvCall:
        op = self.name
        if len(inputs) not in (2, 3):
            raise op_error(op, "inputs", "input, weight and an optional bias", f"{len(inputs)} tensors")
        x, weight = need(op, "input", inputs[0]), need(op, "weight", inputs[1])
        bias = inputs[2] if len(inputs) == 3 else None
        dims = spatial_format(op, "input", x, (1, 2, 3))
        for name, tensor in (("input", x), ("weight", weight), ("bias", bias)):
            if tensor is not None:
                need_dtype(op, name, tensor, FLOATS)
        need_same_dtype(op, ("input", "weight"), (x, weight))
        if attrs.get("transposed", False):
            raise op_error(op, "transposed", "False (transposed convolution is not implemented in aclpipe)",
                           attrs["transposed"])
        stride = int_list(op, "stride", attrs.get("stride", 1), dims, 1)
        padding = int_list(op, "padding", attrs.get("padding", 0), dims, 0)
        dilation = int_list(op, "dilation", attrs.get("dilation", 1), dims, 1)
        int_list(op, "outputPadding", attrs.get("outputPadding", 0), dims, 0)
        groups = attrs.get("groups", 1)
        channels = x.shape[1]
        if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1 \
                or channels % groups:
            raise op_error(op, "groups", f"a positive divisor of the {channels} input channels", repr(groups))
        self._check_weight(weight, bias, dims, channels, int(groups))
        window = Window.fit(op, "input", x.shape[2:], weight.shape[2:], stride, padding, dilation)
        return _ConvCall(x, weight, bias, int(groups), window)

    def _check_weight(self, weight: TensorDesc, bias: TensorDesc | None, dims: int, channels: int,
                      groups: int) -> None:
        op = self.name
        if weight.ndim != dims + 2:
            raise op_error(op, "weight", f"{dims + 2}-D [C_out, C_in/groups, *kernel]", list(weight.shape))
        if weight.shape[1] * groups != channels or weight.shape[0] % groups or weight.shape[0] == 0:
            raise op_error(op, "weight", f"[C_out (a multiple of groups={groups}), {channels // groups}, ...]",
                           list(weight.shape))
        if any(k < 1 for k in weight.shape[2:]):
            raise op_error(op, "weight", "kernel dims >= 1", list(weight.shape))
        if bias is not None and bias.shape != (weight.shape[0],):
            raise op_error(op, "bias", f"shape [{weight.shape[0]}] (C_out)", list(bias.shape))

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        call = self._call(inputs, attrs)
        cube_math_type(self.name, attrs)
        return [TensorDesc.contiguous(call.shape, call.x.dtype, format=call.x.format)]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        call = self._call(inputs, attrs)
        mode = cube_math_type(self.name, attrs)
        x, weight, window = call.x, call.weight, call.window
        out = need_output(self.name, "output", outputs[0] if outputs else None, call.shape, x.dtype)
        flops = 2.0 * out.numel * weight.shape[1] * math.prod(window.kernel)
        if _pointwise(window):  # the unfolded columns would be the input itself: no workspace
            traffic = float(x.nbytes + weight.nbytes + out.nbytes)
            kernel, bind = _pointwise_kernel(call, mode)
            return OpPlan(kernel, 0, flops, traffic, cube=True, variant=f"pointwise-{len(window.kernel)}d", bind=bind)
        geometry = rows_geometry(x.shape[0], x.shape[1], weight.shape[0], call.groups, x.shape[2:], window.kernel,
                                 window.stride, window.padding, window.dilation, window.out)
        if geometry is not None:
            workspace_size = geometry.workspace()[0]
            traffic = float(x.nbytes + weight.nbytes + out.nbytes + 2 * workspace_size)
            kernel, bind = _rows_kernel(call, mode, geometry)
            return OpPlan(kernel, workspace_size, flops, traffic, cube=True, variant="rows-2d", bind=bind)
        columns = x.shape[0] * x.shape[1] * math.prod(window.kernel) * math.prod(window.out)
        workspace_size = columns * np.dtype(np.float32).itemsize
        traffic = float(x.nbytes + weight.nbytes + out.nbytes + 2 * workspace_size)
        kernel, bind = _im2col_kernel(call, mode)
        return OpPlan(kernel, workspace_size, flops, traffic, cube=True, variant=f"im2col-{len(window.kernel)}d",
                      bind=bind)


def _pointwise(window: Window) -> bool:
    """A 1x1 kernel with stride 1 and no padding: each output pixel reads its own input pixel."""
    return all(k == 1 for k in window.kernel) and all(s == 1 for s in window.stride) and not any(window.padding)


def _exact_fp32(call: _ConvCall, mode: int, inputs: Sequence[np.ndarray | None],
                out: np.ndarray | None) -> bool:
    """Whether a ``bind`` can keep the operands as they lie: fp32 everywhere, exact products
    (modes 0 and 4: :func:`cube_operand` returns them unchanged), an output to compute into."""
    return (call.x.dtype == DType.float32 and mode in (0, 4) and out is not None and out.size > 0
            and all(view is None or view.dtype == np.float32 for view in inputs))


def _bias_add(bias: np.ndarray | None, result: np.ndarray, spatial: int) -> Callable[[], None] | None:
    """``result += bias`` over the channel dim, on views made now (None without a bias)."""
    if bias is None:
        return None
    channels = kept_view(bias, (-1,) + (1,) * spatial)
    assert channels is not None
    return functools.partial(np.add, result, channels, out=result)


def _operands(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray | None]
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
    """A convolution kernel's ``x``, ``weight``, ``bias`` (None when not given) and output."""
    x, weight, out = inputs[0], inputs[1], outputs[0]
    assert x is not None and weight is not None and out is not None
    return x, weight, inputs[2] if len(inputs) == 3 else None, out


def _finish(result: np.ndarray, bias: np.ndarray | None, bias_shape: tuple[int, ...], target: np.ndarray | None,
            out: np.ndarray) -> None:
    """Add the bias to a convolution's float32 product and store it, unless it was made in
    ``out`` itself (``target``)."""
    if bias is not None:
        result += bias.astype(np.float32, copy=False).reshape(bias_shape)
    if target is None:
        store(out, result)


def _pointwise_kernel(call: _ConvCall, mode: int) -> tuple[Kernel, Bind]:
    """A 1x1 convolution as the im2col kernel computes it, reading the input where it lies: the
    same matmul of the same operands (the columns would be a copy of the input), so the same bits."""
    groups, dtype = call.groups, call.x.dtype
    batch, channels = call.x.shape[:2]
    out_channels = call.weight.shape[0]
    pixels = math.prod(call.window.out)
    in_shape = (batch, groups, channels // groups, pixels)
    out_shape = (batch, groups, out_channels // groups, pixels)
    bias_shape = (-1,) + (1,) * len(call.window.kernel)

    def kernel(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray | None],
               workspace: np.ndarray | None) -> None:
        x, weight, bias, out = _operands(inputs, outputs)
        if out.size == 0:
            return
        columns = np.asarray(cube_operand(x, dtype, mode), dtype=np.float32).reshape(in_shape)
        filters = cube_operand(weight, dtype, mode).reshape(groups, out_channels // groups, -1)
        target = target_view(out, out_shape, np.float32)
        _finish(np.matmul(filters, columns, out=target).reshape(out.shape), bias, bias_shape, target, out)

    def bind(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray | None],
             workspace: np.ndarray | None) -> Callable[[], None]:
        """``kernel``'s calls on views made once (exact fp32 only; else ``kernel``)."""
        x, weight, out = inputs[0], inputs[1], outputs[0]
        if not _exact_fp32(call, mode, inputs, out) or x is None or weight is None or out is None:
            return functools.partial(kernel, inputs, outputs, workspace)
        columns = kept_view(x, in_shape)
        filters = kept_view(weight, (groups, out_channels // groups, -1))
        target = target_view(out, out_shape, np.float32)
        if columns is None or filters is None or target is None:
            return functools.partial(kernel, inputs, outputs, workspace)
        add_bias = _bias_add(inputs[2] if len(inputs) == 3 else None, target.reshape(out.shape), len(bias_shape) - 1)

        def run() -> None:
            np.matmul(filters, columns, out=target)
            if add_bias is not None:
                add_bias()

        return run

    return kernel, bind


def _im2col_kernel(call: _ConvCall, mode: int) -> tuple[Kernel, Bind]:
    window, groups, dtype = call.window, call.groups, call.x.dtype
    batch, channels = call.x.shape[:2]
    out_channels = call.weight.shape[0]
    spatial = len(window.kernel)
    columns_shape = (batch, channels) + window.kernel + window.out
    padded_shape = (batch, channels) + tuple(size + 2 * pad for size, pad in zip(call.x.shape[2:], window.padding))
    interior = (slice(None), slice(None)) + tuple(slice(pad, pad + size)
                                                  for size, pad in zip(call.x.shape[2:], window.padding))
    padding = any(window.padding)
    out_shape = (batch, groups, out_channels // groups, math.prod(window.out))
    bias_shape = (-1,) + (1,) * spatial

    def window_strides(strides: tuple[int, ...]) -> tuple[int, ...]:
        """Strides of the columns-shaped view ``[N, C, *kernel, *out]`` of a source with
        ``strides``: kernel steps move by the dilation, output steps by the stride."""
        spatial_strides = strides[2:]
        return (strides[:2] + tuple(s * d for s, d in zip(spatial_strides, window.dilation))
                + tuple(s * t for s, t in zip(spatial_strides, window.stride)))

    # The usual sources (the zero-padded copy, or a contiguous fp32 input) are C-contiguous:
    # their window strides are known now, and a view is one ndarray constructor call.
    source_shape = padded_shape if padding else call.x.shape
    packed = window_strides(tuple(4 * math.prod(source_shape[axis + 1:]) for axis in range(len(source_shape))))

    def windows(source: np.ndarray) -> np.ndarray:
        """Every window of ``source`` as a strided view shaped like the columns."""
        if source.flags.c_contiguous and source.dtype == np.float32:
            return np.ndarray(columns_shape, np.float32, buffer=source, strides=packed)
        return np.lib.stride_tricks.as_strided(source, columns_shape, window_strides(source.strides),
                                               writeable=False)

    def kernel(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray | None],
               workspace: np.ndarray | None) -> None:
        x, weight, bias, out = _operands(inputs, outputs)
        if out.size == 0:
            return
        source = cube_operand(x, dtype, mode)
        if padding:
            padded = np.zeros(padded_shape, np.float32)
            padded[interior] = source
            source = padded
        columns = scratch_view(workspace, 0, columns_shape, np.float32)
        np.copyto(columns, windows(source), casting="unsafe")  # the whole unfold in one copy
        # [N, C, *k, *o] -> [N, groups, C/groups * prod(k), prod(o)]: a view of the same bytes.
        unfolded = columns.reshape(batch, groups, -1, out_shape[-1])
        filters = cube_operand(weight, dtype, mode).reshape(groups, out_channels // groups, -1)
        target = target_view(out, out_shape, np.float32)
        _finish(np.matmul(filters, unfolded, out=target).reshape(out.shape), bias, bias_shape, target, out)

    def bind(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray | None],
             workspace: np.ndarray | None) -> Callable[[], None]:
        """``kernel``'s calls on views made once (exact fp32 only; else ``kernel``).  The
        zero-padded copy of the input is this binding's own array, its border zeroed once: a
        bound launch runs one at a time (its slot's buffers would race otherwise)."""
        x, weight, out = inputs[0], inputs[1], outputs[0]
        if not _exact_fp32(call, mode, inputs, out) or x is None or weight is None or out is None:
            return functools.partial(kernel, inputs, outputs, workspace)
        filters = kept_view(weight, (groups, out_channels // groups, -1))
        target = target_view(out, out_shape, np.float32)
        if filters is None or target is None:
            return functools.partial(kernel, inputs, outputs, workspace)
        padded = np.zeros(padded_shape, np.float32) if padding else None
        columns = scratch_view(workspace, 0, columns_shape, np.float32)
        unfold = functools.partial(np.copyto, columns, windows(x if padded is None else padded), casting="unsafe")
        fill = None if padded is None else functools.partial(np.copyto, padded[interior], x)
        unfolded = columns.reshape(batch, groups, -1, out_shape[-1])
        add_bias = _bias_add(inputs[2] if len(inputs) == 3 else None, target.reshape(out.shape), spatial)

        def run() -> None:
            if fill is not None:
                fill()
            unfold()
            np.matmul(filters, unfolded, out=target)
            if add_bias is not None:
                add_bias()

        return run

    return kernel, bind


def _rows_kernel(call: _ConvCall, mode: int, geometry: RowsGeometry) -> tuple[Kernel, Bind]:
    """A 2-D convolution unfolded by whole rows (:mod:`aclpipe.ops.conv_rows`): the one-shot
    kernel converts the operands as the cube reads them and runs the same steps as ``bind``."""
    groups, dtype = call.groups, call.x.dtype
    filters_shape = (groups, call.weight.shape[0] // groups, -1)

    def kernel(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray | None],
               workspace: np.ndarray | None) -> None:
        x, weight, bias, out = _operands(inputs, outputs)
        if out.size == 0:
            return
        source = np.asarray(cube_operand(x, dtype, mode), dtype=np.float32)
        filters = np.ascontiguousarray(cube_operand(weight, dtype, mode), dtype=np.float32).reshape(filters_shape)
        bias32 = None if bias is None else bias.astype(np.float32, copy=False)
        result = out if out.dtype == np.float32 else np.empty(out.shape, np.float32)
        rows_run(geometry, source, filters, bias32, result, workspace, np.zeros(geometry.source_size, np.float32))()
        if result is not out:
            store(out, result)

    def bind(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray | None],
             workspace: np.ndarray | None) -> Callable[[], None]:
        """``kernel``'s steps on views made once (exact fp32 and C-contiguous filters; else
        ``kernel``).  The phase-split input is this binding's own array, its border zeroed once:
        a bound launch runs one at a time (its slot's buffers would race otherwise)."""
        x, weight, out = inputs[0], inputs[1], outputs[0]
        if not _exact_fp32(call, mode, inputs, out) or x is None or weight is None or out is None:
            return functools.partial(kernel, inputs, outputs, workspace)
        filters = kept_view(weight, filters_shape)
        if filters is None or not filters.flags.c_contiguous:
            return functools.partial(kernel, inputs, outputs, workspace)
        bias = inputs[2] if len(inputs) == 3 else None
        return rows_run(geometry, x, filters, bias, out, workspace, np.zeros(geometry.source_size, np.float32))

    return kernel, bind


register(Convolution())
