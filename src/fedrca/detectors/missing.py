"""Missing values inside a plant's detector: the maths, as pure functions (docs/missing.md).

A value is *missing* when it is NaN: ``null`` on the wire, a Bad or stale tag, a gap in a
file, or a tag a caller excludes (a sensor-fault check sets it NaN, or passes an exclusion
mask to :meth:`PlantDetector.step_batch <fedrca.detectors.plant.PlantDetector.step_batch>`,
which does the same). Nothing is imputed into the data: every estimate below uses what is
observed.

**Conditional fill.** Against nominal moments (mean ``μ``, covariance ``S = L L'``, whitening
``W = L⁻¹``) a row ``x`` with observed entries ``o`` and missing ``m`` is completed with the
conditional mean of its missing entries given its observed ones,
``x_m = μ_m + S_mo S_oo⁻¹ (x_o - μ_o)`` (:func:`conditional_fill`). Its whitened vector
``z* = W (x_filled - μ)`` is the conditional mean ``E[z | x_o]`` of the complete whitened
vector, and its squared norm is the Mahalanobis distance of the observed entries alone::

    ||z*||² = (x_o - μ_o)' S_oo⁻¹ (x_o - μ_o)

(``x_m`` minimises ``||W (x - μ)||²`` over the missing entries: the normal equations are
``(W'W)_mm x̃_m = -(W'W)_mo x̃_o``, and ``(W'W) = S⁻¹``; ``tests/detectors/test_missing.py``
checks both identities).

**Complete-data scale.** A distance over ``k`` observed coordinates is put on the scale of
the ``D`` coordinates its threshold was calibrated on by matching chi-square tail
probabilities (:func:`complete_scale`)::

    d2_D = F⁻¹_{χ²_D}( F_{χ²_k}(d2_k) )

For Gaussian residuals ``d2_k ~ χ²_k`` exactly, so ``d2_D ~ χ²_D`` whatever the pattern:
the statistic exceeds its complete-data threshold with the complete-data probability, and
the false-alarm rate stays at the configured ``alpha``. For the smoothed statistics (MEWMA,
the dispersion EWMA, the residual scorer's EWMA) the smoothed vector is ``z*`` (resp. the
mapped distance): a conditional mean has at most the spread of what it estimates, so their
false-alarm rate is at most the complete-data one. ``tests/detectors/test_missing_far.py``
measures every statistic's rate against its nominal rate over missing patterns.

**Degraded rows.** A row with fewer usable sensors than the plant's ``min_sensors``
(:func:`min_present`) is *degraded*: its statistics are computed as for any row (the
streaming memory continues) but it raises no flag, and the plant publishes a degraded flag
(one bit, no evidence) instead of its flags.

Examples
--------
>>> import numpy as np
>>> mean, W = np.zeros(2), np.linalg.inv(np.linalg.cholesky(np.array([[1.0, 0.5], [0.5, 1.0]])))
>>> filled, k = conditional_fill(mean, W, np.array([[2.0, np.nan]]))
>>> filled.tolist(), k.tolist()
([[2.0, 1.0]], [1])
>>> round(float(observed_distance(mean, W, np.array([[2.0, np.nan]]))[0]), 3)  # 2² on 1 dof -> 2 dof
6.18
"""

from __future__ import annotations

import math

import numpy as np
import scipy.special
from numpy.typing import NDArray

from fedrca.exceptions import ModelError

__all__ = [
    "complete_scale",
    "conditional_fill",
    "min_present",
    "observed_counts",
    "observed_distance",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: Below this upper-tail probability the chi-square functions underflow; the map uses the tail's asymptote.
_TINY = 1e-280


def observed_counts(X: FloatArray) -> IntArray:
    """Observed (non-NaN) entries per row of ``X`` (T, D) -> (T,)."""
    return np.asarray(X.shape[1] - np.count_nonzero(np.isnan(X), axis=1), dtype=np.int64)


def min_present(setting: float, n_sensors: int) -> int:
    """The fewest usable sensors a row is scored with: ``setting`` is a count (>= 1) or a share of
    the plant's ``n_sensors`` (< 1, rounded up); at least 1, at most ``n_sensors``.

    Examples
    --------
    >>> min_present(0.5, 7), min_present(3, 7), min_present(0.01, 7)
    (4, 3, 1)
    """
    if not setting > 0:
        raise ModelError(f"min_sensors must be > 0 (a count, or a share below 1), got {setting}")
    if setting >= 1 and setting != int(setting):
        raise ModelError(f"min_sensors >= 1 is a number of sensors and must be whole, got {setting}")
    count = int(setting) if setting >= 1 else math.ceil(setting * n_sensors)
    return max(1, min(count, n_sensors))


def conditional_fill(mean: FloatArray, whitening: FloatArray, X: FloatArray) -> tuple[FloatArray, IntArray]:
    """Rows of ``X`` (T, D) with every NaN replaced by its conditional mean given the row's observed entries.

    Under the nominal moments (``mean`` (D,), ``whitening`` W = L⁻¹ (D, D) of the covariance
    S = L L'): ``x_m = μ_m + S_mo S_oo⁻¹ (x_o - μ_o)``, computed as the minimiser of
    ``||W (x - μ)||²`` over the missing entries, once per missing pattern (rows of one pattern
    share one solve). A row with nothing observed gets the mean.

    Returns
    -------
    filled : (T, D) the rows, complete
    n_observed : (T,) observed entries per row
    """
    X = np.asarray(X, dtype=np.float64)
    missing = np.isnan(X)
    n_observed = np.asarray(X.shape[1] - missing.sum(axis=1), dtype=np.int64)
    rows = np.flatnonzero(missing.any(axis=1))
    if len(rows) == 0:
        return X, n_observed
    filled = X.copy()
    patterns, inverse = np.unique(missing[rows], axis=0, return_inverse=True)
    for p, pattern in enumerate(patterns):
        members = rows[inverse.reshape(-1) == p]
        m, o = np.flatnonzero(pattern), np.flatnonzero(~pattern)
        if len(o) == 0:
            filled[np.ix_(members, m)] = mean[m]
            continue
        Wm, Wo = whitening[:, m], whitening[:, o]
        # x̃_o = x_o - μ_o ;  (Wm' Wm) x̃_m = -Wm' Wo x̃_o   (the least-squares completion)
        centred = X[np.ix_(members, o)] - mean[o]
        rhs = -(centred @ Wo.T) @ Wm
        x_m = np.linalg.solve(Wm.T @ Wm, rhs.T).T
        filled[np.ix_(members, m)] = x_m + mean[m]
    return filled, n_observed


def complete_scale(d2: FloatArray, n_observed: IntArray, n_total: int) -> FloatArray:
    """Distances over ``n_observed`` coordinates on the scale of ``n_total`` coordinates.

    ``F⁻¹_{χ²_D}(F_{χ²_k}(d2))`` row by row (the upper tail through the survival function, so a
    far tail keeps its precision); rows with every coordinate observed are returned unchanged,
    rows with none observed are 0. Beyond what the chi-square functions can represent (an upper
    tail below 1e-280: a fault far past any threshold) the tails' asymptote
    ``log P(χ²_k > x) ≈ (k/2 - 1) log(x/2) - x/2 - log Γ(k/2)`` is matched instead, so the map
    stays finite and increasing.

    Examples
    --------
    >>> import numpy as np
    >>> complete_scale(np.array([3.84, 3.84, 3.84]), np.array([1, 4, 0]), 4).round(2).tolist()
    [9.49, 3.84, 0.0]
    """
    d2 = np.asarray(d2, dtype=np.float64)
    k = np.asarray(n_observed, dtype=np.float64)
    out = d2.copy()
    partial = k < n_total
    if not partial.any():
        return out
    x, kk = np.maximum(d2[partial], 0.0), k[partial]
    result = np.zeros(len(x))
    some = kk > 0
    x, kk = x[some], kk[some]
    half_D = 0.5 * n_total
    # upper tail P(χ²_k > x) and lower tail P(χ²_k <= x): regularised incomplete gamma functions
    upper = scipy.special.gammaincc(0.5 * kk, 0.5 * x)
    lower = scipy.special.gammainc(0.5 * kk, 0.5 * x)
    mapped = np.where(
        upper < 0.5,
        2.0 * scipy.special.gammainccinv(half_D, np.maximum(upper, _TINY)),
        2.0 * scipy.special.gammaincinv(half_D, np.minimum(lower, 0.5)),
    )
    far = upper < _TINY
    if far.any():
        mapped[far] = _asymptotic_map(x[far], kk[far], n_total)
    result[some] = mapped
    out[partial] = result
    return out


def _asymptotic_map(x: FloatArray, k: FloatArray, n_total: int) -> FloatArray:
    """Solve ``log sf_D(y) = log sf_k(x)`` in the far upper tail with the tails' asymptote
    ``log sf_n(x) ≈ (n/2 - 1) log(x/2) - x/2 - log Γ(n/2)`` (a few fixed-point steps; x large)."""
    target = (0.5 * k - 1.0) * np.log(0.5 * x) - 0.5 * x - scipy.special.gammaln(0.5 * k)
    y = x.copy()
    half_D = 0.5 * n_total
    for _ in range(6):
        # y = 2 [ (D/2 - 1) log(y/2) - log Γ(D/2) - target ]
        y = 2.0 * ((half_D - 1.0) * np.log(0.5 * np.maximum(y, 1.0)) - scipy.special.gammaln(half_D) - target)
    return np.maximum(y, x)


def observed_distance(mean: FloatArray, whitening: FloatArray, X: FloatArray) -> FloatArray:
    """Mahalanobis distances (T,) of rows ``X`` (T, D) with NaN for missing entries, on the complete scale.

    ``||W (x - μ)||²`` for a complete row; for a row with observed entries ``o`` the distance of
    those entries alone, ``(x_o - μ_o)' S_oo⁻¹ (x_o - μ_o)``, put on the D-coordinate scale by
    :func:`complete_scale`.
    """
    filled, n_observed = conditional_fill(mean, whitening, X)
    Z = (filled - mean) @ whitening.T
    d2 = np.einsum("td,td->t", Z, Z)
    return complete_scale(d2, n_observed, X.shape[1])
