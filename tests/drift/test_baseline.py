"""The refresh maths (fedrca.drift.baseline, fedrca.drift.guard): bounds, geodesic steps, exact memory transfer."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrca.detectors.statistics import FamilyState, Moments, family_statistics, fit_family
from fedrca.drift import (
    alarm_limit,
    limit_family,
    limit_moments,
    ongoing_alarm,
    refit_family,
    transfer_memory,
    usable_rows,
)
from fedrca.drift.baseline import covariance, covariance_change, mean_shift


def _moments(seed: int, d: int, shift: float = 0.0, spread: float = 1.0) -> Moments:
    rng = np.random.default_rng(seed)
    mix = rng.normal(size=(d, d)) * 0.3 + np.eye(d)
    return Moments.fit(rng.normal(size=(400, d)) @ mix.T * spread + shift)


@settings(max_examples=25, deadline=None, derandomize=True, database=None)
@given(
    seed=st.integers(0, 10_000),
    d=st.integers(1, 6),
    shift=st.floats(0.0, 5.0),
    spread=st.floats(0.3, 3.0),
    max_shift=st.floats(0.05, 2.0),
    max_scale=st.floats(0.05, 1.0),
)
def test_a_step_never_goes_past_its_bounds(
    seed: int, d: int, shift: float, spread: float, max_shift: float, max_scale: float
) -> None:
    old, new = _moments(seed, d), _moments(seed + 1, d, shift, spread)
    step = limit_moments(old, new, max_shift, max_scale)
    assert mean_shift(old, step.moments) <= max_shift + 1e-9
    assert covariance_change(old, step.moments) <= max_scale + 1e-6
    # within both bounds the whole re-fit is taken
    if step.shift <= max_shift and step.scale <= max_scale:
        assert step.applied == 1.0 and step.moments is new


def test_the_step_is_a_point_of_the_geodesic() -> None:
    old, new = _moments(0, 3), _moments(1, 3, shift=2.0, spread=2.0)
    half = limit_moments(old, new, mean_shift(old, new) / 2, np.inf)
    assert half.applied == pytest.approx(0.5)
    # S(1/2) = S_old^(1/2) (S_old^(-1/2) S_new S_old^(-1/2))^(1/2) S_old^(1/2): its log-eigenvalues against
    # the old covariance are half the full step's
    lam_full = np.linalg.eigvalsh(old.whitening @ covariance(new) @ old.whitening.T)
    lam_half = np.linalg.eigvalsh(old.whitening @ covariance(half.moments) @ old.whitening.T)
    np.testing.assert_allclose(np.log(np.sort(lam_half)), np.log(np.sort(lam_full)) / 2, atol=1e-9)
    np.testing.assert_allclose(half.moments.mean, (old.mean + new.mean) / 2)


def test_transferred_memory_continues_the_stream() -> None:
    """Switching the baseline between two rows with the memory transferred is the same as having whitened the
    stream by the new baseline: transfer then run == run then transfer, row after row."""
    rng = np.random.default_rng(3)
    r, x, e = rng.normal(size=(600, 3)), rng.normal(size=(600, 2)), rng.normal(size=(600, 3))
    first = fit_family(r[:300], x[:300], e[:300], ewma=(0.1, 0.05)).with_calibration(np.ones(6), 10.0)
    second = fit_family(r[300:] * 1.3 + 0.4, x[300:], e[300:], ewma=(0.1, 0.05)).with_calibration(np.ones(6), 10.0)
    _, at_switch = family_statistics(first, r[:400], x[:400], e[:400])
    # run on under the first baseline, then transfer ...
    _, first_end = family_statistics(first, r[400:], x[400:], e[400:], at_switch)
    # ... or transfer, then run on under the second
    _, second_end = family_statistics(second, r[400:], x[400:], e[400:], transfer_memory(first, second, at_switch))
    moved = transfer_memory(first, second, first_end)
    assert moved is not None
    for i in range(len(second.lambdas)):
        np.testing.assert_allclose(moved[i], second_end[i], rtol=1e-9, atol=1e-12)


def test_refit_family_recovers_a_shifted_operating_point() -> None:
    rng = np.random.default_rng(5)
    r, x, e = rng.normal(size=(2000, 3)), rng.normal(size=(2000, 2)), rng.normal(size=(2000, 3))
    old = fit_family(r, x, e, ewma=(0.1,)).with_calibration(np.full(5, 2.0), 3.0)
    shifted = (r + 0.5, x + 1.0, e - 0.3)
    use = np.ones(2000, dtype=bool)
    new = refit_family(old, *shifted, use)
    np.testing.assert_allclose(new.innovation.mean, old.innovation.mean + 0.5, atol=0.1)
    np.testing.assert_allclose(new.level.mean, old.level.mean + 1.0, atol=0.1)
    # scales and threshold are the old ones: they are quantiles of normalised statistics
    np.testing.assert_array_equal(new.scale, old.scale)
    assert new.threshold == old.threshold
    step = limit_family(old, new, max_shift=0.2, max_scale=10.0)
    assert step.limited
    assert mean_shift(old.level, step.state.level) == pytest.approx(0.2, rel=1e-6)


def test_the_guard_band_and_the_alarming_now_test() -> None:
    alarm = np.zeros(100, dtype=bool)
    alarm[[10, 50, 51]] = True
    use = usable_rows(alarm, 3)
    assert not use[7:14].any() and use[6] and use[14]
    assert not use[47:55].any() and use[46] and use[55]
    # isolated alarms at the nominal rate are not "alarming now"; a burst is
    assert not ongoing_alarm(alarm, recent=60, rate=0.01)
    burst = alarm.copy()
    burst[-6:] = True
    assert ongoing_alarm(burst, recent=60, rate=0.01)
    assert alarm_limit(60, 0.01) < 6


def test_family_state_round_trip_of_a_refit() -> None:
    """A refreshed baseline is a FamilyState like any other: it survives the artifact arrays."""
    rng = np.random.default_rng(7)
    r, x, e = rng.normal(size=(500, 3)), rng.normal(size=(500, 2)), rng.normal(size=(500, 3))
    old = fit_family(r, x, e, ewma=(0.1, 0.05)).with_calibration(np.ones(6), 4.0)
    new = refit_family(old, r + 1, x, e, np.ones(500, dtype=bool))
    back = FamilyState.from_arrays(new.to_arrays("p"), "p")
    np.testing.assert_array_equal(back.innovation.mean, new.innovation.mean)
    assert back.statistics == new.statistics


# -- the refit's fast path against its twin (the same numbers, bit for bit) ----------------------------------
def _twin_trend_mean(rows: np.ndarray, times: np.ndarray | None, end: float | None) -> tuple[np.ndarray, np.ndarray]:
    rows = np.asarray(rows, dtype=np.float64)
    if times is None or len(rows) < 3:
        mean = rows.mean(axis=0)
        return mean, rows - mean
    t = np.asarray(times, dtype=np.float64)
    t = t - (t[-1] if end is None else float(end))
    tbar = t.mean()
    dt = t - tbar
    xbar = rows.mean(axis=0)
    spread = float(dt @ dt)
    if spread == 0.0:
        return xbar, rows - xbar
    slope = (dt @ (rows - xbar)) / spread
    return xbar - slope * tbar, rows - xbar - np.outer(dt, slope)


def _twin_moments(mean: np.ndarray, gram: np.ndarray, fourth: float, count: int) -> Moments:
    from fedrca.detectors.statistics import ledoit_wolf_from_sums

    cov, _ = ledoit_wolf_from_sums(gram, fourth, count)
    cov = cov + (1e-9 * max(float(np.trace(cov)) / len(cov), 1e-12)) * np.eye(len(cov))
    L = np.linalg.cholesky(cov)
    return Moments(mean, scipy.linalg.solve_triangular(L, np.eye(len(L)), lower=True, check_finite=False))


def _twin_refit(
    state: FamilyState, r: np.ndarray, x: np.ndarray, e: np.ndarray, use: np.ndarray, covariances: bool,
    times: np.ndarray | None, end: float | None,
) -> list[Moments]:  # fmt: skip
    """refit_family's moments as it computed them with a copy per step, numpy's row sums and solve_triangular."""
    at = None if times is None else np.asarray(times, dtype=np.float64)[use]
    old = (state.innovation, state.level, state.reconstruction)
    widths = [r.shape[1], x.shape[1], e.shape[1]]
    rows = np.concatenate([r, x, e], axis=1)[use]
    mean, centred = _twin_trend_mean(rows, at, end)
    starts = np.cumsum([0, *widths[:-1]]).tolist()
    gram = centred.T @ centred
    squares = centred * centred
    out = []
    for k, (o, d) in enumerate(zip(starts, widths, strict=True)):
        mu = mean[o : o + d].copy()
        if covariances:
            norms = np.sum(squares[:, o : o + d], axis=1)
            fourth = float(np.sum(norms * norms))
            out.append(_twin_moments(mu, gram[o : o + d, o : o + d], fourth, len(rows)))
        else:
            out.append(Moments(mu, old[k].whitening))
    return out


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(
    seed=st.integers(0, 10_000),
    d=st.integers(1, 14),
    p=st.integers(1, 12),
    cut=st.sampled_from(["run", "holes", "all"]),
    trend=st.booleans(),
    covariances=st.booleans(),
)
def test_the_refit_is_its_twin_bit_for_bit(seed: int, d: int, p: int, cut: str, trend: bool, covariances: bool) -> None:
    rng = np.random.default_rng(seed)
    T = 300
    state = fit_family(rng.normal(size=(T, d)), rng.normal(size=(T, p)), rng.normal(size=(T, d)), ("innovation",))
    drift = np.linspace(0.0, 2.0, T)[:, None]
    r = rng.normal(size=(T, d)) * rng.uniform(0.1, 10.0, size=d) + drift
    x = rng.normal(size=(T, p)) @ rng.normal(size=(p, p)) + 3.0
    e = rng.normal(size=(T, d)) * 1e-3 - drift
    use = np.ones(T, dtype=bool)
    if cut == "run":
        use[: rng.integers(0, 30)] = False
        use[T - rng.integers(0, 30) :] = False
    elif cut == "holes":
        use = rng.random(T) > 0.2
    times = np.arange(T, dtype=np.float64) + 1000.0 if trend else None
    end = 1300.0 if trend else None
    got = refit_family(state, r, x, e, use, None, covariances, times, end)
    want = _twin_refit(state, r, x, e, use, covariances, times, end)
    for name, m in zip(("innovation", "level", "reconstruction"), want, strict=True):
        assert getattr(got, name).mean.tobytes() == m.mean.tobytes(), name
        assert getattr(got, name).whitening.tobytes() == m.whitening.tobytes(), name


@pytest.mark.parametrize("d", [1, 2, 5, 13, 40])
def test_a_whitening_from_sums_is_the_triangular_solves(d: int) -> None:
    rng = np.random.default_rng(d)
    X = rng.normal(size=(500, d)) @ rng.normal(size=(d, d))
    X -= X.mean(axis=0)
    fourth = float(np.sum(np.sum(X * X, axis=1) ** 2))
    got = Moments.from_sums(np.zeros(d), X.T @ X, fourth, len(X))
    want = _twin_moments(np.zeros(d), X.T @ X, fourth, len(X))
    assert got.whitening.tobytes() == want.whitening.tobytes()


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(alarm=st.lists(st.booleans(), min_size=0, max_size=200), guard=st.integers(0, 60))
def test_the_guard_band_is_the_dilation_of_the_alarms(alarm: list[bool], guard: int) -> None:
    import scipy.ndimage

    a = np.array(alarm, dtype=bool)
    want = ~a
    if guard > 0 and a.any():
        want = ~scipy.ndimage.binary_dilation(a, structure=np.ones(2 * guard + 1, dtype=bool))
    assert usable_rows(a, guard).tolist() == want.tolist()
