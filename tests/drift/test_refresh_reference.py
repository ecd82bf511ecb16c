"""The refresh's fast maths against the reference it replaces: the same baselines and decisions.

The refresh fits its moments with :func:`fedrca.detectors.statistics.ledoit_wolf_covariance` (scikit-learn's
estimator without its checks), draws each window's trend in closed form and inverts triangular factors with
LAPACK's ``trtri``. The reference is what those replace: scikit-learn's ``ledoit_wolf`` on the rows about
their mean, ``numpy.linalg.lstsq`` for the trend, triangular solves against the identity. Over streams that
drift, jump (limited steps), fault (refusals, the explaining refresh) and miss rows (NaN), both loops make
the same decisions at the same seqs and the same flags, and their baselines agree to a relative 1e-9
(observed: about 1e-13).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
import scipy.linalg
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.covariance import ledoit_wolf

import fedrca.drift.baseline as baseline
from fedrca.detectors.plant import PlantDetector
from fedrca.detectors.statistics import Moments
from fedrca.drift import BaselineKeeper, KeeperSettings, RowHistory
from fedrca.drift.baseline import trend_mean
from fedrca.drift.keeper import _arrays
from tests.drift.conftest import plant_rows

#: Relative tolerance of a baseline's arrays and a report's figures (fast against reference).
RTOL = 1e-9


def _reference_trend_mean(rows: np.ndarray, times: np.ndarray | None, end: float | None = None) -> Any:
    rows = np.asarray(rows, dtype=np.float64)
    if times is None or len(rows) < 3:
        mean = rows.mean(axis=0)
        return mean, rows - mean
    t = np.asarray(times, dtype=np.float64)
    t = t - (t[-1] if end is None else float(end))
    design = np.column_stack([np.ones_like(t), t])
    coef, *_ = np.linalg.lstsq(design, rows, rcond=None)
    return coef[0], rows - design @ coef


def _reference_from_centred(cls: type[Moments], mean: np.ndarray, centred: np.ndarray) -> Moments:
    # the refresh's fit before: Moments.fit(centred + mean) through scikit-learn
    X = centred + mean
    m = X.mean(axis=0)
    cov, _ = ledoit_wolf(X - m, assume_centered=True)
    cov = np.atleast_2d(cov)
    cov = cov + (1e-9 * max(float(np.trace(cov)) / len(cov), 1e-12)) * np.eye(len(cov))
    L = np.linalg.cholesky(cov)
    return cls(m, scipy.linalg.solve_triangular(L, np.eye(len(L)), lower=True))


def _reference_lower_inverse(W: np.ndarray) -> np.ndarray:
    return np.asarray(scipy.linalg.solve_triangular(W, np.eye(len(W)), lower=True))


@contextmanager
def reference_maths(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The refresh with the reference maths in place of the fast one."""
    with monkeypatch.context() as m:
        m.setattr(baseline, "trend_mean", _reference_trend_mean)
        m.setattr(baseline, "lower_inverse", _reference_lower_inverse)
        m.setattr(Moments, "from_centred", classmethod(_reference_from_centred))
        yield


def _stream(seed: int, drift: float, jump: float, fault_at: int, missing: int) -> np.ndarray:
    """2,400 rows: slow drift, an operating-point jump at row 500 (alarms, then explained), a slow sensor fault from
    ``fault_at`` (refusals; the explaining refresh) and ``missing`` rows with a NaN."""
    rows = plant_rows(seed, 2400, drift_per_row=drift)
    rows[500:] += jump * np.array([1.0, 0.5, -0.4, 0.3])
    rows[fault_at:, 2] += np.arange(2400 - fault_at) * 0.004
    gaps = np.random.default_rng(seed).choice(2400, size=missing, replace=False)
    rows[gaps, np.arange(missing) % rows.shape[1]] = np.nan
    return rows


def _run(fitted: PlantDetector, settings: KeeperSettings, rows: np.ndarray) -> tuple[BaselineKeeper, Any]:
    keeper = BaselineKeeper(copy.deepcopy(fitted), settings)
    outs = [keeper.process(rows[lo : lo + 150], seqs=np.arange(lo, min(lo + 150, len(rows))))
            for lo in range(0, len(rows), 150)]  # fmt: skip
    return keeper, outs


def _same_refreshes(fast: BaselineKeeper, ref: BaselineKeeper, fast_out: Any, ref_out: Any) -> None:
    assert [(r.seq, r.outcome, r.version, r.rows, r.alarms) for r in fast.reports] == [
        (r.seq, r.outcome, r.version, r.rows, r.alarms) for r in ref.reports
    ]
    for a, b in zip(fast.reports, ref.reports, strict=True):
        for name in ("shift", "scale", "applied"):
            assert getattr(a, name) == pytest.approx(getattr(b, name), rel=RTOL, abs=1e-12), (a.line(), b.line())
    for a, b in zip(fast_out, ref_out, strict=True):
        np.testing.assert_array_equal(a.zc, b.zc)
        np.testing.assert_array_equal(a.za, b.za)
    assert fast.versions == ref.versions
    for v in fast.versions:
        got, want = fast._baselines[v], ref._baselines[v]
        for prefix, g, w in (("c", got.state_c, want.state_c), ("a", got.state_a, want.state_a)):
            ga, wa = _arrays(g, prefix), _arrays(w, prefix)
            assert ga.keys() == wa.keys()
            for name in ga:
                size = max(float(np.max(np.abs(wa[name]))), 1.0) if np.size(wa[name]) else 1.0
                np.testing.assert_allclose(ga[name], wa[name], rtol=RTOL, atol=RTOL * size, err_msg=f"b{v} {name}")


def _check(fitted: PlantDetector, monkeypatch: pytest.MonkeyPatch, seed: int, drift: float, jump: float,
           fault_at: int, missing: int) -> list[str]:  # fmt: skip
    settings = KeeperSettings(every=300, window=600, history=1200, guard=20, recent=60, min_rows=200,
                              max_shift=1.0, max_scale=0.25, per=600, trend=True, explain=True)  # fmt: skip
    rows = _stream(seed, drift, jump, fault_at, missing)
    fast, fast_out = _run(fitted, settings, rows)
    with reference_maths(monkeypatch):
        ref, ref_out = _run(fitted, settings, rows)
    _same_refreshes(fast, ref, fast_out, ref_out)
    return [r.outcome for r in fast.reports]


def test_the_fast_refresh_makes_the_reference_decisions(fitted: PlantDetector, monkeypatch: pytest.MonkeyPatch) -> None:
    """One stream through every outcome, with missing rows: limited steps (the covariance's bound), refusals
    while the jump and then the fault alarm, and the explaining refresh applied (the jump is drift)."""
    outcomes = _check(fitted, monkeypatch, seed=7, drift=0.0001, jump=0.2, fault_at=1500, missing=40)
    assert {"applied", "limited", "refused"} <= set(outcomes), outcomes


@pytest.mark.exhaustive
@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(
    seed=st.integers(0, 10_000),
    drift=st.sampled_from([0.0, 0.0001, 0.0005]),
    jump=st.sampled_from([0.0, 0.2, 0.5]),
    fault_at=st.integers(700, 2300),
    missing=st.integers(0, 80),
)
def test_the_fast_refresh_makes_the_reference_decisions_on_any_stream(
    fitted_once: PlantDetector, seed: int, drift: float, jump: float, fault_at: int, missing: int
) -> None:
    """Every stream of the family: the same decisions, flags and baselines as the reference maths."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        _check(fitted_once, monkeypatch, seed, drift, jump, fault_at, missing)


@settings(max_examples=10, deadline=None, derandomize=True, database=None)
@given(
    n=st.integers(1, 200),
    d=st.integers(1, 6),
    start=st.integers(0, 10**6),
    step=st.integers(1, 5),
    seed=st.integers(0, 2**32 - 1),
    slope=st.floats(-1.0, 1.0),
    offset=st.floats(-1e3, 1e3),
)
def test_the_closed_form_trend_is_the_least_squares_line(
    n: int, d: int, start: int, step: int, seed: int, slope: float, offset: float
) -> None:
    """The trend's closed form equals numpy's least squares on the same rows (seqs of any size and
    spacing, rows far from zero): the mean at the end and the rows about the line."""
    rng = np.random.default_rng(seed)
    t = start + step * np.cumsum(rng.integers(1, 4, size=n))
    rows = offset + slope * 1e-3 * (t - t[0])[:, None] + rng.normal(size=(n, d))
    end = float(t[-1] + step)
    mean, centred = trend_mean(rows, t.astype(float), end)
    want_mean, want_centred = _reference_trend_mean(rows, t.astype(float), end)
    size = max(float(np.max(np.abs(rows))), 1.0)
    np.testing.assert_allclose(mean, want_mean, rtol=0, atol=1e-9 * size)
    np.testing.assert_allclose(centred, want_centred, rtol=0, atol=1e-9 * size)


@settings(max_examples=30, deadline=None, derandomize=True, database=None)
@given(
    start=st.integers(0, 200),
    span=st.integers(0, 700),
    density=st.sampled_from([1.0, 0.7, 0.1]),
    seed=st.integers(0, 2**32 - 1),
    capacity=st.integers(1, 1000),
    end=st.integers(-70, 1000),
    rows=st.integers(0, 1000),
)
def test_a_window_holds_exactly_the_rows_of_its_seqs(
    start: int, span: int, density: float, seed: int, capacity: int, end: int, rows: int
) -> None:
    """``RowHistory.window(end, rows)`` is every held row of seqs ``[end - rows, end)`` in seq order (the rows
    within ``capacity`` of the newest), whatever the gaps, chunks and bounds."""
    rng = np.random.default_rng(seed)
    seqs = (start + np.flatnonzero(rng.random(span) < density)).tolist()
    Y = np.arange(len(seqs) * 2, dtype=np.float64).reshape(len(seqs), 2)
    alarm = np.array([s % 3 == 0 for s in seqs], dtype=bool)
    U = -Y[:, :1]
    history = RowHistory(n_sensors=2, capacity=capacity, n_inputs=1)
    history.add(np.asarray(seqs, dtype=np.int64), Y, U, alarm)
    newest = seqs[-1] if seqs else -1
    want = [i for i, s in enumerate(seqs) if end - rows <= s < end and s > newest - capacity]
    got_seqs, got_Y, got_U, got_alarm = history.window(end, rows)
    assert got_seqs.tolist() == [seqs[i] for i in want]
    np.testing.assert_array_equal(got_Y, Y[want].reshape(-1, 2))
    np.testing.assert_array_equal(got_alarm, alarm[want])
    assert got_U is not None
    np.testing.assert_array_equal(got_U, U[want].reshape(-1, 1))
