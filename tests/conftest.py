"""Suite-wide settings: the simulator's sanitizer is on for every test (ARCHITECTURE.md 3.1).

It is on by default anyway; the variable keeps it on whatever the caller's environment says."""

from __future__ import annotations

import os

os.environ["ACLPIPE_SANITIZER"] = "1"
os.environ.setdefault("ACLPIPE_DEVICE", "sim")

import pytest

import aclpipe


@pytest.fixture
def device():
    """A fresh simulated device with the sanitizer on; closed after the test."""
    dev = aclpipe.open_device("sim", sanitizer=True)
    yield dev
    dev.release_hangs()
    dev.close()


@pytest.fixture
def timed_device():
    """A simulated device with the timing model on (1 modelled second = 1 wall second)."""
    dev = aclpipe.open_device("sim", sanitizer=True, timing=True)
    yield dev
    dev.release_hangs()
    dev.close()
