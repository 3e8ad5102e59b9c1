"""Device: opening by name, allocation arguments, mem_info, upload/download, lifetime."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import aclpipe
from aclpipe import ClosedResourceError, DeviceOutOfMemory, InvalidArgumentError
from aclpipe.dtypes import as_dtype


def test_open_by_name_and_index():
    with aclpipe.open_device("sim:1", sanitizer=True) as device:
        assert device.name == "sim:1"
        assert "sim:1" in device.describe() and "sanitizer on" in device.describe()
        assert device.capabilities.sanitizer and device.capabilities.fault_injection


def test_default_device_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("ACLPIPE_DEVICE", "sim:2")
    with aclpipe.open_device() as device:
        assert device.name == "sim:2"


@pytest.mark.parametrize("spec, error", [
    ("nosuch", LookupError), ("sim:x", ValueError), ("sim:-1", ValueError), (":0", ValueError),
    ("sim:99", InvalidArgumentError),
])
def test_bad_device_names_fail_clearly(spec, error):
    with pytest.raises(error):
        aclpipe.open_device(spec)


def test_an_option_the_backend_does_not_take_is_refused_with_the_ones_it_takes():
    with pytest.raises(TypeError, match=r"open_device\('sim'\): unknown option\(s\) memory_limit; the sim "
                                        r"backend takes spec, capacity, timing, time_scale, sanitizer, max_streams"):
        aclpipe.open_device("sim", memory_limit=1 << 20)
    with aclpipe.open_device("sim", capacity=1 << 20, timing=False) as device:  # the ones it takes still work
        assert device.mem_info().total == 1 << 20


def test_device_count():
    assert aclpipe.device_count("sim") >= 1
    assert aclpipe.device_count("nosuch") == 0


def test_alloc_checks_its_argument_before_any_device_call(device):
    with pytest.raises(TypeError):
        device.alloc(1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        device.alloc(0)
    with pytest.raises(ValueError):
        device.alloc_host(-1)


def test_mem_info_tracks_allocations(device):
    before = device.mem_info()
    buffer = device.alloc(1 << 20)
    during = device.mem_info()
    assert during.total == before.total and during.used >= before.used + (1 << 20)
    buffer.close()
    assert device.mem_info() == before


def test_alloc_beyond_capacity_is_device_out_of_memory():
    with aclpipe.open_device("sim", capacity=1 << 20) as device, pytest.raises(DeviceOutOfMemory) as caught:
        device.alloc(2 << 20)
    assert caught.value.requested == 2 << 20 and caught.value.limit == 1 << 20
    assert isinstance(caught.value, MemoryError)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int64", "bool", "bfloat16"])
def test_upload_download_round_trip(device, dtype):
    data = (np.arange(24) % 3).astype(as_dtype(dtype).numpy)
    buffer = device.upload(data.reshape(2, 3, 4))
    assert (device.download(buffer, dtype, (2, 3, 4)) == data.reshape(2, 3, 4)).all()


def test_download_with_offset(device):
    buffer = device.upload(np.arange(16, dtype=np.int32))
    assert list(device.download(buffer, "int32", (4,), offset=8 * 4)) == [8, 9, 10, 11]


def test_close_is_idempotent_and_refuses_later_use(device):
    device.close()
    device.close()
    assert device.closed
    with pytest.raises(ClosedResourceError):
        device.create_stream()
    with pytest.raises(ClosedResourceError):
        device.alloc(64)


def test_sync_raises_a_streams_sticky_error(device):
    stream = device.create_stream()
    device.inject_fault("copy")
    buffer = device.alloc(64)
    stream.memset(buffer, 0)
    with pytest.raises(aclpipe.DeviceFault):
        device.sync()
    device.sync()  # consumed


def test_inject_fault_needs_the_capability():
    with aclpipe.open_device("sim") as device:
        assert device.inject_fault("kernel", "x") is not None
        device.backend.capabilities = dataclasses.replace(device.capabilities, fault_injection=False)
        with pytest.raises(NotImplementedError, match="cannot inject faults"):
            device.inject_fault("kernel", "x")


def test_a_script_that_exits_with_work_and_pools_open_exits_cleanly(tmp_path):
    """At exit, finalizers run newest first; the devices are synchronized before, so nothing
    (a pool block freed while a memset may run, a pool event closed before the pool) complains."""
    script = tmp_path / "leave_open.py"
    script.write_text(
        "import aclpipe\n"
        "dev = aclpipe.open_device('sim', sanitizer=True)\n"
        "stream = dev.create_stream()\n"
        "pool = aclpipe.MemoryPool(dev, limit=1 << 20)\n"
        "buf = pool.allocate(4096, stream)\n"
        "stream.memset(buf, 0)\n"
        "pool.free(buf)\n"
        "kept = pool.allocate(1 << 16, stream)\n"
        "stream.memset(kept, 1)\n"
        "plain = dev.alloc(4096)\n"
        "stream.memset(plain, 2)\n"
        "print('done')\n")
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout == "done\n"
    assert done.stderr == ""


def test_a_closed_device_goes_with_its_last_reference_not_at_a_cycle_collection():
    import gc
    import weakref

    import numpy as np

    import aclpipe

    gc.disable()
    try:
        device = aclpipe.open_device("sim")
        device.upload(np.ones(8, np.float32)).close()  # makes the transfer stream, which refers back
        device.close()
        gone = weakref.ref(device)
        del device
        assert gone() is None
    finally:
        gc.enable()
