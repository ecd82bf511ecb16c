"""Each participant's own threshold: staggered cross-fitting, the EWMA statistic, the conformal quantile."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedrca.exceptions import ConfigError
from fedrca.fleet.calibration import (
    Calibration,
    conformal_percentile,
    conformal_rank,
    ewma_scores,
    held_out_block,
    own_calibration,
)
from fedrca.fleet.collabdict import FleetSettings, fit_centralised


@given(st.integers(1, 5000), st.sampled_from([90.0, 95.0, 99.0, 99.5, 99.9]))
def test_the_conformal_rank_is_the_smallest_that_bounds_a_new_scores_exceedance(n, p):
    k = conformal_rank(n, p)
    # P(new > k-th smallest of n exchangeable) = (n + 1 - k) / (n + 1) <= 1 - p/100, and k - 1 would not do
    if k is None:
        assert (n + 1 - n) / (n + 1) > 1 - p / 100 + 1e-12
    else:
        assert (n + 1 - k) / (n + 1) <= 1 - p / 100 + 1e-12 < (n + 2 - k) / (n + 1)
        assert conformal_percentile(n, p) == pytest.approx(100 * k / n)


def test_the_conformal_threshold_keeps_new_nominal_exceedances_at_the_percentile():
    rng = np.random.default_rng(0)
    trials = 20_000
    scores = rng.standard_normal((trials, 199))
    new = rng.standard_normal(trials)
    thresholds = np.array([own_calibration([s], 99.5, None).threshold for s in scores[:2000]])
    # with n = 199 the threshold is the largest score: a new one exceeds it with probability 1/200
    assert np.array_equal(thresholds, scores[:2000].max(axis=1))
    rate = np.mean(new > scores.max(axis=1))
    assert abs(rate - 0.005) < 3 * np.sqrt(0.005 * 0.995 / trials)
    assert own_calibration([scores[0, :198]], 99.5, None) is None


def test_every_row_is_held_out_once_and_participants_hold_out_different_blocks():
    for n, folds in ((100, 5), (7, 3), (960, 5)):
        for index in range(4):
            rows = np.concatenate([held_out_block(n, folds, f, index) for f in range(folds)])
            assert np.array_equal(np.sort(rows), np.arange(n))
        # in one fold, consecutive participants hold out consecutive blocks
        starts = [held_out_block(n, folds, 0, i)[0] for i in range(folds)]
        assert len(set(starts)) == folds


def test_the_ewma_is_its_recursion_and_a_stream_split_in_two_is_the_same_stream():
    a = np.random.default_rng(1).exponential(size=300)
    lam = 0.1
    loop = [a[0]]
    for x in a[1:]:
        loop.append(lam * x + (1 - lam) * loop[-1])
    assert np.allclose(ewma_scores(a, lam), loop, rtol=0, atol=1e-12)
    first = ewma_scores(a[:120], lam)
    assert np.allclose(np.concatenate([first, ewma_scores(a[120:], lam, last=first[-1])]), loop, rtol=0, atol=1e-12)
    assert np.array_equal(ewma_scores(a, 1.0), a)
    with pytest.raises(ConfigError, match="ewma"):
        ewma_scores(a, 0.0)


def test_each_held_out_block_is_smoothed_as_its_own_stream():
    blocks = [np.full(150, 1.0), np.full(150, 9.0)]
    # smoothed across the join, the second block would start near 1 and climb; on its own it is 9 throughout
    # the 181st smallest of the 300: a 9 when each block is its own stream, a climbing value when they are one
    assert own_calibration(blocks, 60.0, 0.1).threshold == 9.0
    assert own_calibration([np.concatenate(blocks)], 60.0, 0.1).threshold < 8.8


def _run_with_startup(rng: np.random.Generator, n: int = 500) -> np.ndarray:
    X = rng.normal(size=(n, 3))
    X[:100, 0] += 4.0  # a start-up every run goes through, in its first fifth
    return X


def test_staggered_blocks_keep_a_shared_regime_in_every_fold():
    rng = np.random.default_rng(0)
    fit = fit_centralised([_run_with_startup(rng) for _ in range(4)], FleetSettings(n_components=1, folds=5, seed=0))
    fresh = np.concatenate([fit.model.score(_run_with_startup(rng), fit.weights[0]) for _ in range(40)])
    truth = np.percentile(fresh, 99.5)
    # every participant's own threshold is close to the 99.5th percentile of new runs' scores
    # (measured 8.8-10.5 vs 9.2); holding the start-up out of every participant in the same fold
    # instead gives 19.4: the start-up then scores as a regime the fold's model never saw
    for c in fit.calibrations:
        assert c.rule == "own" and c.scores == 500
        assert 0.8 * truth < c.threshold < 1.25 * truth
        assert np.mean(fresh > c.threshold) < 0.02


def test_a_calibration_is_validated_and_survives_its_dict():
    c = Calibration(3.5, 0.1, "own", 960)
    assert Calibration.from_dict(c.to_dict()) == c
    for bad, match in (
        ({"threshold": float("nan")}, "finite"),
        ({"ewma": 1.5}, "ewma"),
        ({"rule": "mine"}, "rule"),
        ({"scores": -1}, "scores"),
    ):
        with pytest.raises(ConfigError, match=match):
            Calibration(**{**c.to_dict(), **bad})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="lacks 'rule'"):
        Calibration.from_dict({"threshold": 1.0, "ewma": None, "scores": 3})
    with pytest.raises(ConfigError, match="wrong type"):
        Calibration.from_dict({"threshold": "high", "ewma": None, "rule": "own", "scores": 3})
