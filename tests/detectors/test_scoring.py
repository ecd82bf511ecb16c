"""Residual scoring: Mahalanobis, thresholds, smoothing."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from fedrca.detectors.scoring import ResidualScorer, ScorerState
from fedrca.exceptions import ModelError, NotFittedError


def correlated(rng, n, d=4):
    L = np.tril(np.random.default_rng(99).normal(size=(d, d))) + 2 * np.eye(d)  # one fixed system
    return rng.normal(size=(n, d)) @ L.T, L @ L.T


def test_mahalanobis_matches_definition_and_thresholds_hold():
    rng = np.random.default_rng(0)
    R, _ = correlated(rng, 20000)
    scorer = ResidualScorer(percentile=99, shrinkage=0.0).fit(R)
    test = R[:100]
    centered = test - R.mean(0)
    sample_cov = np.cov(R, rowvar=False, bias=True)
    expected = np.einsum("ti,ij,tj->t", centered, np.linalg.inv(sample_cov), centered)
    assert np.allclose(scorer.score(test), expected, rtol=1e-8)
    fresh, _ = correlated(np.random.default_rng(1), 20000)
    assert abs(scorer.flags(scorer.score(fresh)).mean() - 0.01) < 0.004


def test_chi2_threshold():
    scorer = ResidualScorer(threshold="chi2", alpha=0.05).fit(np.random.default_rng(0).normal(size=(500, 3)))
    assert scorer.threshold_value == pytest.approx(scipy.stats.chi2.ppf(0.95, 3))


@pytest.mark.parametrize("smooth", ["d2", "residual"])
def test_smoothing_batch_equals_streaming(smooth):
    rng = np.random.default_rng(2)
    R, _ = correlated(rng, 600)
    scorer = ResidualScorer(ewma=0.2, smooth=smooth).fit(R[:400])
    batch = scorer.score(R[400:])
    scorer.reset()
    stream = np.concatenate([scorer.score(R[t : t + 1]) for t in range(400, 600)])
    assert np.allclose(batch, stream, rtol=1e-12, atol=1e-12)


def test_mewma_detects_small_persistent_shift_better_than_raw_distance():
    rng = np.random.default_rng(3)
    nominal = rng.normal(size=(3000, 4))
    shifted = rng.normal(size=(1000, 4)) + np.array([0.8, 0, 0, 0])
    raw = ResidualScorer(percentile=99).fit(nominal)
    mewma = ResidualScorer(percentile=99, ewma=0.1, smooth="residual").fit(nominal)
    fresh = rng.normal(size=(3000, 4))
    assert mewma.flags(mewma.score(fresh)).mean() < 0.03
    mewma.reset()
    assert mewma.flags(mewma.score(shifted)).mean() > 3 * raw.flags(raw.score(shifted)).mean()


def test_held_out_calibration_raises_threshold_for_heavier_tails():
    rng = np.random.default_rng(4)
    nominal = rng.normal(size=(1000, 3))
    heavy = [rng.standard_t(3, size=(500, 3))]
    plain = ResidualScorer(percentile=99).fit(nominal)
    calibrated = ResidualScorer(percentile=99).fit(nominal, calibration_residuals=heavy)
    assert calibrated.threshold_value > plain.threshold_value


def test_state_round_trip_and_errors():
    rng = np.random.default_rng(5)
    scorer = ResidualScorer(margin=1.5).fit(rng.normal(size=(200, 2)))
    state = ScorerState.from_dict(scorer.state.to_dict())
    assert np.array_equal(state.whitening, scorer.state.whitening) and state.threshold == scorer.threshold_value
    with pytest.raises(NotFittedError, match="call fit"):
        ResidualScorer().score(np.ones((2, 2)))
    for kwargs, message in [
        ({"percentile": 100}, "percentile"),
        ({"ewma": 0.0}, "ewma"),
        ({"threshold": "max"}, "threshold"),
        ({"margin": 0.5}, "margin"),
        ({"smooth": "x"}, "smooth"),
    ]:
        with pytest.raises(ModelError, match=message):
            ResidualScorer(**kwargs)
