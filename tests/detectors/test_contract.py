"""The contract every fedrca detector satisfies (seeding, pickling, batch == streaming,
nominal data scores low). Add new detectors to DETECTORS."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

from fedrca.datasets import nonlinear_two_plant
from fedrca.detectors import PlantDetector, load_plugin
from fedrca.fleet.detector import FleetDetector
from tests.detectors import plugins


def _nonlinear():
    train = nonlinear_two_plant(n_samples=1500, seed=1)
    test = nonlinear_two_plant(n_samples=400, seed=2)
    return train.plant_data(1), test.plant_data(1)


def _vendor():
    return plugins.simulate(1500, seed=1), plugins.simulate(400, seed=2)


DETECTORS = {
    "identified-linear": (lambda seed: PlantDetector("p", n_states=2, seed=seed, epsilon=2.0), _nonlinear),
    "identified-rff-mewma": (
        lambda seed: PlantDetector(
            "p", n_states=2, features="rff", n_features=16, ewma=0.2, smooth="residual", seed=seed, epsilon=1.0
        ),
        _nonlinear,
    ),
    "plugin-ekf": (
        lambda seed: PlantDetector(
            "p", model=load_plugin("tests.detectors.plugins:damped_filter"), seed=seed, epsilon=1.0
        ),
        _vendor,
    ),
    "fleet-ggm": (
        lambda seed: FleetDetector("p", n_components=2, folds=3, max_iter=30, epsilon=2.0, seed=seed),
        _nonlinear,
    ),
    "fleet-ggm-ewma": (
        lambda seed: FleetDetector("p", n_components=2, folds=3, max_iter=30, ewma=0.2, epsilon=2.0, seed=seed),
        _nonlinear,
    ),
}


@pytest.fixture(params=sorted(DETECTORS))
def case(request):
    factory, data = DETECTORS[request.param]
    train, test = data()
    return factory, train, test


def _trained(factory, train, seed):
    det = factory(seed).fit(train)
    if isinstance(det, PlantDetector):  # the fleet detector has no augmentation to train
        theta = 0.02 * np.random.default_rng(seed).normal(size=det.augmentation.theta.shape)
        det.set_parameters(theta, version="t")
    return det


def _threshold(det):
    return det.scorers[0].threshold_value if isinstance(det, PlantDetector) else det.threshold_value


def test_same_seed_same_output_other_seed_other_flags(case):
    factory, train, test = case
    a = _trained(factory, train, 3).step_batch(test)
    b = _trained(factory, train, 3).step_batch(test)
    c = _trained(factory, train, 4).step_batch(test)
    assert np.array_equal(a.zc_pub, b.zc_pub) and np.array_equal(a.d2_a, b.d2_a)
    # epsilon < inf: the published flags depend on the seed
    assert not np.array_equal(np.column_stack([a.zc_pub, a.za_pub]), np.column_stack([c.zc_pub, c.za_pub]))


def test_pickle_round_trip_continues_identically(case):
    factory, train, test = case
    det = _trained(factory, train, 1)
    det.step_batch(test[:100])
    clone = pickle.loads(pickle.dumps(det))
    x, y = det.step_batch(test[100:]), clone.step_batch(test[100:])
    assert np.array_equal(x.zc_pub, y.zc_pub) and np.array_equal(x.d2_c, y.d2_c)


def test_batch_equals_streaming(case):
    factory, train, test = case
    det = _trained(factory, train, 2)
    start = copy.deepcopy(det.get_state())
    batch = det.step_batch(test)
    det.set_state(start)
    for t, y in enumerate(test):
        one = det.step(y)
        assert one.zc_pub[0] == batch.zc_pub[t] and one.za_pub[0] == batch.za_pub[t]
        assert np.isclose(one.d2_a[0], batch.d2_a[t], rtol=1e-9)


def test_score_does_not_advance_state_and_nominal_scores_low(case):
    factory, train, test = case
    det = _trained(factory, train, 0)
    before = copy.deepcopy(det.get_state())
    scores = det.score(test)
    assert det.get_state() == before
    assert np.mean(scores > _threshold(det)) < 0.05
    anomalous = test + 5.0 * test.std(axis=0)
    assert np.mean(det.score(anomalous) > _threshold(det)) > 0.5
