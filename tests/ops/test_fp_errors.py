"""Floating-point errors in kernels are ignored per thread (aclpipe.ops.fp_errors)."""

from __future__ import annotations

import threading
import warnings

import numpy as np

from aclpipe.ops.fp_errors import fp_errors_ignored, ignore_fp_errors, ignore_fp_errors_on_this_thread


def _divide_by_zero() -> np.ndarray:
    return np.ones(4, np.float32) / np.zeros(4, np.float32)


def test_ignore_fp_errors_silences_a_division_by_zero_on_any_thread():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with ignore_fp_errors():
            assert np.isinf(_divide_by_zero()).all()
    assert np.geterr()["divide"] == "warn"  # restored


def test_a_thread_that_ignores_them_for_good_leaves_the_others_alone():
    seen: dict[str, object] = {}

    def worker() -> None:
        ignore_fp_errors_on_this_thread()
        seen["state"] = np.geterr()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            seen["result"] = _divide_by_zero()  # no errstate: the thread's own state
            with ignore_fp_errors():  # nothing to enter, and nothing restored on leaving
                pass
            seen["after"] = np.geterr()

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen["state"] == seen["after"] == {"divide": "ignore", "over": "ignore", "under": "ignore",
                                               "invalid": "ignore"}
    assert np.isinf(seen["result"]).all()
    assert np.geterr()["divide"] == "warn"  # this thread's state is untouched


def test_a_wrapped_run_ignores_them_on_any_thread_and_restores_numpys_state():
    results: list[np.ndarray] = []
    run = fp_errors_ignored(lambda: results.append(_divide_by_zero()))
    old = np.seterr(all="raise")
    try:
        run()  # the caller's thread raises on errors, but not inside the run
        assert np.geterr()["divide"] == "raise"
    finally:
        np.seterr(**old)
    seen: dict[str, object] = {}

    def worker() -> None:
        ignore_fp_errors_on_this_thread()
        run()  # called directly: the thread ignores them already
        seen["state"] = np.geterr()["divide"]

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert len(results) == 2 and all(np.isinf(r).all() for r in results) and seen["state"] == "ignore"
