"""Greedy picks and seeded sampling."""

from __future__ import annotations

import numpy as np
import pytest

from aclpipe.decode import Sampler


def test_greedy_takes_the_first_largest():
    assert Sampler().pick(np.array([0.5, 2.0, 2.0, -1.0], np.float32)) == 1


def test_top_k_keeps_only_the_k_largest():
    logits = np.array([5.0, 4.9, -3.0, 4.8], np.float32)
    picks = {Sampler(temperature=10.0, top_k=2, seed=seed).pick(logits) for seed in range(40)}
    assert picks == {0, 1}


def test_a_seed_repeats_its_draws():
    logits = np.linspace(-1, 1, 50, dtype=np.float32)
    first, second = Sampler(temperature=1.0, seed=3), Sampler(temperature=1.0, seed=3)
    assert [first.pick(logits) for _ in range(20)] == [second.pick(logits) for _ in range(20)]


@pytest.mark.parametrize("options", [{"temperature": -1.0}, {"temperature": float("nan")}, {"top_k": 0}])
def test_bad_options_are_refused(options):
    with pytest.raises(ValueError):
        Sampler(**options)
