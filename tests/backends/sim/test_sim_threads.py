"""numpy's thread pools are limited while a simulated device is open, and restored after."""

from __future__ import annotations

import numpy as np  # noqa: F401 - loads the BLAS whose pool is limited
import pytest
from threadpoolctl import threadpool_info

import aclpipe
from aclpipe.backends.sim.threads import LIMIT, ThreadLimit, blas_thread_limit


def _blas_threads() -> list[int]:
    return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]


def test_an_open_simulated_device_runs_numpy_with_one_blas_thread():
    if not _blas_threads():
        pytest.skip("numpy has no BLAS pool that threadpoolctl can see")
    with aclpipe.open_device("sim", sanitizer=False):
        assert LIMIT.users >= 1 and set(_blas_threads()) == {1}


def test_the_last_user_restores_the_pools_and_the_first_applies_the_limit(monkeypatch):
    if not _blas_threads():
        pytest.skip("numpy has no BLAS pool that threadpoolctl can see")
    monkeypatch.setenv("ACLPIPE_SIM_BLAS_THREADS", "1")
    limit = ThreadLimit()
    before = _blas_threads()
    limit.acquire()
    limit.acquire()
    assert set(_blas_threads()) == {1}
    limit.release()
    assert set(_blas_threads()) == {1}  # one user is left
    limit.release()
    limit.release()  # more releases than acquires do nothing
    assert _blas_threads() == before and limit.users == 0


def test_the_limit_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("ACLPIPE_SIM_BLAS_THREADS", "0")
    assert blas_thread_limit() == 0
    limit = ThreadLimit()
    before = _blas_threads()
    limit.acquire()  # 0: the pools are left alone
    assert _blas_threads() == before
    limit.release()
    for bad in ("two", "-1"):
        monkeypatch.setenv("ACLPIPE_SIM_BLAS_THREADS", bad)
        with pytest.raises(ValueError, match="ACLPIPE_SIM_BLAS_THREADS"):
            blas_thread_limit()
    monkeypatch.delenv("ACLPIPE_SIM_BLAS_THREADS")
    assert blas_thread_limit() == 1
