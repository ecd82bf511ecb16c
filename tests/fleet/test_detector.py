"""The fleet detector as a plant detector: shared model, own weights, Z_c only."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedrca.application.site import build_detector
from fedrca.config import parse_config
from fedrca.datasets.fleet import fleet_patterns
from fedrca.detectors.factory import build_detector as build_plant_detector
from fedrca.detectors.factory import plant_seed
from fedrca.detectors.plant import PlantDetector
from fedrca.exceptions import ConfigError, DataError, NotFittedError
from fedrca.fleet.calibration import ewma_scores
from fedrca.fleet.collabdict import FleetSettings, fit_centralised
from fedrca.fleet.detector import FleetDetector, build_fleet_detector


@pytest.fixture(scope="module")
def shared():
    fleet = fleet_patterns(n_participants=4, n_samples=300, n_dims=3, seed=4)
    fit = fit_centralised(list(fleet.datasets.values()), FleetSettings(n_components=3, folds=3, seed=0))
    return fleet, fit


def test_a_plant_scores_with_the_shared_model_and_its_own_weights(shared):
    fleet, fit = shared
    X = fleet.datasets["p01"]
    det = FleetDetector("p01", model=fit.model, calibration=fit.calibrations[1], epsilon=math.inf).fit(X)
    # the plant's own cross-fitted threshold from the fleet run, not the fleet's pooled one
    assert det.threshold_value == fit.calibrations[1].threshold != fit.model.threshold
    # its own weights, re-estimated with the shared components fixed, are the fleet's for it
    assert np.abs(det.weights - fit.weights[1]).max() < 0.02
    assert np.allclose(det.score(X), fit.model.score(X, det.weights))
    result = det.step_batch(X + 4.0 * X.std(axis=0))
    assert result.zc.mean() > 0.9
    # Z_c only: Z_a is Z_c, and one randomized bit is published for both
    assert np.array_equal(result.za, result.zc) and np.array_equal(result.za_pub, result.zc_pub)
    assert result.x_c.shape == (len(X), 0) and result.r_c.shape == X.shape
    assert det.has_augmented is False


def test_published_flags_are_randomized_once_per_sample(shared):
    fleet, fit = shared
    X = fleet.datasets["p02"]
    det = FleetDetector(model=fit.model, epsilon=1.0, seed=3).fit(X)
    out = det.step_batch(np.vstack([X] * 10))
    flipped = np.mean(out.zc_pub != out.zc)
    keep = 1 / (1 + math.exp(-1.0))
    assert abs(flipped - (1 - keep)) < 0.02
    assert np.array_equal(out.za_pub, out.zc_pub)


def test_inputs_are_modelled_as_extra_variables():
    rng = np.random.default_rng(0)
    Y, U = rng.normal(size=(400, 2)), rng.normal(size=(400, 1))
    det = FleetDetector(n_components=1, folds=0).fit(Y, U)
    assert det.fitted_model.n_dims == 3
    shifted = det.step_batch(Y[:50], U[:50] + 6.0)
    assert shifted.zc.mean() > 0.9


def test_mismatched_or_unfitted_use_is_refused(shared):
    _, fit = shared
    with pytest.raises(NotFittedError, match="fit"):
        FleetDetector().step_batch(np.zeros((2, 3)))
    with pytest.raises(DataError, match="same sensors"):
        FleetDetector(model=fit.model).fit(np.zeros((10, 4)))
    det = FleetDetector(model=fit.model).fit(np.random.default_rng(1).normal(size=(50, 3)))
    with pytest.raises(DataError, match="expected 3"):
        det.step_batch(np.zeros((2, 5)))
    with pytest.raises(DataError, match="NaN or inf"):
        det.step_batch(np.full((2, 3), np.inf))


def test_rows_with_a_missing_value_are_degraded_and_the_rest_scored_as_without_them(shared):
    _, fit = shared
    rng = np.random.default_rng(1)
    det = FleetDetector(model=fit.model, ewma=0.3, epsilon=1.0).fit(rng.normal(size=(200, 3)))
    Y = rng.normal(size=(60, 3)) + 4.0
    Y[20:25, 1] = np.nan
    state = det.get_state()
    out = det.step_batch(Y)
    assert out.degraded.tolist() == [20 <= t < 25 for t in range(60)]
    assert not (out.zc[20:25].any() or out.zc_pub[20:25].any())
    assert np.isnan(out.r_c[20:25]).all() and np.isfinite(out.d2_c).all()
    det.set_state(state)
    parts = [det.step_batch(Y[a:b]) for a, b in ((0, 20), (20, 25), (25, 60))]
    assert np.allclose(np.concatenate([p.d2_c for p in parts]), out.d2_c)
    assert np.array_equal(np.concatenate([p.zc_pub for p in parts]), out.zc_pub)


def test_a_site_builds_the_fleet_detector_for_a_fleet_plant_and_the_plant_detector_for_the_others(shared):
    _, fit = shared
    config = parse_config(
        {
            "site": "mixed",
            "plants": [
                {"name": "own", "sensors": ["a"]},
                {"name": "member", "sensors": ["b", "c", "d"], "detector": {"kind": "fleet", "percentile": 99.0}},
            ],
            "privacy": {"flag_epsilon": 2.0, "seed": 5},
        }
    )
    own, member = config.plants
    det = build_detector(config, member, fleet_model=fit.model)
    assert isinstance(det, FleetDetector) and det.model is fit.model
    # the plant's own seed and budget, like every plant detector's
    assert det.seed == plant_seed(config, member) == 5 * 1000 + 1 and det.epsilon == 2.0 and det.percentile == 99.0
    assert isinstance(build_detector(config, own), PlantDetector)
    # the per-plant core builds plant detectors only, and says which plant and key when asked for a fleet's
    with pytest.raises(ConfigError, match=r"^plants\[1\]\.detector\.kind: plant 'member' runs the fleet detector"):
        build_plant_detector(config, member)
    with pytest.raises(ConfigError, match=r"^plants\[0\]\.detector\.kind: plant 'own' runs the plant detector"):
        build_fleet_detector(config, own)


def test_without_the_fleet_runs_calibration_a_plant_calibrates_on_its_own_nominal_scores(shared):
    fleet, fit = shared
    X = fleet.datasets["p02"]
    own = FleetDetector("p02", model=fit.model).fit(X)
    scores = fit.model.score(X, own.weights)
    # the conformal 99.5th percentile of its 300 scores: the ceil(301 x 0.995) = 300th smallest
    assert own.rule.rule == "own" and own.threshold_value == np.sort(scores)[299]
    # scope "fleet", or too few scores to certify the percentile: the fleet's one threshold
    assert FleetDetector(model=fit.model, scope="fleet").fit(X).threshold_value == fit.model.threshold
    few = FleetDetector(model=fit.model).fit(X[:150])
    assert few.rule.rule == "fleet" and few.threshold_value == fit.model.threshold


def test_a_smoothing_detector_alarms_on_the_ewma_of_its_score_and_carries_it_across_batches(shared):
    fleet, fit = shared
    X = fleet.datasets["p03"]
    det = FleetDetector("p03", model=fit.model, ewma=0.1).fit(X)
    assert det.rule.ewma == 0.1
    raw = fit.model.score(X, det.weights)
    # calibrated on the smoothed nominal scores
    assert det.threshold_value == np.sort(ewma_scores(raw, 0.1))[299]
    whole = det.step_batch(X)
    assert np.allclose(whole.d2_c, ewma_scores(raw, 0.1)) and np.array_equal(whole.zc, whole.d2_c > det.threshold_value)
    # two batches give the one stream; reset starts a new one; the state carries the last value
    det.reset()
    first = det.step_batch(X[:100])
    state = det.get_state()
    second = det.step_batch(X[100:])
    assert np.allclose(np.concatenate([first.d2_c, second.d2_c]), whole.d2_c)
    det.set_state(state)
    assert np.array_equal(det.step_batch(X[100:]).d2_c, second.d2_c)
    det.reset()
    assert det.step_batch(X[100:101]).d2_c[0] == raw[100]
    # a small persistent shift: the smoothed statistic sees it, the score alone hardly
    shifted = X[:200] + 0.8 * X.std(axis=0)
    plain = FleetDetector("p03", model=fit.model).fit(X)
    det.reset()
    assert det.step_batch(shifted).zc[50:].mean() > plain.step_batch(shifted).zc[50:].mean() + 0.3
