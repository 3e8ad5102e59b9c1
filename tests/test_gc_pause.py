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


class _Node:
    """A tracked object (instances of plain classes are followed by the collector)."""


def _generation_of(target: object) -> int | None:
    for generation in range(3):
        if any(obj is target for obj in gc.get_objects(generation=generation)):
            return generation
    return None


def test_what_a_pause_built_goes_to_the_oldest_generation_unscanned():
    with paused_gc():
        built = _Node()
    assert _generation_of(built) == 2  # young collections will not scan it again


def test_a_pause_that_raises_promotes_nothing():
    young = None
    try:
        with paused_gc():
            young = _Node()
            raise KeyError("boom")
    except KeyError:
        pass
    # Young: an automatic collection may have moved it one generation up since, never two.
    assert _generation_of(young) in (0, 1)


def test_objects_the_process_froze_stay_frozen():
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with paused_gc():
            built = _Node()
        assert gc.get_freeze_count() == frozen  # never handed back to the collector
        assert _generation_of(built) in (0, 1)  # young (see above)
    finally:
        gc.unfreeze()
