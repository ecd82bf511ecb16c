"""Prototype (issue 13, "detector without blind spots"): a per-plant family of statistics
with one jointly calibrated false-alarm target. Not wired into PlantDetector.

Per plant, on the nominal-standardised measurements z(t) (D,):

* **level** (PCA, components for ``variance`` of the nominal variance):
  T^2_lev = sum_i t_i^2 / lambda_i on the retained scores, SPE = ||z - P P^T z||^2
  outside them. A persistent shift the control loops compensate leaves the
  innovations near zero but moves the level (or the relations between variables).
* **innovation** of a VAR(1) z(t) = A z(t-1) + e(t) (ridge least squares):
  T^2_inn = e^T S^-1 e (Shewhart: oscillations and random variation that a
  smoothed chart averages out) and the MEWMA of e (small persistent innovations).

Joint calibration: each statistic is divided by its own held-out nominal
``base_quantile``; the plant's score is the largest ratio, and one threshold on it
is the held-out nominal (1 - ``alpha``) quantile, so ``alpha`` is the plant's
family-wise false-alarm rate. Held-out statistics come from models fitted without
each fold (a fold = one nominal run when ``groups`` are given, else a contiguous
block): new data has heavier tails than the data a model was fitted to.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from fedrca.exceptions import DataError, NotFittedError

__all__ = ["STATISTICS", "PlantMonitor", "monitor_statistics", "tail_quantile"]

FloatArray = NDArray[np.float64]
#: Column order of :func:`monitor_statistics`.
STATISTICS = ("T2 level", "SPE", "T2 innovation", "MEWMA innovation")


@dataclass(frozen=True)
class _Model:
    mean: FloatArray  # (D,)
    std: FloatArray  # (D,)
    P: FloatArray  # (D, a) retained loadings
    lam: FloatArray  # (a,) retained variances
    A: FloatArray  # (D, D) VAR(1) transition
    S_inv: FloatArray  # (D, D) pseudo-inverse of the innovation covariance


def _fit_model(Y: FloatArray, starts: NDArray[np.bool_], variance: float, ridge: float) -> _Model:
    mean = Y.mean(axis=0)
    std = Y.std(axis=0, ddof=1)
    std = np.where(std > 1e-12, std, 1.0)
    Z = (Y - mean) / std
    lam, vecs = np.linalg.eigh(np.cov(Z, rowvar=False))
    lam, vecs = lam[::-1].clip(min=0.0), vecs[:, ::-1]
    a = min(int(np.searchsorted(np.cumsum(lam) / max(lam.sum(), 1e-12), variance)) + 1, len(lam))
    # VAR(1) on pairs (z(t-1), z(t)) that do not cross the start of a run:
    # A = argmin sum ||z(t) - A z(t-1)||^2 + ridge ||A||^2
    ok = ~starts[1:]
    X0, X1 = Z[:-1][ok], Z[1:][ok]
    A = np.linalg.solve(X0.T @ X0 + ridge * len(X0) * np.eye(Z.shape[1]), X0.T @ X1).T
    E = X1 - X0 @ A.T
    S = np.cov(E, rowvar=False).reshape(Z.shape[1], Z.shape[1])
    S_inv = np.linalg.pinv(S, rcond=1e-8, hermitian=True)
    return _Model(mean, std, vecs[:, :a], np.maximum(lam[:a], 1e-12), A, S_inv)


def monitor_statistics(
    model: _Model, Y: FloatArray, ewma: float, z_prev: FloatArray | None = None, w_prev: FloatArray | None = None
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Statistics (T, 4) in :data:`STATISTICS` order; also the last z and MEWMA state (for streaming).

    The pure-function core of :class:`PlantMonitor`; ``z_prev`` / ``w_prev`` continue a stream.
    """
    Z = (Y - model.mean) / model.std
    T_ = Z @ model.P
    # T^2_lev = sum t_i^2 / lambda_i ;  SPE = ||z - P t||^2
    t2 = (T_**2 / model.lam).sum(axis=1)
    spe = ((Z - T_ @ model.P.T) ** 2).sum(axis=1)
    # e(t) = z(t) - A z(t-1)  (the first row of a fresh stream has no predecessor: e = 0)
    prev = np.vstack([Z[:1] if z_prev is None else z_prev[None, :], Z[:-1]])
    E = Z - prev @ model.A.T
    if z_prev is None:
        E[0] = 0.0
    t2e = np.einsum("ti,ij,tj->t", E, model.S_inv, E)
    # w(t) = ewma e(t) + (1 - ewma) w(t-1) ;  MEWMA = w^T (ewma / (2 - ewma) S)^-1 w
    w = np.zeros(Z.shape[1]) if w_prev is None else w_prev.copy()
    W = np.empty_like(E)
    for t in range(len(E)):
        w = ewma * E[t] + (1 - ewma) * w
        W[t] = w
    mewma = np.einsum("ti,ij,tj->t", W, model.S_inv, W) * (2 - ewma) / ewma
    return np.column_stack([t2, spe, t2e, mewma]), Z[-1].copy() if len(Z) else z_prev, w  # type: ignore[return-value]


def tail_quantile(score: FloatArray, alpha: float, tail: float = 0.1) -> float:
    """The (1 - alpha) quantile of ``score`` from an exponential fit to its upper ``tail`` share.

    Peaks over threshold: above u = the (1 - tail) quantile, excesses are taken as
    exponential with mean beta (their sample mean), so P(s > x) = tail exp(-(x - u) / beta)
    and the quantile is u + beta log(tail / alpha). A raw empirical quantile at
    alpha = 0.002 rests on one or two held-out samples when nominal data is short
    (500 rows of d00.dat); the tail fit uses the top 10%.
    """
    if alpha >= tail:
        return float(np.quantile(score, 1 - alpha))
    u = float(np.quantile(score, 1 - tail))
    excess = score[score > u] - u
    beta = float(excess.mean()) if len(excess) else 0.0
    return u + beta * float(np.log(tail / alpha))


class PlantMonitor:
    """One plant's statistic family with one family-wise false-alarm rate ``alpha``.

    Parameters
    ----------
    variance : share of the nominal variance the level subspace keeps
    ewma : MEWMA smoothing constant
    alpha : family-wise false-alarm rate per sample (held-out nominal)
    base_quantile : quantile each statistic is normalised by before the max
    ridge : VAR(1) ridge (relative to the sample count)
    folds : contiguous folds when no ``groups`` are given to :meth:`fit`
    tail : share of the held-out scores the exceedance tail is fitted to (see :func:`tail_quantile`)
    """

    def __init__(
        self,
        variance: float = 0.9,
        ewma: float = 0.1,
        alpha: float = 0.002,
        base_quantile: float = 0.99,
        ridge: float = 1e-3,
        folds: int = 5,
        tail: float = 0.1,
    ) -> None:
        self.variance = variance
        self.ewma = ewma
        self.alpha = alpha
        self.base_quantile = base_quantile
        self.ridge = ridge
        self.folds = folds
        self.tail = tail
        self._model: _Model | None = None
        self._scale: FloatArray | None = None
        self._threshold: float | None = None
        self._held_out: FloatArray | None = None
        self._z: FloatArray | None = None
        self._w: FloatArray | None = None

    def fit(self, Y: FloatArray, groups: NDArray[np.int64] | None = None) -> PlantMonitor:
        """Fit on nominal ``Y`` (T, D); ``groups`` (T,) labels separate nominal runs (folds and VAR pairs)."""
        Y = np.asarray(Y, dtype=np.float64)
        if Y.ndim != 2 or len(Y) < 20 or not np.isfinite(Y).all():
            raise DataError(f"nominal data must be finite (T >= 20, D), got shape {Y.shape}")
        if groups is None:
            groups = np.repeat(np.arange(self.folds), int(np.ceil(len(Y) / self.folds)))[: len(Y)]
        groups = np.asarray(groups)
        starts = np.r_[True, groups[1:] != groups[:-1]]
        held = []
        for g in np.unique(groups):
            out = groups == g
            model = _fit_model(
                Y[~out], starts[~out] | np.r_[True, np.diff(np.flatnonzero(~out)) > 1], self.variance, self.ridge
            )
            # the fold as a fresh stream; drop the MEWMA warm-up
            stats, _, _ = monitor_statistics(model, Y[out], self.ewma)
            held.append(stats[int(3 / self.ewma) :])
        H = np.vstack(held)
        self._held_out = H
        # normalise each statistic by its held-out quantile, then one threshold on the max
        self._scale = np.maximum(np.quantile(H, self.base_quantile, axis=0), 1e-12)
        score = (H / self._scale).max(axis=1)
        self._threshold = tail_quantile(score, self.alpha, self.tail)
        self._model = _fit_model(Y, starts, self.variance, self.ridge)
        self.reset()
        return self

    def reset(self) -> None:
        """Forget the stream."""
        self._z = self._w = None

    def statistics(self, Y: FloatArray) -> FloatArray:
        """Raw statistics (T, 4), advancing the stream."""
        if self._model is None:
            raise NotFittedError("PlantMonitor is not fitted; call fit(nominal) first")
        stats, self._z, self._w = monitor_statistics(
            self._model, np.asarray(Y, dtype=np.float64), self.ewma, self._z, self._w
        )
        return stats

    def step_batch(self, Y: FloatArray) -> tuple[FloatArray, NDArray[np.bool_]]:
        """(score (T,), flag (T,)): the score is max_k stat_k / scale_k; flag = score > threshold."""
        stats = self.statistics(Y)
        assert self._scale is not None and self._threshold is not None
        score = (stats / self._scale).max(axis=1)
        return score, score > self._threshold

    @property
    def threshold(self) -> float:
        if self._threshold is None:
            raise NotFittedError("PlantMonitor is not fitted; call fit(nominal) first")
        return self._threshold
