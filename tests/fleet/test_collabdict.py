"""The CollabDict mixture core: statistics, E-step, MAP M-step, score, l-diversity, thresholds."""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import multivariate_normal

from fedrca.datasets.fleet import fleet_patterns
from fedrca.exceptions import ConfigError, DataError, PrivacyWarning
from fedrca.fleet.collabdict import (
    FleetModel,
    FleetSettings,
    GlobalLearner,
    LocalLearner,
    anomaly_score,
    e_step,
    fit_centralised,
    initialise_centralised,
    l_diversity,
    m_step,
    pack_statistics,
    pooled_quantile,
    posterior_pseudo_samples,
    unpack_statistics,
)


def _random_precisions(rng, K, M):
    A = rng.normal(size=(K, M, M))
    return np.einsum("kij,klj->kil", A, A) + M * np.eye(M)


@settings(max_examples=30, deadline=None)
@given(K=st.integers(1, 4), M=st.integers(1, 6), seed=st.integers(0, 2**32 - 1))
def test_statistics_pack_round_trip(K, M, seed):
    rng = np.random.default_rng(seed)
    N, m = rng.random(K), rng.normal(size=(K, M))
    C = _random_precisions(rng, K, M)
    N2, m2, C2, extra = unpack_statistics(pack_statistics(N, m, C, [1.5, 2.0]), K, M)
    assert np.array_equal(N, N2) and np.array_equal(m, m2) and np.array_equal(C, C2)
    assert extra.tolist() == [1.5, 2.0]


def test_e_step_matches_the_equations_sample_by_sample():
    rng = np.random.default_rng(0)
    K, M = 3, 4
    X = rng.normal(size=(50, M))
    means, P = rng.normal(size=(K, M)), _random_precisions(rng, K, M)
    w = np.array([0.2, 0.5, 0.3])
    est = e_step(X, w, means, P)
    dens = np.stack([w[k] * multivariate_normal(means[k], np.linalg.inv(P[k])).pdf(X) for k in range(K)], axis=1)
    r = dens / dens.sum(axis=1, keepdims=True)
    assert np.allclose(est.resp, r, atol=1e-12)
    assert np.allclose(est.N, r.sum(axis=0))
    assert np.allclose(est.m, r.T @ X)
    assert np.allclose(est.C, sum(np.einsum("k,i,j->kij", r[n], X[n], X[n]) for n in range(len(X))))
    assert math.isclose(est.loglik, float(np.log(dens.sum(axis=1)).sum()), rel_tol=1e-12)


def test_anomaly_score_is_equation_20():
    rng = np.random.default_rng(1)
    K, M = 2, 3
    X = rng.normal(size=(20, M)) * 3
    means, P = rng.normal(size=(K, M)), _random_precisions(rng, K, M)
    w = np.array([0.7, 0.3])
    ref = np.zeros(len(X))
    dens = np.stack([w[k] * multivariate_normal(means[k], np.linalg.inv(P[k])).pdf(X) for k in range(K)], axis=1)
    r = dens / dens.sum(axis=1, keepdims=True)
    for k in range(K):
        d = X - means[k]
        ref += r[:, k] * (
            M / 2 * math.log(2 * math.pi)
            - 0.5 * np.linalg.slogdet(P[k])[1]
            + 0.5 * np.einsum("ni,ij,nj->n", d, P[k], d)
        )
    assert np.allclose(anomaly_score(X, w, means, P), ref, rtol=1e-12)


def test_m_step_is_the_map_update_with_a_full_l1_graphical_lasso():
    rng = np.random.default_rng(2)
    M, n = 5, 300.0
    X = rng.normal(size=(int(n), M)) @ rng.normal(size=(M, M)) * 0.5
    N_bar, m_sum, C_sum = np.array([n]), X.sum(axis=0)[None], (X.T @ X)[None]
    rho, lam0 = 20.0, 2.0
    means, P = m_step(N_bar, m_sum, C_sum, rho, lam0, glasso_tol=1e-10)
    m_bar = X.mean(axis=0)
    assert np.allclose(means[0], n * m_bar / (lam0 + n))
    sigma = X.T @ X / n - np.outer(m_bar, m_bar) + lam0 / (lam0 + n) * np.outer(m_bar, m_bar)
    # optimality of  (N+1)/N ln|L| - Tr(L Sigma) - rho/N ||L||_1  (every entry penalised):
    # gradient (N+1)/N L^-1 - Sigma - rho/N G = 0 with G in the subdifferential of ||L||_1
    G = ((n + 1) / n * np.linalg.inv(P[0]) - sigma) * n / rho
    nz = np.abs(P[0]) > 1e-8
    assert np.allclose(G[nz], np.sign(P[0][nz]), atol=1e-4)
    assert np.all(np.abs(G[~nz]) <= 1 + 1e-4)
    assert np.allclose(np.diag(G), 1.0, atol=1e-4)  # the diagonal is penalised too
    assert (~nz).any()  # and the result is sparse


def test_centralised_fit_recovers_shared_patterns_and_weights():
    fleet = fleet_patterns(n_participants=5, n_samples=300, n_dims=3, seed=4)
    fit = fit_centralised(list(fleet.datasets.values()), FleetSettings(n_components=3, folds=0, seed=1))
    model = fit.model
    true_means = (fleet.means - model.center) / model.scale
    # every true pattern has a learned mean close to it (standardised units)
    dist = np.linalg.norm(true_means[:, None, :] - model.means[None, :, :], axis=2)
    match = dist.argmin(axis=1)
    assert sorted(match.tolist()) == [0, 1, 2] and dist.min(axis=1).max() < 0.15
    learned = np.array(fit.weights)[:, match]
    assert np.abs(learned - fleet.weights).max() < 0.08


def tight_fleet_data(seed: int, n_participants: int = 5, n: int = 200) -> list[np.ndarray]:
    """Participants with TEP-like raw columns: a tight sensor with a large mean (like XMEAS(9) in
    raw units, mean 1e4, sd 1e-2), a large-mean wide one, a small one and a constant one."""
    rng = np.random.default_rng(seed)
    out = []
    for s in range(n_participants):
        tight = 1e4 + 1e-2 * rng.normal(size=n) + 3e-3 * s
        wide = 4500.0 + 30.0 * rng.normal(size=n)
        small = 0.2 + 0.05 * rng.normal(size=n) + 0.3 * tight  # correlated with the tight one
        out.append(np.column_stack([tight, wide, small, np.full(n, 7.5)]))
    return out


def test_staged_standardiser_keeps_constant_columns_constant():
    data = tight_fleet_data(seed=11)
    pooled = np.vstack(data)
    init = initialise_centralised(data, FleetSettings(n_components=2))
    exact = pooled.std(axis=0, ddof=1)
    assert np.allclose(init.scaler.std[:3], exact[:3], rtol=1e-9, atol=0.0)
    assert init.scaler.std[3] == 1.0  # constant: the fallback, as Standardizer.fit
    assert np.allclose(init.scaler.mean, pooled.mean(axis=0), rtol=1e-13)
    assert init.n_total == len(pooled)
    # raw sums would not do: E[x^2] - E[x]^2 of the tight column is pure rounding
    n, s1, s2 = len(pooled), pooled.sum(axis=0), (pooled**2).sum(axis=0)
    raw_var = (s2 - s1**2 / n) / (n - 1)
    assert abs(raw_var[0] - exact[0] ** 2) > 1e-3 * exact[0] ** 2


def test_pruning_drops_components_nobody_uses():
    rng = np.random.default_rng(5)
    data = [rng.normal(size=(200, 2)) for _ in range(3)]
    s = FleetSettings(n_components=6, folds=0, prune=0.01, seed=0)
    init = initialise_centralised(data, s)
    # two starting means in the data, four far outside it: nobody's samples go there
    far = np.array([[0.5, 0.0], [-0.5, 0.0], [40.0, 40.0], [-40.0, 40.0], [40.0, -40.0], [-40.0, -40.0]])
    fit = fit_centralised(data, s, init=dataclasses.replace(init, means=far))
    assert fit.model.n_components == 2
    assert all(len(w) == 2 and math.isclose(w.sum(), 1.0) for w in fit.weights)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), pct=st.floats(50.0, 99.9))
def test_two_pass_histogram_quantile_is_within_the_fine_bin(seed, pct):
    rng = np.random.default_rng(seed)
    parts = [rng.exponential(rng.uniform(0.5, 50), size=rng.integers(20, 300)) for _ in range(4)]
    pooled = np.sort(np.concatenate(parts))
    got = pooled_quantile(parts, pct)
    # the counts locate the sample of rank ceil(pct/100 N) to one fine bin: a coarse (log) bin is
    # 9.5% of its value wide and the fine grid splits it into 256
    x = pooled[max(math.ceil(pct / 100 * len(pooled)), 1) - 1]
    assert abs(got - x) <= 0.1 * x / 256 + 1e-3 / 256 + 1e-12


def test_l_diversity_is_low_when_one_sample_dominates_and_high_otherwise():
    rng = np.random.default_rng(6)
    M = 3
    P = np.eye(M)[None]
    normal = rng.normal(size=(200, M))
    H_normal = l_diversity(normal, np.ones((200, 1)), P)[0]
    assert H_normal > math.log(20)
    # one sample at the centre, the others far out in symmetric pairs: the released
    # mean is that one sample
    x0 = np.array([0.3, -0.2, 0.1])
    far = np.concatenate([x0 + 12 * np.eye(M), x0 - 12 * np.eye(M)])
    dominant = np.vstack([x0, far])
    H_dom = l_diversity(dominant, np.ones((len(dominant), 1)), P)[0]
    assert H_dom < 1e-6
    assert np.allclose(dominant.mean(axis=0), x0)  # the released mean/count is x0 itself
    # entropy never exceeds ln N, and identical samples give exactly ln N
    assert H_normal <= math.log(200)
    assert math.isclose(l_diversity(np.ones((7, M)), np.ones((7, 1)), P)[0], math.log(7), rel_tol=1e-12)


def test_monitor_warns_and_can_add_posterior_pseudo_samples():
    M = 3
    x0 = np.zeros(M)
    dominant = np.vstack([x0, x0 + 12 * np.eye(M), x0 - 12 * np.eye(M)])
    nominal = np.random.default_rng(0).normal(size=(100, M))
    init = initialise_centralised([nominal], FleetSettings(n_components=1))
    for noise in (False, True):
        s = FleetSettings(n_components=1, l0=2.0, privacy_noise=noise, noise_samples=10)
        glob = GlobalLearner(init, s)
        learner = LocalLearner(dominant, 1, s, np.random.default_rng(1))
        with pytest.warns(PrivacyWarning, match="l-diversity"):
            theta = learner.local_update(glob)
        assert learner.fired
        released_count = unpack_statistics(theta, 1, M)[0][0]
        expected_count = len(dominant) + 10 if noise else len(dominant)
        assert released_count == expected_count
    normal = LocalLearner(np.random.default_rng(2).normal(size=(150, M)), 1, s, np.random.default_rng(3))
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyWarning)
        normal.local_update(glob)
    assert not normal.fired


def test_posterior_pseudo_samples_follow_the_posterior():
    rng = np.random.default_rng(7)
    P = _random_precisions(rng, 1, 3)[0]
    w, lam = np.array([1.0, -2.0, 0.5]), 4.0
    u = posterior_pseudo_samples(w, lam, P, 200_000, np.random.default_rng(8))
    assert np.allclose(u.mean(axis=0), w, atol=0.01)
    assert np.allclose(np.cov(u.T), np.linalg.inv(lam * P), atol=0.01 * np.abs(np.linalg.inv(lam * P)).max())


def test_model_arrays_round_trip_and_bad_arrays_are_refused():
    fit = fit_centralised([np.random.default_rng(9).normal(size=(100, 2))], FleetSettings(n_components=1, folds=0))
    again = FleetModel.from_arrays({k: v.copy() for k, v in fit.model.to_arrays().items()})
    assert again == fit.model and again is not fit.model
    assert again != dataclasses.replace(fit.model, means=fit.model.means + 1e-12)
    broken = dict(fit.model.to_arrays(), precisions=np.zeros((1, 3, 3)))
    with pytest.raises(DataError, match="shapes"):
        FleetModel.from_arrays(broken)
    with pytest.raises(DataError, match="incomplete"):
        FleetModel.from_arrays({"center": fit.model.center})


def test_settings_are_validated_with_the_key():
    with pytest.raises(ConfigError, match=r"fleet\.chunks"):
        FleetSettings(chunks=0)
    with pytest.raises(ConfigError, match=r"fleet\.step"):
        FleetSettings(step="fast")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"fleet\.folds"):
        FleetSettings(folds=1)
