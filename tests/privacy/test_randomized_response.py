"""Randomized response: keep probability, debiasing, determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats

from fedrca.exceptions import ModelError
from fedrca.privacy.randomized_response import RandomizedResponse


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0, 4.0])
def test_flip_rate_and_unbiased_rate_estimate(epsilon):
    n = 200_000
    rr = RandomizedResponse(epsilon, seed=42)
    p = math.exp(epsilon) / (1 + math.exp(epsilon))
    assert rr.keep_probability == pytest.approx(p)
    truth = np.random.default_rng(0).random(n) < 0.2
    published = rr.perturb(truth)
    kept = np.mean(published == truth)
    # binomial test of the keep probability at the 1e-4 level
    assert scipy.stats.binomtest(int(kept * n), n, p).pvalue > 1e-4
    estimate = rr.estimate_rate(published)
    se = math.sqrt(p * (1 - p) / n) / (2 * p - 1)
    assert abs(estimate - truth.mean()) < 4.5 * se
    # The naive rate is biased towards 1/2; the estimator is not.
    assert abs(published.mean() - truth.mean()) > abs(estimate - truth.mean())


def test_infinite_epsilon_publishes_the_truth():
    rr = RandomizedResponse(math.inf, seed=1)
    flags = np.random.default_rng(0).random((100, 2)) < 0.5
    assert np.array_equal(rr.perturb(flags), flags)
    assert rr.estimate_rate(flags) == pytest.approx(flags.mean())


def test_batch_and_row_by_row_draw_identically():
    flags = np.random.default_rng(1).random((50, 2)) < 0.3
    batch = RandomizedResponse(1.0, seed=3).perturb(flags)
    rr = RandomizedResponse(1.0, seed=3)
    rows = np.vstack([rr.perturb(flags[t : t + 1]) for t in range(50)])
    assert np.array_equal(batch, rows)


def test_state_restores_the_sequence_and_invalid_epsilon():
    rr = RandomizedResponse(1.0, seed=5)
    rr.perturb(np.zeros(10, bool))
    state = rr.get_state()
    first = rr.perturb(np.zeros(20, bool))
    rr.set_state(state)
    assert np.array_equal(rr.perturb(np.zeros(20, bool)), first)
    with pytest.raises(ModelError, match="> 0"):
        RandomizedResponse(0.0)
