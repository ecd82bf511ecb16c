"""The prototype per-plant statistic family (fedrca.detectors.monitor): joint calibration and no blind spots."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.signal import lfilter

from fedrca.detectors.monitor import PlantMonitor, tail_quantile
from fedrca.exceptions import DataError, NotFittedError


def var1(rng: np.random.Generator, n: int, d: int = 6, rho: float = 0.9) -> np.ndarray:
    """A stationary VAR(1) with correlated noise (a stand-in for one plant's nominal sensors)."""
    L = np.random.default_rng(0).normal(size=(d, d)) * 0.3 + np.eye(d)  # the same process in every call
    # z(t) = rho z(t-1) + L e(t)
    return lfilter([1.0], [1.0, -rho], rng.normal(size=(n, d)) @ L.T, axis=0)


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(7)
    train = var1(rng, 6000)
    groups = np.repeat(np.arange(3), 2000)
    return PlantMonitor(alpha=0.005, ewma=0.1).fit(train, groups), rng


def test_family_wise_rate_on_new_nominal_data_is_near_alpha(fitted):
    monitor, rng = fitted
    monitor.reset()
    _, flags = monitor.step_batch(var1(rng, 20000))
    # one threshold on the max of the 4 normalised statistics: the family-wise rate, not 4 x alpha
    assert 0.001 < flags.mean() < 0.015


def test_a_compensated_shift_and_an_oscillation_are_both_seen(fitted):
    monitor, rng = fitted
    base = var1(rng, 400)
    # a level shift whose innovations vanish after the step (the "compensated" case) ...
    shifted = base.copy()
    shifted[100:, :3] += 3.0 * base.std(axis=0)[:3]
    monitor.reset()
    _, flags = monitor.step_batch(shifted)
    assert flags[120:].mean() > 0.9
    # ... and a fast oscillation (a sticking valve) that a smoothed chart averages out
    osc = base.copy()
    osc[100:, 0] += 4.0 * base[:, 0].std() * np.sign(np.sin(np.arange(300) * np.pi / 2 + 0.1))
    monitor.reset()
    _, flags = monitor.step_batch(osc)
    assert flags[100:].mean() > 0.5
    assert flags[:100].mean() < 0.05


def test_streaming_in_chunks_equals_one_batch(fitted):
    monitor, rng = fitted
    data = var1(rng, 300)
    monitor.reset()
    whole = monitor.statistics(data)
    monitor.reset()
    parts = np.vstack([monitor.statistics(chunk) for chunk in np.array_split(data, 7)])
    np.testing.assert_allclose(parts, whole, rtol=1e-10, atol=1e-12)


def test_tail_quantile_matches_an_exponential_tail():
    rng = np.random.default_rng(3)
    score = rng.exponential(2.0, size=200_000)
    # exact quantile of Exp(mean 2) at 1 - 0.001: 2 log(1000)
    assert tail_quantile(score, 0.001) == pytest.approx(2.0 * np.log(1000.0), rel=0.03)


def test_errors():
    with pytest.raises(NotFittedError):
        PlantMonitor().step_batch(np.zeros((3, 2)))
    with pytest.raises(DataError):
        PlantMonitor().fit(np.full((50, 2), np.nan))
