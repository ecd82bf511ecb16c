"""``model.use_inputs: false``: the filter ignores the plant's inputs, the learner still gets them."""

from __future__ import annotations

import numpy as np

from fedrca.config import parse_training_settings
from fedrca.detectors.plant import PlantDetector
from fedrca.training.client import Client


def _data(T=600, seed=0):
    rng = np.random.default_rng(seed)
    U = 50.0 + 5.0 * rng.standard_normal((T, 2))  # valve positions in %, far from zero mean
    X = np.zeros((T, 2))
    for t in range(1, T):
        X[t] = 0.8 * X[t - 1] + 0.05 * (U[t - 1] - 50.0) + 0.3 * rng.standard_normal(2)
    Y = np.hstack([X @ rng.standard_normal((2, 4)), U]) + 0.1 * rng.standard_normal((T, 6))
    return Y, U


def test_a_detector_that_ignores_its_inputs_equals_one_given_none():
    Y, U = _data()
    ignoring = PlantDetector(n_states=2, use_inputs=False).fit(Y[:400], U[:400])
    without = PlantDetector(n_states=2).fit(Y[:400])
    driven = PlantDetector(n_states=2).fit(Y[:400], U[:400])
    assert ignoring.identified_model is not None and ignoring.identified_model.B is None
    assert driven.identified_model is not None and driven.identified_model.B is not None
    a, b = ignoring.step_batch(Y[400:], U[400:]), without.step_batch(Y[400:])
    assert np.array_equal(a.score, b.score) and np.array_equal(a.zc, b.zc)
    assert ignoring.thresholds == without.thresholds
    assert not np.array_equal(driven.step_batch(Y[400:], U[400:]).score, a.score)


def test_the_learner_standardises_inputs_the_filter_ignores():
    Y, U = _data()
    det = PlantDetector(n_states=2, use_inputs=False).fit(Y, U)
    settings = parse_training_settings({"rounds": 1})
    client = Client(det, Y, U, settings=settings)
    u = client.data.u_prev
    assert u is not None and client.input_dim == 2
    # u_prev(t) = standardised u(t-1): zero mean, unit spread on the nominal data; whatif.u_scale = std
    assert np.allclose(u[1:].mean(axis=0), 0.0, atol=0.05) and np.allclose(u[1:].std(axis=0), 1.0, atol=0.05)
    assert np.allclose(client.whatif_arrays()["whatif.u_scale"], U.std(axis=0, ddof=1))
