"""Device.copy: device memory to device memory, waited for (as upload and download)."""

from __future__ import annotations

import numpy as np


def test_copy_within_one_buffer_and_between_two(device):
    data = np.arange(64, dtype=np.float32)
    buffer = device.upload(data)
    other = device.alloc(data.nbytes)
    try:
        device.copy(buffer, buffer, 64, dst_offset=128, src_offset=0)  # the first 16 floats over floats 32..47
        device.copy(other, buffer, data.nbytes)
        copied = device.download(other, "float32", (64,))
    finally:
        buffer.close()
        other.close()
    expected = data.copy()
    expected[32:48] = data[:16]
    np.testing.assert_array_equal(copied, expected)
