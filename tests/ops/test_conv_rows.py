"""The 2-D convolution unfolded by rows, on any geometry, against the direct definition."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from test_conv import reference_conv

from aclpipe.ops.conv_rows import RowsGeometry, rows_geometry, rows_run


@st.composite
def _geometries(draw: st.DrawFn) -> tuple[RowsGeometry, bool]:
    groups = draw(st.integers(1, 3))
    channels, out_channels = groups * draw(st.integers(1, 3)), groups * draw(st.integers(1, 3))
    kernel = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    size = tuple(draw(st.integers(max(1, d * (k - 1) + 1 - 2 * p), 9))
                 for k, d, p in zip(kernel, dilation, padding))
    out = tuple((s + 2 * p - d * (k - 1) - 1) // t + 1
                for s, p, d, k, t in zip(size, padding, dilation, kernel, stride))
    plane = tuple(-(-(s + 2 * p) // t) for s, p, t in zip(size, padding, stride))
    geometry = RowsGeometry(draw(st.integers(1, 2)), channels, out_channels, groups, size, kernel, stride,
                            padding, dilation, out, plane)  # type: ignore[arg-type]
    return geometry, draw(st.booleans())


@settings(max_examples=150, deadline=None)
@given(_geometries(), st.integers(0, 2**16), st.booleans())
def test_the_rows_form_is_the_convolution_on_any_geometry(case, seed, strided):
    geometry, with_bias = case
    rng = np.random.default_rng(seed)
    n, c, o, g = geometry.batch, geometry.channels, geometry.out_channels, geometry.groups
    h, w = geometry.size
    # the input as it lies in device memory: packed, or a view with gaps (every other column)
    x = rng.standard_normal((n, c, h, 2 * w if strided else w), dtype=np.float32)[..., ::2 if strided else 1]
    weight = rng.standard_normal((o, c // g) + geometry.kernel, dtype=np.float32)
    bias = rng.standard_normal(o, dtype=np.float32) if with_bias else None
    out = np.full((n, o) + geometry.out, np.nan, np.float32)
    workspace = np.full(geometry.workspace()[0], 0xFF, np.uint8)  # stale scratch: nan floats
    source = np.zeros(geometry.source_size, np.float32)
    run = rows_run(geometry, x, weight.reshape(g, o // g, -1), bias, out, workspace, source)
    run()
    expected = reference_conv(x, weight, bias, geometry.stride, geometry.padding, geometry.dilation, g)
    scale = math.sqrt(c // g * math.prod(geometry.kernel))
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-6 * scale * max(1.0, np.abs(expected).max()))
    x[...] = rng.standard_normal(x.shape, dtype=np.float32)  # a second launch on new values
    run()
    expected = reference_conv(x, weight, bias, geometry.stride, geometry.padding, geometry.dilation, g)
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-6 * scale * max(1.0, np.abs(expected).max()))


def test_the_rows_form_is_chosen_for_many_taps_per_output_channel():
    depthwise = rows_geometry(2, 32, 32, 32, (16, 16), (5, 5), (2, 2), (2, 2), (1, 1), (8, 8))
    assert depthwise is not None and depthwise.plane == (10, 10) and depthwise.run == 80
    # few taps per output channel (mobile's first layer), a 1x1 kernel, 1-D: im2col
    assert rows_geometry(2, 3, 16, 1, (32, 32), (3, 3), (2, 2), (1, 1), (1, 1), (16, 16)) is None
    assert rows_geometry(2, 16, 16, 1, (8, 8), (1, 1), (1, 1), (0, 0), (1, 1), (8, 8)) is None
    assert rows_geometry(2, 16, 2, 1, (9,), (3,), (1,), (1,), (1,), (9,)) is None
    # wide rows over twice the output's (a wide kernel on a narrow padded input): im2col
    assert rows_geometry(1, 16, 1, 1, (4, 2), (3, 3), (1, 1), (2, 2), (1, 1), (6, 4)) is not None
    assert rows_geometry(1, 16, 1, 1, (4, 1), (3, 5), (1, 1), (2, 2), (1, 1), (6, 1)) is None
