"""Flag likelihoods and the randomized-response channel."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrca.exceptions import DataError
from fedrca.privacy.randomized_response import RandomizedResponse, rr_channel
from fedrca.rca.flagmodel import AUGMENTED, NORMAL, FlagModel, encode_states, nominal_state_rates

probs = st.floats(0.0, 1.0)


@settings(max_examples=50, deadline=None)
@given(
    eps=st.floats(0.05, 20.0),
    miss=st.lists(probs, min_size=1, max_size=2),
    leak=probs,
    vis=st.lists(st.floats(0.01, 1.0), min_size=1, max_size=3),
    sep=st.lists(probs, min_size=1, max_size=3),
    imperfect=probs,
)
def test_every_role_distribution_is_a_distribution(eps, miss, leak, vis, sep, imperfect):
    nominal = np.array([[0.97, 0.01, 0.01, 0.01], [0.99, 0.0, 0.0, 0.01]])
    model = FlagModel(nominal, eps, miss, leak, vis, sep, imperfect)
    assert model.n_components == 2 + len(miss) + len(vis) * len(sep) == len(model.components)
    np.testing.assert_allclose(model.emission.sum(axis=2), 1.0, atol=1e-12)
    np.testing.assert_allclose(rr_channel(eps).sum(axis=0), 1.0, atol=1e-12)
    assert np.all(model.emission > 0)  # randomized response makes every published pair possible


def test_channel_matches_the_detectors_randomized_response():
    eps = 1.5
    rr = RandomizedResponse(eps, seed=3)
    truth = np.tile(np.array([[1, 0]], dtype=bool), (200_000, 1))
    published = encode_states(rr.perturb(truth).astype(int))
    freq = np.bincount(published, minlength=4) / len(published)
    np.testing.assert_allclose(freq, rr_channel(eps)[:, 2], atol=4e-3)


def test_without_privacy_roles_have_the_table_supports():
    model = FlagModel(np.array([[1.0, 0, 0, 0]]), math.inf, [0.0], 0.0, [0.5], [1.0])
    # normal only (0,0); root only (1,1); propagated (1,0) or (0,0); augmented (0,1) or (0,0)
    assert model.emission[0, NORMAL].tolist() == [1.0, 0.0, 0.0, 0.0]
    assert model.emission[0, model.root.start].tolist() == [0.0, 0.0, 0.0, 1.0]
    assert model.emission[0, model.propagated.start].tolist() == [0.5, 0.0, 0.5, 0.0]
    assert model.emission[0, AUGMENTED].tolist() == [0.5, 0.5, 0.0, 0.0]
    assert model.alarm_posterior.tolist() == [0.0, 0.0, 1.0, 1.0]


def test_untrained_detectors_make_propagated_effects_look_like_roots():
    # Z_a equals Z_c without training: an effect shows (1, 1), only persistence tells it from a root
    model = FlagModel(np.array([[0.99, 0, 0, 0.01]]), math.inf, [0.1], 0.0, [0.3, 0.9], [0.0])
    assert model.emission[0, :, 2].max() == 0.0  # (1, 0) impossible
    persistent = model.log_emission[0, :, 3]  # per-row log-likelihood of (1, 1)
    quiet = model.log_emission[0, :, 0]
    root, prop = model.root.start, model.propagated.start
    assert persistent[root] == pytest.approx(persistent[prop + 1])  # v = 0.9 = 1 - miss
    assert quiet[prop] > quiet[root]  # with one miss rate, an intermittent plant is better explained as an effect


def test_nominal_rates_are_smoothed_and_floored():
    flags = {"a": np.zeros((1000, 2), dtype=bool), "b": np.tile([[1, 1]] * 10 + [[0, 0]] * 90, (10, 1))}
    rates = nominal_state_rates(flags, ["a", "b"], floor=0.01)
    np.testing.assert_allclose(rates.sum(axis=1), 1.0)
    assert rates[0, 2] + rates[0, 3] == pytest.approx(0.01)  # floored
    assert rates[1, 3] == pytest.approx(100.5 / 1002)  # estimated (Laplace)
    with pytest.raises(DataError, match="no nominal flags for plant 'c'"):
        nominal_state_rates(flags, ["a", "c"])
    with pytest.raises(DataError, match="probability"):
        FlagModel(rates, 1.0, [1.5], 0.0, [0.5], [0.5])
