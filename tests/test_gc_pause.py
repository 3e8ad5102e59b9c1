"""Pausing the cyclic garbage collector around bulk building: nested, across threads, restored."""

from __future__ import annotations

import gc
import threading

from aclpipe.gc_pause import paused_gc


def test_collection_is_off_inside_and_back_on_after_the_outermost_pause():
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause still holds
    assert gc.isenabled()


def test_a_pause_that_raises_still_restores_collection():
    try:
        with paused_gc():
            raise KeyError("boom")
    except KeyError:
        pass
    assert gc.isenabled()


def test_collection_stays_off_if_it_was_off_before():
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_overlapping_pauses_in_two_threads_end_with_collection_on():
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with paused_gc():
            inside.set()
            release.wait(5)

    thread = threading.Thread(target=other)
    with paused_gc():
        thread.start()
        inside.wait(5)
    assert not gc.isenabled()  # the other thread's pause is still on
    release.set()
    thread.join(5)
    assert gc.isenabled()
