"""2-D convolution unfolded by whole rows: every kernel tap's columns are one contiguous run.

The im2col form (:mod:`aclpipe.ops.conv`) copies each tap's window ``[Ho, Wo]`` out of the
padded input: rows of ``Wo`` floats (8-16 on the mobile models), so the copy is bound by its
row count, not its bytes (the depthwise 5x5 on ``(2, 32, 16, 16)``: 102,400 floats in rows of
8, about 75 µs).  Here the padded input is stored split by stride phase, ``[N, C, sH, sW, Hq,
Wq]`` with ``phase[a, b][i, j] = padded[a + sH*i, b + sW*j]``, so that the window of tap
``(ki, kj)`` for output row ``i`` and *every* ``j < Wq`` is ``Ho * Wq`` consecutive floats of one
phase plane.  The columns are ``[N, C, kH, kW, Ho * Wq]`` (copied in one call per phase group,
rows of ``Ho * Wq`` floats: the depthwise 3x3's unfold 35 to 8 µs, the 5x5's 74 to 28), the
product ``[N, C_out, Ho, Wq]`` has ``Wq - Wo`` unused columns per row (they read the next row's
left padding or the next plane), and the bias add writes the used ones into the output.  Each
output element is the same dot product as im2col's (the same taps in the same order) plus the
bias; BLAS may tile the wider product differently, so the last bits of a large convolution can
move.

Workspace: the columns, then the wide product (both float32, each 32-byte aligned).  The
phase-split input is the binding's own array (as im2col's padded copy), its zero border written
once; the one-shot kernel makes a fresh one.  Used for 2-D convolutions with many taps per
output channel whose wide rows cost at most twice the output (:func:`rows_geometry`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .checks import scratch_layout, scratch_view

__all__ = ["RowsGeometry", "rows_geometry", "rows_run"]

_F32 = np.dtype(np.float32).itemsize


@dataclass(frozen=True)
class RowsGeometry:
    """Where everything lies for one 2-D convolution call (all sizes in elements)."""

    batch: int
    channels: int
    out_channels: int
    groups: int
    size: tuple[int, int]  # H, W of the input
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    out: tuple[int, int]  # Ho, Wo
    plane: tuple[int, int]  # Hq, Wq of one phase

    @property
    def run(self) -> int:
        """Columns per tap: every output row at the phase plane's width."""
        return self.out[0] * self.plane[1]

    @property
    def source_size(self) -> int:
        """The phase-split input, plus a tail the last taps' runs may read past the end."""
        sh, sw = self.stride
        tail = (self.kernel[1] - 1) * self.dilation[1] // sw + 1
        return self.batch * self.channels * sh * sw * self.plane[0] * self.plane[1] + tail

    @property
    def columns_shape(self) -> tuple[int, ...]:
        return (self.batch, self.channels) + self.kernel + (self.run,)

    @property
    def wide_shape(self) -> tuple[int, ...]:
        return (self.batch, self.out_channels, self.out[0], self.plane[1])

    def workspace(self) -> tuple[int, tuple[int, ...]]:
        """Workspace bytes and the offsets of the columns and the wide product."""
        return scratch_layout(math.prod(self.columns_shape) * _F32, math.prod(self.wide_shape) * _F32)


def rows_geometry(batch: int, channels: int, out_channels: int, groups: int, size: Sequence[int],
                  kernel: Sequence[int], stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                  out: Sequence[int]) -> RowsGeometry | None:
    """The geometry of a 2-D call worth unfolding by rows, else None: other ranks, a 1x1
    kernel, wide rows more than twice the output's (their extra columns cost more than the
    row copies save), or few taps per output channel.  The rows form trades im2col's copy of
    ``C * kH * kW`` rows per output row for a strided pass over the output (``C_out`` rows per
    output row, the bias add out of the wide product) and, with a stride, one fill per phase:
    measured on mobile's convolutions, a gain from ``C * kH * kW > 4 * C_out`` (the depthwise
    3x3 and 5x5: 144 and 800 against 64 and 128; 52 to 32 and 100 to 66 µs), a loss below
    (the first layer, 3 channels into 16: 27 against 64, 22 to 27 µs)."""
    if len(kernel) != 2 or math.prod(kernel) == 1 or channels * math.prod(kernel) <= 4 * out_channels:
        return None
    plane = tuple(-(-(s + 2 * p) // t) for s, p, t in zip(size, padding, stride))
    if plane[1] > 2 * out[1]:
        return None
    return RowsGeometry(batch, channels, out_channels, groups, (size[0], size[1]), (kernel[0], kernel[1]),
                        (stride[0], stride[1]), (padding[0], padding[1]), (dilation[0], dilation[1]),
                        (out[0], out[1]), (plane[0], plane[1]))


def _axis_phases(kernel: int, stride: int, dilation: int) -> list[tuple[int, int, int, int]]:
    """Kernel taps along one axis grouped by the phase they read: per group, the first tap,
    the tap step, the number of taps, and the phase.  Within a group the taps' starts in the
    phase plane step evenly, so a group is one strided view."""
    step = stride // math.gcd(stride, dilation)
    groups = []
    for first in range(min(step, kernel)):
        count = len(range(first, kernel, step))
        groups.append((first, step, count, first * dilation % stride))
    return groups


def _fills(geometry: RowsGeometry, x: np.ndarray, source: np.ndarray) -> list[Callable[[], None]]:
    """The copies of ``x`` into the interior of each phase plane of ``source`` (the border stays
    as it is: zero)."""
    n, c = geometry.batch, geometry.channels
    sh, sw = geometry.stride
    hq, wq = geometry.plane
    phases = source[:n * c * sh * sw * hq * wq].reshape(n, c, sh, sw, hq, wq)
    rows = [_phase_span(a, sh, geometry.padding[0], geometry.size[0]) for a in range(sh)]
    cols = [_phase_span(b, sw, geometry.padding[1], geometry.size[1]) for b in range(sw)]
    row_span, col_span = _uniform(rows), _uniform(cols)
    if row_span is not None and col_span is not None:
        # Every phase holds the same number of rows and columns at the same place (an even
        # padding on a size divisible by the stride, mobile's case): phase a's first row is
        # row first + a, so all phases are one strided view of x, and the fill one copy.
        (first_row, at_row, count_rows), (first_col, at_col, count_cols) = row_span, col_span
        s0, s1, s2, s3 = x.strides
        values = np.lib.stride_tricks.as_strided(x[:, :, first_row:, first_col:],
                                                 (n, c, sh, sw, count_rows, count_cols),
                                                 (s0, s1, s2, s3, s2 * sh, s3 * sw), writeable=False)
        target = phases[:, :, :, :, at_row:at_row + count_rows, at_col:at_col + count_cols]
        return [functools.partial(np.copyto, target, values)]
    copies: list[Callable[[], None]] = []
    for a, row_span in enumerate(rows):
        for b, col_span in enumerate(cols):
            if row_span is None or col_span is None:
                continue
            (first_row, at_row, count_rows), (first_col, at_col, count_cols) = row_span, col_span
            target = phases[:, :, a, b, at_row:at_row + count_rows, at_col:at_col + count_cols]
            values = x[:, :, first_row:first_row + sh * (count_rows - 1) + 1:sh,
                       first_col:first_col + sw * (count_cols - 1) + 1:sw]
            copies.append(functools.partial(np.copyto, target, values))
    return copies


def _uniform(spans: list[tuple[int, int, int] | None]) -> tuple[int, int, int] | None:
    """The first phase's span when every phase of an axis holds as many values at the same
    place (then phase ``a`` starts ``a`` values after the first), else None."""
    first = spans[0]
    if first is None or any(span is None or span[1:] != first[1:] for span in spans):
        return None
    return first


def _phase_span(phase: int, stride: int, padding: int, size: int) -> tuple[int, int, int] | None:
    """For one axis and phase: the first input index it holds, where in the plane, and how
    many (None when the phase holds only padding)."""
    at = max(0, -(-(padding - phase) // stride))  # the first plane index inside the input
    first = phase + stride * at - padding
    if first >= size:
        return None
    return first, at, (size - 1 - first) // stride + 1


def _unfolds(geometry: RowsGeometry, source: np.ndarray, columns: np.ndarray) -> list[Callable[[], None]]:
    """One copy per phase group: the group's taps' runs into their places in the columns."""
    n, c = geometry.batch, geometry.channels
    sh, sw = geometry.stride
    hq, wq = geometry.plane
    dh, dw = geometry.dilation
    plane = hq * wq
    copies: list[Callable[[], None]] = []
    for first_h, step_h, count_h, a in _axis_phases(geometry.kernel[0], sh, dh):
        for first_w, step_w, count_w, b in _axis_phases(geometry.kernel[1], sw, dw):
            start = (a * sw + b) * plane + (first_h * dh // sh) * wq + first_w * dw // sw
            strides = (c * sh * sw * plane, sh * sw * plane, step_h * dh // sh * wq, step_w * dw // sw, 1)
            window = np.ndarray((n, c, count_h, count_w, geometry.run), np.float32, buffer=source,
                                offset=start * _F32, strides=tuple(s * _F32 for s in strides))
            target = columns[:, :, first_h::step_h, first_w::step_w, :]
            copies.append(functools.partial(np.copyto, target, window))
    return copies


def rows_run(geometry: RowsGeometry, x: np.ndarray, filters: np.ndarray, bias: np.ndarray | None,
             result: np.ndarray, workspace: np.ndarray | None, source: np.ndarray) -> Callable[[], None]:
    """The convolution of float32 ``x`` by ``filters`` (``[groups, C_out/groups, C_in/groups *
    kH * kW]``) plus ``bias`` (float32 ``[C_out]`` or None) into the float32 ``result`` view,
    as a run over views made now.  ``source`` is a zeroed float32 array of
    ``geometry.source_size`` elements, kept by the caller for as long as the run."""
    _, (columns_at, wide_at) = geometry.workspace()
    columns = scratch_view(workspace, columns_at, geometry.columns_shape, np.float32)
    wide = scratch_view(workspace, wide_at, geometry.wide_shape, np.float32)
    n, g = geometry.batch, geometry.groups
    unfolded = columns.reshape(n, g, -1, geometry.run)
    product = wide.reshape(n, g, geometry.out_channels // g, geometry.run)
    used = wide[..., :geometry.out[1]]
    steps = _fills(geometry, x, source) + _unfolds(geometry, source, columns)
    steps.append(functools.partial(np.matmul, filters, unfolded, out=product))
    if bias is None:
        steps.append(functools.partial(np.copyto, result, used))
    else:
        steps.append(functools.partial(np.add, used, bias.reshape(-1, 1, 1), out=result))

    def run() -> None:
        for step in steps:
            step()

    return run
