"""The moments' Ledoit-Wolf covariance (fedrca.detectors.statistics): scikit-learn's estimator, its checks skipped."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from sklearn.covariance import ledoit_wolf

from fedrca.detectors.statistics import Moments, ledoit_wolf_covariance, ledoit_wolf_from_sums
from fedrca.exceptions import DataError


@st.composite
def row_blocks(draw: st.DrawFn) -> np.ndarray:
    """(T, D) rows: T 2..80, D 1..9, entries on scales 1e-3..1e3 about offsets, some columns constant."""
    T, D = draw(st.integers(2, 80)), draw(st.integers(1, 9))
    base = draw(arrays(np.float64, (T, D), elements=st.floats(-1.0, 1.0, allow_subnormal=False)))
    scale = draw(arrays(np.float64, (D,), elements=st.sampled_from([0.0, 1e-3, 1.0, 7.5, 1e3])))
    offset = draw(arrays(np.float64, (D,), elements=st.floats(-1e3, 1e3, allow_subnormal=False)))
    return np.asarray(base * scale + offset)


@settings(max_examples=20, deadline=None, derandomize=True, database=None)
@given(row_blocks())
def test_ledoit_wolf_covariance_equals_scikit_learns(X: np.ndarray) -> None:
    """On any centred rows, the covariance and shrinkage are scikit-learn's ``ledoit_wolf(X, assume_centered=True)``
    to a relative 1e-12 (of the covariance's largest entry): the same operations in the same order."""
    C = X - X.mean(axis=0)
    want, want_shrinkage = ledoit_wolf(C, assume_centered=True)
    got, got_shrinkage = ledoit_wolf_covariance(C)
    size = max(float(np.max(np.abs(want))), 1e-300)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * size, equal_nan=True)
    assert got_shrinkage == pytest.approx(float(want_shrinkage), rel=1e-12, abs=1e-15, nan_ok=True)


def test_moments_fit_is_the_scikit_learn_fit_it_replaces() -> None:
    """``Moments.fit``'s whitening is the inverse Cholesky factor of scikit-learn's shrunk covariance (the
    ridge added), bit for bit on a plant-sized window."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(1440, 12)) @ rng.normal(size=(12, 12)) + 5.0
    m = Moments.fit(X)
    cov, _ = ledoit_wolf(X - X.mean(axis=0), assume_centered=True)
    cov = cov + 1e-9 * float(np.trace(cov)) / 12 * np.eye(12)
    L = np.linalg.cholesky(cov)
    np.testing.assert_allclose(m.mean, X.mean(axis=0), rtol=0, atol=0)
    np.testing.assert_allclose(m.whitening @ L, np.eye(12), atol=1e-12)


def test_moments_refuse_infinite_rows() -> None:
    """An infinite value is an error naming it (scikit-learn's check, kept), a NaN row is left out."""
    X = np.random.default_rng(0).normal(size=(50, 3))
    X[4, 1] = np.inf
    with pytest.raises(DataError, match="infinite"):
        Moments.fit(X)
    X[4, 1] = np.nan
    assert np.all(np.isfinite(Moments.fit(X).whitening))


@settings(max_examples=20, deadline=None, derandomize=True, database=None)
@given(row_blocks())
def test_ledoit_wolf_from_sums_equals_scikit_learns(X: np.ndarray) -> None:
    """From the rows' sums (``sum x x'``, ``sum ||x||^4``) the covariance and shrinkage are scikit-learn's to a
    relative 1e-12 of the covariance's largest entry (1e-9 for the shrinkage, a ratio of differences)."""
    C = X - X.mean(axis=0)
    want, want_shrinkage = ledoit_wolf(C, assume_centered=True)
    norms = np.sum(C * C, axis=1)
    got, got_shrinkage = ledoit_wolf_from_sums(C.T @ C, float(np.sum(norms * norms)), len(C))
    size = max(float(np.max(np.abs(want))), 1e-300)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * size, equal_nan=True)
    assert got_shrinkage == pytest.approx(float(want_shrinkage), rel=1e-9, abs=1e-12, nan_ok=True)


@pytest.mark.exhaustive
@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(row_blocks())
def test_both_ledoit_wolf_paths_equal_scikit_learns_on_many_blocks(X: np.ndarray) -> None:
    """The two fast variants above, on many more blocks of rows."""
    test_ledoit_wolf_covariance_equals_scikit_learns.hypothesis.inner_test(X)  # type: ignore[attr-defined]
    test_ledoit_wolf_from_sums_equals_scikit_learns.hypothesis.inner_test(X)  # type: ignore[attr-defined]
