"""Finding CANN: the library directory, the op-plugin rule for libopapi, and the errors when missing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import aclpipe
from aclpipe.backends.ascend import AscendBackend, library_directory, opapi_libraries
from aclpipe.errors import InvalidArgumentError

CANN_VARIABLES = ("ACLPIPE_ASCEND_LIB", "ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")


@pytest.fixture
def no_cann(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CANN_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_missing_cann_is_a_lookup_error_saying_what_to_set(no_cann):
    with pytest.raises(LookupError) as caught:
        aclpipe.open_device("ascend:0")
    message = str(caught.value)
    assert "ACLPIPE_ASCEND_LIB" in message and "ASCEND_HOME_PATH" in message and "set_env.sh" in message
    assert aclpipe.device_count("ascend") == 0  # counted as absent, not an error


def test_a_directory_without_the_libraries_names_the_missing_files(no_cann, tmp_path, monkeypatch):
    monkeypatch.setenv("ACLPIPE_ASCEND_LIB", str(tmp_path))
    with pytest.raises(LookupError, match="libascendcl.so.*libnnopbase.so.*libopapi"):
        aclpipe.open_device("ascend:0")
    monkeypatch.setenv("ACLPIPE_ASCEND_LIB", str(tmp_path / "absent"))
    with pytest.raises(LookupError, match="does not exist"):
        aclpipe.open_device("ascend")


def test_the_directory_comes_from_the_cann_environment(no_cann, tmp_path, monkeypatch):
    monkeypatch.setenv("ASCEND_TOOLKIT_HOME", "/opt/toolkit")
    assert library_directory() == Path("/opt/toolkit/lib64")
    monkeypatch.setenv("ASCEND_HOME_PATH", "/opt/cann")
    assert library_directory() == Path("/opt/cann/lib64")
    monkeypatch.setenv("ACLPIPE_ASCEND_LIB", str(tmp_path))
    assert library_directory() == tmp_path


def test_per_repo_op_libraries_win_over_the_legacy_one_and_are_never_mixed(tmp_path):
    (tmp_path / "libopapi.so").touch()
    assert opapi_libraries(tmp_path) == [tmp_path / "libopapi.so"]
    for name in ("libopapi_nn.so", "libopapi_math.so"):
        (tmp_path / name).touch()
    assert opapi_libraries(tmp_path) == [tmp_path / "libopapi_math.so", tmp_path / "libopapi_nn.so"]
    assert opapi_libraries(tmp_path / "nothing") == []


def test_importing_the_backend_or_using_the_simulator_loads_no_cann(fake_lib):
    # ACLPIPE_ASCEND_LIB points at the fake, yet nothing may load it until a device opens.
    script = ("import aclpipe, aclpipe.backends.ascend; aclpipe.open_device('sim').close(); "
              "print(any('libascendcl' in line for line in open('/proc/self/maps')))")
    result = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_open_device_counts_and_describes_the_fake(fake_lib, monkeypatch):
    assert aclpipe.device_count("ascend") == 2  # FAKE_CANN_DEVICES defaults to 2
    monkeypatch.setenv("FAKE_CANN_DEVICES", "3")
    assert AscendBackend.device_count() == 3
    with aclpipe.open_device("ascend:2") as device:
        assert device.name == "ascend:2"
        assert str(fake_lib) in device.describe() and "aclrtLaunchHostFunc" in device.describe()
        capabilities = device.capabilities
        assert capabilities.host_callbacks and capabilities.event_timing
        assert not (capabilities.sanitizer or capabilities.fault_injection or capabilities.timing_model)
    with pytest.raises(InvalidArgumentError, match="ascend device 3 does not exist: there are 3"):
        aclpipe.open_device("ascend:3")


def test_the_fallback_build_lacks_launch_host_func(fake_cann, monkeypatch):
    monkeypatch.setenv("ACLPIPE_ASCEND_LIB", str(fake_cann["callback"]))
    with aclpipe.open_device("ascend:0") as device:
        assert device.backend.host_func_mode == "callback" and "report thread" in device.describe()
    with pytest.raises(LookupError, match="no aclrtLaunchHostFunc"):
        aclpipe.open_device("ascend:0", host_func_mode="launch_host_func")
    monkeypatch.setenv("ACLPIPE_ASCEND_LIB", str(fake_cann["launch_host_func"]))
    monkeypatch.setenv("ACLPIPE_ASCEND_HOST_FUNC", "callback")  # forcing the fallback works too
    with aclpipe.open_device("ascend:0") as device:
        assert device.backend.host_func_mode == "callback"
    with pytest.raises(ValueError, match="host_func_mode"):
        aclpipe.open_device("ascend:0", host_func_mode="sometimes")
