"""Missing values inside the detectors: the maths of detectors/missing.py and the detector API.

The false-alarm rates with missing values are measured in test_missing_far.py.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import scipy.optimize
import scipy.special
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrca.datasets import linear_multiplant
from fedrca.detectors import PlantDetector
from fedrca.detectors.ekf import ExtendedKalmanFilter
from fedrca.detectors.missing import complete_scale, conditional_fill, min_present, observed_distance
from fedrca.detectors.statistics import Moments
from fedrca.exceptions import ModelError
from tests.detectors import plugins


def random_moments(rng, d):
    L = rng.normal(size=(d, d)) + 2 * np.eye(d)
    S = L @ L.T
    return rng.normal(size=d), S, np.linalg.inv(np.linalg.cholesky(S))


def _log_sf(x: float, n: int) -> float:
    """log P(chi2_n > x), exact for integer n in double precision however far the tail (scipy's
    ``chi2.sf`` underflows to 0 beyond x ~ 1,500): the closed forms of the chi-square tail,
    ``e^(-x/2) sum_i (x/2)^i / i!`` for even n, with ``erfc(sqrt(x/2))`` and half-integer powers for odd n."""
    h = 0.5 * x
    if n % 2 == 0:
        i = np.arange(n // 2)
        return float(-h + scipy.special.logsumexp(i * np.log(h) - scipy.special.gammaln(i + 1)))
    head = float(scipy.special.log_ndtr(-math.sqrt(x)) + math.log(2.0))  # log erfc(sqrt(x/2))
    if n == 1:
        return head
    i = np.arange((n - 1) // 2) + 0.5
    return float(np.logaddexp(head, -h + scipy.special.logsumexp(i * np.log(h) - scipy.special.gammaln(i + 1))))


def _same_tail(raw: float, k: int, d: int) -> float:
    """The distance on d dimensions with the tail probability of ``raw`` on k (the reference of the rule)."""
    target = _log_sf(raw, k)
    # more dimensions at the same distance have a larger tail: the root lies at or above raw
    low = max(raw, 1e-300)
    return float(
        scipy.optimize.brentq(lambda y: _log_sf(y, d) - target, low, 2.0 * raw + 100.0, xtol=1e-12, rtol=1e-14)
    )


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**16), st.integers(2, 7))
def test_the_fill_is_the_conditional_mean_and_its_distance_the_observed_entries_distance(seed, d):
    rng = np.random.default_rng(seed)
    mean, S, W = random_moments(rng, d)
    X = rng.normal(size=(6, d)) * 2 + mean
    missing = rng.random(X.shape) < 0.4
    missing[0] = False  # a complete row
    missing[1] = True  # nothing observed
    X[missing] = np.nan
    filled, k = conditional_fill(mean, W, X)
    d2 = observed_distance(mean, W, X)
    for t in range(len(X)):
        o, m = ~missing[t], missing[t]
        assert k[t] == o.sum()
        assert np.allclose(filled[t, o], X[t, o])
        if o.any():
            # x_m = mu_m + S_mo S_oo^-1 (x_o - mu_o)
            S_oo_inv_r = np.linalg.solve(S[np.ix_(o, o)], X[t, o] - mean[o])
            assert np.allclose(filled[t, m], mean[m] + S[np.ix_(m, o)] @ S_oo_inv_r)
            raw = float((X[t, o] - mean[o]) @ S_oo_inv_r)
            z = W @ (filled[t] - mean)
            assert np.isclose(z @ z, raw)  # ||z*||^2 = the observed entries' distance
            expected = raw if o.all() else _same_tail(raw, int(o.sum()), d)
            assert np.isclose(d2[t], expected, rtol=1e-6)
        else:
            assert np.allclose(filled[t], mean) and d2[t] == 0.0


@pytest.mark.parametrize("k", [1, 3, 9])
def test_the_complete_scale_keeps_every_chi_square_quantile(k):
    D = 10
    q = np.array([0.01, 0.3, 0.5, 0.9, 0.99, 0.999, 1 - 1e-9])
    mapped = complete_scale(scipy.stats.chi2.ppf(q, k), np.full(len(q), k), D)
    assert np.allclose(mapped, scipy.stats.chi2.ppf(q, D), rtol=1e-6)
    # beyond what the chi-square functions represent: finite, increasing, above the input
    far = np.array([1e3, 3e3, 1e4, 1e6, 1e12])
    out = complete_scale(far, np.full(len(far), k), D)
    assert np.all(np.isfinite(out)) and np.all(np.diff(out) > 0) and np.all(out >= far)
    near = complete_scale(np.array([1200.0, 1300.0]), np.array([k, k]), D)
    assert np.all(np.diff(np.r_[mapped, near]) > 0)


def test_min_present_is_a_count_or_a_share():
    assert (min_present(0.5, 8), min_present(0.5, 7), min_present(2, 8), min_present(20, 8)) == (4, 4, 2, 8)
    for bad in (0, -1, 2.5):
        with pytest.raises(ModelError, match="min_sensors"):
            min_present(bad, 8)


def test_moments_fit_on_the_complete_rows_and_score_the_others():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 3))
    holes = X.copy()
    holes[::7, 1] = np.nan
    m = Moments.fit(holes)
    assert np.allclose(m.mean, Moments.fit(X[~np.isnan(holes).any(axis=1)]).mean)
    d2 = m.distance(holes)
    assert np.all(np.isfinite(d2)) and np.allclose(d2[1:7], m.distance(X[1:7]))


# -- the detector ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data():
    train = linear_multiplant(n_samples=1500, n_plants=1, seed=1)
    test = linear_multiplant(n_samples=600, n_plants=1, n_events=4, seed=2)
    return train.Y, test.Y


def with_gaps(Y, seed=0, rate=0.1, dead=(2, 100, 180)):
    rng = np.random.default_rng(seed)
    Y = Y.copy()
    Y[rng.random(Y.shape) < rate] = np.nan
    column, a, b = dead
    Y[a:b, column] = np.nan
    Y[300:304] = np.nan  # whole rows missing: degraded
    return Y


@pytest.mark.parametrize("kwargs", [{"method": "family"}, {"ewma": 0.2, "smooth": "residual"}, {}])
def test_missing_values_batch_equals_streaming_in_any_chunking(data, kwargs):
    train, test = data
    Y = with_gaps(test)
    det = PlantDetector("p", n_states=2, seed=4, **kwargs).fit(train)
    det.set_parameters(0.05 * np.random.default_rng(0).normal(size=det.augmentation.theta.shape), version="v1")
    start = copy.deepcopy(det.get_state())
    batch = det.step_batch(Y)
    det.set_state(copy.deepcopy(start))
    chunks = [det.step_batch(Y[a:b]) for a, b in [(0, 7), (7, 8), (8, 301), (301, 302), (302, 600)]]
    merged = type(batch).concat(chunks)
    for field in ("zc", "za", "zc_pub", "za_pub", "degraded"):
        assert np.array_equal(getattr(merged, field), getattr(batch, field)), field
    for field in ("x_c", "x_a", "d2_c", "d2_a"):
        assert np.allclose(getattr(merged, field), getattr(batch, field), rtol=1e-7, atol=1e-7), field
    assert np.all(np.isfinite(batch.d2_c)) and np.all(np.isfinite(batch.x_a))
    assert np.array_equal(np.isnan(batch.r_c), np.isnan(Y))


def test_degraded_rows_raise_and_publish_nothing(data):
    train, test = data
    det = PlantDetector("p", n_states=2, method="family", epsilon=0.5, seed=1, min_sensors=0.75).fit(train)
    Y = test + 10.0  # every row alarms where it is scored
    D = Y.shape[1]
    few = D - int(0.75 * D) + 1  # this many missing leaves fewer than 3/4 of the sensors
    Y[50:60, :few] = np.nan
    Y[70:80, : few - 1] = np.nan
    out = det.step_batch(Y)
    assert det.min_present == int(np.ceil(0.75 * D))
    assert out.degraded[50:60].all() and not out.degraded[70:80].any() and out.degraded.sum() == 10
    degraded = out.degraded
    for field in ("zc", "za", "zc_pub", "za_pub"):
        assert not getattr(out, field)[degraded].any(), field
    assert out.zc[~degraded].mean() > 0.9


def test_exclude_is_the_same_as_nan(data):
    train, test = data
    det = PlantDetector("p", n_states=2, method="family", seed=0).fit(train)
    mask = np.zeros(test.shape, dtype=bool)
    mask[20:90, 1] = True
    nan = test.copy()
    nan[mask] = np.nan
    with det.detached():
        a = det.step_batch(nan)
    with det.detached():
        b = det.step_batch(test, exclude=mask)
    with det.detached():
        c = det.step_batch(test[20:90], exclude=mask[20])  # (D,): every row
    assert np.array_equal(a.zc, b.zc) and np.allclose(a.d2_c, b.d2_c)
    assert np.isnan(c.r_c[:, 1]).all()


def test_a_complete_batch_takes_the_fused_path_again_once_the_filter_is_steady(data):
    train, test = data
    det = PlantDetector("p", n_states=2, method="family", seed=0).fit(train)
    Y = test.copy()
    Y[5, 0] = np.nan
    det.step_batch(Y[:6])
    assert not det.proprietary.steady  # type: ignore[attr-defined]
    det.step_batch(test[10:400])
    assert det.proprietary.steady  # type: ignore[attr-defined]
    assert det._fused_maps(None) is not None


def test_a_fault_is_still_detected_through_missing_values(data):
    train, _ = data
    det = PlantDetector("p", n_states=2, method="family", alpha=0.01, seed=0).fit(train)
    nominal = linear_multiplant(n_samples=2000, n_plants=1, n_events=0, seed=9).Y
    shifted = nominal[:400] + 2.0 * nominal.std(axis=0)
    for rate in (0.05, 0.2):
        with det.detached():
            out = det.step_batch(with_gaps(shifted, rate=rate))
        assert out.zc[~out.degraded].mean() > 0.9, rate


class NoMissing:
    """A vendor filter that refuses NaN (no handles_missing): fedrca fills its prediction in."""

    def __init__(self) -> None:
        self.inner = plugins.damped_filter()
        self.state_dim, self.output_dim = 2, 4

    def predict(self, x, u=None):
        return self.inner.predict(x, u)

    def measure(self, x):
        return self.inner.measure(x)

    def step(self, y, u=None):
        assert not np.isnan(y).any()
        return self.inner.step(y, u)

    def reset(self):
        self.inner.reset()

    def get_state(self):
        return self.inner.get_state()

    def set_state(self, state):
        self.inner.set_state(state)


def test_a_plugin_without_missing_support_never_sees_nan_and_agrees_with_one_that_has_it():
    nominal, faulty = plugins.simulate(800, seed=1), plugins.simulate(300, seed=2, shift_at=150)
    holes = with_gaps(faulty, rate=0.1, dead=(1, 20, 40))
    filled = PlantDetector("v", model=NoMissing(), seed=0).fit(nominal).step_batch(holes)
    native = PlantDetector("v", model=plugins.damped_filter(), seed=0).fit(nominal).step_batch(holes)
    assert np.array_equal(np.isnan(filled.r_c), np.isnan(holes))
    assert filled.zc[160:][~filled.degraded[160:]].mean() > 0.8
    assert native.zc[160:][~native.degraded[160:]].mean() > 0.8
    assert isinstance(plugins.damped_filter(), ExtendedKalmanFilter) and ExtendedKalmanFilter.handles_missing


def test_the_reconstruction_scores_complete_rows_only_and_the_other_statistics_score_the_rest():
    """A row with gaps has no complete-data reconstruction residual: its reconstruction statistic is 0 (no
    alarm) while the innovation still scores it; a complete row's is d2(e) as without gaps."""
    from fedrca.detectors.statistics import family_statistics, fit_family

    rng = np.random.default_rng(3)
    r, x, e = rng.normal(size=(600, 4)), rng.normal(size=(600, 2)), rng.normal(size=(600, 4))
    state = fit_family(r, x, e, statistics=("innovation", "reconstruction"))
    r_gap, e_gap = r[:20].copy() * 5.0, e[:20].copy() * 5.0
    r_gap[::2, 1] = e_gap[::2, 1] = np.nan
    stats = family_statistics(state, r_gap, x[:20], e_gap)[0]
    k, i = state.statistics.index("reconstruction"), state.statistics.index("innovation")
    assert np.all(stats[::2, k] == 0.0) and np.all(stats[::2, i] > 0.0)
    assert np.allclose(stats[1::2, k], state.reconstruction.distance(e_gap[1::2]))
