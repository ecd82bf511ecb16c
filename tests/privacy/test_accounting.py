"""DP mechanisms and accountant: known values, exact composition, clipping bounds, budget refusal."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.integrate
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from fedrca.exceptions import PrivacyBudgetExceeded
from fedrca.privacy.accountant import PrivacyAccountant
from fedrca.privacy.accounting import (
    classic_gaussian_sigma,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_mu,
    zcdp_epsilon,
)
from fedrca.privacy.mechanisms import GaussianMechanism, clip_rows


def hockey_stick(epsilon: float, mu: float) -> float:
    """delta(eps) = int max(p(x) - e^eps q(x), 0) dx for P = N(mu, 1), Q = N(0, 1), by quadrature."""

    def integrand(x):
        return max(scipy.stats.norm.pdf(x, mu) - math.exp(epsilon) * scipy.stats.norm.pdf(x), 0.0)

    # the integrand is positive only right of x* = eps/mu + mu/2
    start = epsilon / mu + mu / 2.0
    value, _ = scipy.integrate.quad(integrand, start, start + 40.0, epsabs=1e-14, epsrel=1e-10, limit=200)
    return value


@pytest.mark.parametrize(("epsilon", "mu"), [(0.5, 0.3), (1.0, 1.0), (3.0, 2.0), (8.0, 1.5)])
def test_privacy_profile_matches_the_hockey_stick_divergence(epsilon, mu):
    assert gaussian_delta(epsilon, mu) == pytest.approx(hockey_stick(epsilon, mu), rel=1e-6, abs=1e-15)


def test_known_values():
    # Balle & Wang (2018): the analytic Gaussian mechanism needs sigma ~ 3.73 for (1, 1e-5) with sensitivity 1,
    # where the classic bound (Dwork & Roth, Thm A.1) asks for sqrt(2 ln(1.25/delta)) = 4.84.
    assert 1.0 / gaussian_mu(1.0, 1e-5) == pytest.approx(3.7306, abs=1e-3)
    assert classic_gaussian_sigma(1.0, 1e-5, 1.0) == pytest.approx(4.8448, abs=1e-4)
    # zCDP (Bun & Steinke, Prop 1.3): rho + 2 sqrt(rho ln(1/delta)) at rho = 1/2 (sigma = sensitivity)
    assert zcdp_epsilon(0.5, 1e-5) == pytest.approx(0.5 + 2.0 * math.sqrt(0.5 * math.log(1e5)))
    assert zcdp_epsilon(0.5, 1e-5) == pytest.approx(5.2985, abs=1e-4)
    # the exact conversion is tighter than zCDP's and than the classic calibration
    assert gaussian_epsilon(1.0, 1e-5) == pytest.approx(4.3772, abs=1e-3) and gaussian_epsilon(1.0, 1e-5) < 5.2985
    assert hockey_stick(gaussian_epsilon(1.0, 1e-5), 1.0) == pytest.approx(1e-5, rel=1e-4)


@settings(max_examples=30, deadline=None)
@given(epsilon=st.floats(0.05, 30.0), delta=st.floats(1e-9, 1e-2))
def test_calibration_inverts_the_conversion(epsilon, delta):
    mu = gaussian_mu(epsilon, delta)
    assert gaussian_epsilon(mu, delta) == pytest.approx(epsilon, rel=1e-6, abs=1e-9)
    assert gaussian_delta(epsilon, mu) == pytest.approx(delta, rel=1e-6)


def test_composition_is_exact_and_never_looser_than_zcdp():
    acc = PrivacyAccountant(n_records=10, delta=1e-6)
    mu = gaussian_mu(0.5, 1e-6)
    for _ in range(16):
        acc.charge(mu**2, None, "states")
    # 16 releases of mu compose to exactly one release of 4 mu
    assert acc.mu() == pytest.approx(4 * mu)
    assert acc.epsilon() == pytest.approx(gaussian_epsilon(4 * mu, 1e-6))
    assert acc.epsilon() < acc.epsilon_zcdp() < 16 * 0.5


def test_windows_compose_per_record():
    acc = PrivacyAccountant(n_records=100, delta=1e-5)
    acc.charge(1.0, slice(0, 50), "states")
    acc.charge(1.0, slice(50, 100), "states")  # disjoint records: parallel composition
    assert acc.mu() == pytest.approx(1.0)
    acc.charge(1.0, slice(40, 60), "gradients")
    assert acc.mu() == pytest.approx(math.sqrt(2.0)) and acc.mu("states") == pytest.approx(1.0)
    assert acc.summary()["releases"] == {"states": 2, "gradients": 1}
    restored = PrivacyAccountant(n_records=100, delta=1e-5)
    restored.set_state(acc.get_state())
    assert restored.epsilon() == acc.epsilon()


def test_budget_is_refused_before_it_is_spent():
    acc = PrivacyAccountant(n_records=5, delta=1e-5, budget=gaussian_epsilon(1.0, 1e-5) + 1e-6, plant="reactor")
    acc.charge(0.5, None, "states")
    acc.charge(0.5, None, "states")  # exactly mu = 1: within the budget
    with pytest.raises(PrivacyBudgetExceeded, match=r"reactor.*budget"):
        acc.charge(0.01, slice(0, 1), "states")
    assert acc.mu() == pytest.approx(1.0)  # nothing was charged
    acc.charge(0.0, None, "states")  # a release without cost is always allowed


@settings(max_examples=50, deadline=None)
@given(
    X=arrays(np.float64, st.tuples(st.integers(1, 20), st.integers(1, 5)), elements=st.floats(-1e6, 1e6)),
    bound=st.floats(1e-3, 1e3),
)
def test_clipping_bounds_every_row_and_keeps_small_ones(X, bound):
    clipped, n = clip_rows(X, bound)
    norms = np.linalg.norm(X, axis=1)
    assert np.all(np.linalg.norm(clipped, axis=1) <= bound * (1 + 1e-12))
    small = norms <= bound
    assert np.array_equal(clipped[small], X[small])
    assert n == int(np.count_nonzero(~small))
    # clipping scales, never rotates
    big = ~small & (norms > 0)
    assert np.allclose(clipped[big] * norms[big, None] / bound, X[big], rtol=1e-9, atol=1e-9)


def test_mechanism_noise_has_the_calibrated_scale_and_bound():
    mech = GaussianMechanism(epsilon=2.0, delta=1e-5, clip=1.5)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20000, 3)) * 3.0
    (noised_a, _noised_b), clipped = mech.release([X, X[:, :2]], rng)
    sigma = mech.sigma(2)
    assert sigma == pytest.approx(2 * 1.5 * math.sqrt(2) / gaussian_mu(2.0, 1e-5))
    noise = noised_a - clip_rows(X, 1.5)[0]
    assert np.std(noise) == pytest.approx(sigma, rel=0.02) and abs(np.mean(noise)) < 0.05 * sigma
    assert clipped > 0
    off = GaussianMechanism(epsilon=math.inf, delta=1e-5, clip=1.0)
    (same,), n = off.release([X], rng)
    assert np.array_equal(same, X) and n == 0 and off.sigma(3) == 0.0
