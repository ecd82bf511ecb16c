"""Identification of a proprietary linear model from nominal data."""

from __future__ import annotations

import numpy as np
import pytest

from fedrca.datasets import linear_multiplant
from fedrca.detectors.identify import identify_linear_model
from fedrca.exceptions import DataError, ModelError


def test_energy_selects_state_dimension_and_is_deterministic():
    data = linear_multiplant(n_samples=1500, n_plants=1, sensors_per_plant=8, states_per_plant=3, seed=1)
    a = identify_linear_model(data.Y, energy=0.95)
    b = identify_linear_model(data.Y.copy(), energy=0.95)
    assert 1 <= a.n_states <= 8 and a.energy >= 0.95
    assert np.array_equal(a.A, b.A) and np.array_equal(a.C, b.C)
    assert identify_linear_model(data.Y, energy=0.5).n_states <= a.n_states
    assert identify_linear_model(data.Y, n_states=3).n_states == 3


def test_recovers_dynamics_up_to_similarity():
    # Eigenvalues of A are invariant to the state basis: the identified ones match the truth.
    data = linear_multiplant(
        n_samples=20000, n_plants=1, sensors_per_plant=6, states_per_plant=2, sensor_noise=0.02, state_noise=0.3, seed=2
    )
    model = identify_linear_model(data.Y, n_states=2)
    true = np.sort_complex(np.linalg.eigvals(data.A))
    found = np.sort_complex(np.linalg.eigvals(model.A))
    assert np.allclose(true, found, atol=0.05)


def test_inputs_give_b_matrix():
    rng = np.random.default_rng(0)
    U = rng.normal(size=(2000, 1))
    x = np.zeros(2)
    Y = np.empty((2000, 4))
    C = rng.normal(size=(4, 2))
    for t in range(2000):
        x = 0.5 * x + np.array([1.0, -1.0]) * (U[t - 1, 0] if t else 0.0) + 0.1 * rng.normal(size=2)
        Y[t] = C @ x + 0.01 * rng.normal(size=4)
    model = identify_linear_model(Y, U, n_states=2)
    assert model.B is not None and model.B.shape == (2, 1)
    assert np.linalg.norm(model.B) > 0.5  # the input clearly drives the state


def test_bad_inputs():
    with pytest.raises(DataError, match="inf"):
        identify_linear_model(np.array([[1.0, np.inf]] * 5))
    with pytest.raises(DataError, match=r"sensor 1 has no observed value"):
        identify_linear_model(np.array([[1.0, np.nan], [2.0, np.nan], [0.5, np.nan]]))
    with pytest.raises(ModelError, match="n_states must be between 1 and 2"):
        identify_linear_model(np.random.default_rng(0).normal(size=(10, 2)), n_states=3)
    with pytest.raises(DataError, match="at least 3"):
        identify_linear_model(np.ones((2, 2)))
