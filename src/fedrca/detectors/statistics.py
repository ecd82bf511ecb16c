"""A family of monitoring statistics with one family-wise false-alarm rate (issue 13).

One model of a plant (the proprietary filter, or the same filter with its learned
augmentation) gives, per sample t, three pieces of evidence:

* the **prediction residual** ``r(t) = y(t) - h(x(t))`` of the one-step prediction
  ``x(t)`` (the innovation of a Kalman filter);
* the **estimate** ``x̂(t)`` of the state after seeing ``y(t)``;
* the **reconstruction residual** ``e(t) = y(t) - h(x̂(t))``: what the state cannot
  represent (for an identified model, the part of ``y`` outside the state subspace).

Each statistic looks at one of them and has its own blind spot:

============================  =======================================================================
``innovation``                ``d2(r)``: Mahalanobis distance of the prediction residual (Shewhart
                              chart). Sees spikes, oscillations and a sticking valve; loses a shift
                              the filter has absorbed.
``mewma@λ``                   Multivariate EWMA of the whitened prediction residual,
                              ``w(t) = λ L⁻¹(r(t) - μ) + (1 - λ) w(t-1)``, scored by ``d2(w)``
                              against the covariance of ``w`` *on nominal data*. Sees small
                              persistent biases of the residual (a shift the control loops
                              compensate); averages oscillations out. The empirical covariance of
                              ``w`` (not the textbook ``λ / (2 - λ) I``) matters: residual
                              directions that wander slowly on nominal data (an unmodelled,
                              slowly varying pressure) get their true, larger spread, so their
                              ordinary excursions are not alarms.
``level``                     ``d2(x̂)``: where the plant is in its state space, against the nominal
                              region (a persistent shift the innovations no longer show).
``reconstruction``            ``d2(e)``: departures from the nominal relations between the sensors
                              (the SPE of a PCA monitor, with the filter's state as the scores).
``dispersion``                EWMA of ``d2(r)`` with a short memory (``dispersion`` constant), started
                              at its nominal mean: a sustained rise of the residual's spread (a
                              random variation grown larger) that single samples do not show.
============================  =======================================================================

**Missing values** (NaN entries of ``r`` and ``e``, docs/missing.md): the innovation is
the distance of the observed entries, put on the complete-data scale
(:func:`fedrca.detectors.missing.observed_distance`), and the whitened prediction residual
the MEWMA and the dispersion smooth is its conditional mean given the observed entries
(:func:`fedrca.detectors.missing.conditional_fill`), so every threshold calibrated on
complete nominal data holds: the innovation's rate exactly for Gaussian residuals, the
smoothed statistics' at most (``tests/detectors/test_missing_far.py``). The level needs no
change (the estimate always exists). The reconstruction scores complete rows only
(:func:`complete_rows_distance`: a row with gaps has no complete-data reconstruction
residual, and what it has adds nothing to its observed prediction residual).

**Joint calibration.** Each statistic ``s_k`` is divided by its scale ``c_k``, its
``base_quantile`` on held-out nominal data; the family's score is
``max_k s_k / c_k`` and one threshold ``tau`` on it is the held-out nominal
``1 - alpha`` quantile (:func:`tail_quantile`). So ``alpha`` is the family-wise
false-alarm rate of the plant, whatever statistics are selected.

:func:`family_statistics` is the pure function; :class:`StatisticFamily` keeps
the streaming memory (the EWMA vectors) around it, so any chunking of a stream
gives the same statistics as one batch.

Examples
--------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> r, x, e = rng.normal(size=(3000, 4)), rng.normal(size=(3000, 2)), rng.normal(size=(3000, 4))
>>> fam = StatisticFamily(alpha=0.01, ewma=(0.1,)).fit(r, x, e)
>>> fam.statistics
('innovation', 'mewma@0.1', 'level', 'reconstruction', 'dispersion')
>>> score = fam.score(r + 3.0, x, e)            # a shift of every residual
>>> bool(np.mean(fam.flags(score)) > 0.9)
True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg
from numpy.typing import NDArray

from fedrca.detectors.missing import complete_scale, conditional_fill, observed_distance
from fedrca.exceptions import DataError, ModelError, NotFittedError

__all__ = [
    "STATISTICS",
    "FamilyState",
    "Moments",
    "StatisticFamily",
    "calibrate_family",
    "complete_rows_distance",
    "family_statistics",
    "fit_family",
    "keep_mask",
    "ledoit_wolf_covariance",
    "ledoit_wolf_from_sums",
    "score_of",
    "segment_lengths",
    "segment_statistics",
    "stream_memory",
    "tail_quantile",
]

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]

#: The statistics a family may use (``mewma`` expands to one ``mewma@λ`` per smoothing constant).
STATISTICS = ("innovation", "mewma", "level", "reconstruction", "dispersion")


def ledoit_wolf_covariance(X: FloatArray) -> tuple[FloatArray, float]:
    """The Ledoit-Wolf shrunk covariance of centred rows ``X`` (T, D) and its shrinkage in [0, 1].

    scikit-learn's ``ledoit_wolf(X, assume_centered=True)``, its operations in its order (one block:
    D < 1000), without its argument and array checks: on a plant's window of rows those cost more
    than the estimate itself, and a drift refresh fits six moments per plant
    (:mod:`fedrca.drift.keeper`). The caller passes finite float64 rows. Equal to scikit-learn's
    to a relative 1e-12 on every input (in practice bit for bit; the property test
    ``tests/detectors/test_statistics.py::test_ledoit_wolf_covariance_equals_scikit_learns``).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(50, 3))
    >>> cov, shrinkage = ledoit_wolf_covariance(X - X.mean(axis=0))
    >>> cov.shape, 0.0 <= shrinkage <= 1.0
    ((3, 3), True)
    """
    T, D = X.shape
    if D == 1:
        # one feature: the shrinkage changes nothing
        return np.atleast_2d((X**2).mean()), 0.0
    # S = X'X / T ;  mu = tr(S) / D
    X2 = X**2
    trace = np.sum(X2, axis=0) / T
    mu = np.sum(trace) / D
    # beta_ = sum_t ||x_t||^4 ;  delta_ = ||X'X||_F^2 / T^2
    gram = np.dot(X.T, X)
    beta_ = np.sum(np.dot(X2.T, X2))
    delta_ = np.sum(gram**2) / T**2
    # beta = (sum_t ||x_t x_t' - S||_F^2) / (D T^2) ;  delta = ||S - mu I||_F^2 / D
    beta = 1.0 / (D * T) * (beta_ / T - delta_)
    delta = (delta_ - 2.0 * mu * trace.sum() + D * mu**2) / D
    beta = min(beta, delta)
    shrinkage = 0.0 if beta == 0 else float(beta / delta)
    # (1 - s) S + s mu I, mu = tr(S) / D
    emp = gram / T
    mu = np.sum(np.trace(emp)) / D
    shrunk = (1.0 - shrinkage) * emp
    shrunk.flat[:: D + 1] += shrinkage * mu
    return shrunk, shrinkage


def ledoit_wolf_from_sums(gram: FloatArray, fourth: float, count: int) -> tuple[FloatArray, float]:
    """The Ledoit-Wolf shrunk covariance and shrinkage from sums over ``count`` centred rows ``x_t`` (D,):
    ``gram = sum_t x_t x_t'`` (D, D) and ``fourth = sum_t ||x_t||^4``.

    :func:`ledoit_wolf_covariance`'s estimate from its sufficient statistics (the shrinkage's
    ``sum_t ||x_t x_t' - S||_F^2 = sum_t ||x_t||^4 - T ||S||_F^2``): several blocks of columns fitted from
    one pass over their rows (:func:`fedrca.drift.baseline.refit_family`). Equal to scikit-learn's
    ``ledoit_wolf(X, assume_centered=True)`` to a relative 1e-12
    (``tests/detectors/test_statistics.py::test_ledoit_wolf_from_sums_equals_scikit_learns``).
    """
    gram = np.asarray(gram, dtype=np.float64)
    T, D = int(count), len(gram)
    emp = gram / T
    if D == 1:
        return np.atleast_2d(emp), 0.0
    # S = X'X / T ;  mu = tr(S) / D
    trace = np.diag(emp)
    mu = np.sum(trace) / D
    # delta_ = ||X'X||_F^2 / T^2 ;  beta = (sum_t ||x_t||^4 / T - delta_) / (D T) ;  delta = ||S - mu I||_F^2 / D
    delta_ = np.sum(gram**2) / T**2
    beta = 1.0 / (D * T) * (float(fourth) / T - delta_)
    delta = (delta_ - 2.0 * mu * trace.sum() + D * mu**2) / D
    beta = min(beta, delta)
    shrinkage = 0.0 if beta == 0 else float(beta / delta)
    # (1 - s) S + s mu I
    shrunk = (1.0 - shrinkage) * emp
    shrunk.flat[:: D + 1] += shrinkage * mu
    return shrunk, shrinkage


@dataclass(frozen=True)
class Moments:
    """Nominal mean and whitening of a vector signal (Ledoit-Wolf shrunk covariance).

    Attributes
    ----------
    mean : (D,) nominal mean
    whitening : (D, D) L⁻¹ with ``S = L L'`` the shrunk nominal covariance
    """

    mean: FloatArray
    whitening: FloatArray

    @classmethod
    def fit(cls, X: FloatArray) -> Moments:
        """Moments of nominal rows ``X`` (T, D), T >= 2; rows with a missing entry (NaN) are left out
        (complete-case: the rows of nominal data with gaps, docs/missing.md)."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim == 2 and np.isnan(X).any():
            X = X[~np.isnan(X).any(axis=1)]
        if X.ndim != 2 or len(X) < 2:
            raise DataError(f"need complete nominal rows of shape (T >= 2, D) to fit moments, got {X.shape}")
        if not np.isfinite(X).all():
            raise DataError("nominal rows hold an infinite value; moments need finite rows")
        mean = X.mean(axis=0)
        return cls.from_centred(mean, X - mean)

    @classmethod
    def from_centred(cls, mean: FloatArray, centred: FloatArray) -> Moments:
        """Moments of mean ``mean`` (D,) and the Ledoit-Wolf covariance of rows ``centred`` (T, D) about it
        (rows about their average, or about a trend: :func:`fedrca.drift.baseline.trend_mean`)."""
        if centred.ndim != 2 or len(centred) < 2:
            raise DataError(f"need rows of shape (T >= 2, D) to fit moments, got {centred.shape}")
        if not np.isfinite(centred).all():
            raise DataError("nominal rows hold an infinite value; moments need finite rows")
        cov, _ = ledoit_wolf_covariance(centred)
        return cls._shrunk(mean, np.atleast_2d(cov))

    @classmethod
    def from_sums(cls, mean: FloatArray, gram: FloatArray, fourth: float, count: int) -> Moments:
        """Moments of mean ``mean`` (D,) and the Ledoit-Wolf covariance of ``count`` rows about it given by
        their sums (:func:`ledoit_wolf_from_sums`)."""
        if count < 2:
            raise DataError(f"need at least 2 rows to fit moments, got {count}")
        if not (np.isfinite(gram).all() and math.isfinite(fourth)):
            raise DataError("nominal rows hold an infinite value; moments need finite rows")
        cov, _ = ledoit_wolf_from_sums(gram, fourth, count)
        return cls._shrunk(mean, cov)

    @classmethod
    def _shrunk(cls, mean: FloatArray, cov: FloatArray) -> Moments:
        # a tiny ridge relative to the scale keeps constant columns (zero variance) invertible
        cov = cov + (1e-9 * max(float(np.trace(cov)) / len(cov), 1e-12)) * np.eye(len(cov))
        try:
            L = np.linalg.cholesky(cov)
        except np.linalg.LinAlgError:
            raise ModelError("nominal covariance is not positive definite; use more nominal data") from None
        # L⁻¹ (the covariance is finite: the rows are): L X = I solved by LAPACK's trtrs as
        # scipy.linalg.solve_triangular(L, I, lower=True) calls it for a C-ordered L (the transposed,
        # Fortran-ordered system L'' X = I, upper): the same numbers without the wrapper's checks, which
        # cost more than the solve for a D x D (a refresh fits six;
        # tests/drift/test_baseline.py::test_a_whitening_from_sums_is_the_triangular_solves)
        L = np.ascontiguousarray(L)
        inverse, info = scipy.linalg.lapack.dtrtrs(L.T, np.eye(len(L)), lower=0, trans=1, overwrite_b=1)
        if info != 0:
            raise ModelError("nominal covariance is not positive definite; use more nominal data")
        return cls(mean, inverse)

    def white(self, X: FloatArray) -> FloatArray:
        """Whitened rows ``L⁻¹ (x - μ)``, (T, D)."""
        return np.asarray((X - self.mean) @ self.whitening.T)

    def distance(self, X: FloatArray) -> FloatArray:
        """``d2 = (x - μ)' S⁻¹ (x - μ) = ||L⁻¹ (x - μ)||²`` per row, (T,); a row with missing entries
        (NaN) gets the distance of its observed entries on the complete scale
        (:func:`~fedrca.detectors.missing.observed_distance`)."""
        if np.isnan(X).any():
            return observed_distance(self.mean, self.whitening, X)
        W = self.white(X)
        return np.asarray(np.einsum("td,td->t", W, W))

    def white_observed(self, X: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Whitened rows and their squared norms on the complete scale, (T, D) and (T,), for rows with
        missing entries (NaN): ``z* = L⁻¹ (x_filled - μ)``, the conditional mean of the whitened vector
        given the observed entries, and the distance of the observed entries
        (:mod:`fedrca.detectors.missing`). Complete rows: :meth:`white` and its squared norm."""
        filled, n_observed = conditional_fill(self.mean, self.whitening, X)
        W = self.white(filled)
        d2 = np.einsum("td,td->t", W, W)
        return W, complete_scale(d2, n_observed, X.shape[1])

    def to_dict(self) -> dict[str, Any]:
        return {"mean": self.mean.tolist(), "whitening": self.whitening.tolist()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Moments:
        mean = np.asarray(data["mean"], dtype=np.float64).reshape(-1)
        return cls(mean, np.asarray(data["whitening"], dtype=np.float64).reshape(len(mean), len(mean)))


@dataclass(frozen=True)
class FamilyState:
    """Everything a fitted family needs to score (serialisable to an artifact).

    Attributes
    ----------
    statistics : labels of the K statistics in column order, e.g. ``("innovation", "mewma@0.1", ...)``
    lambdas : smoothing constants of the ``mewma@λ`` statistics, in their column order
    innovation : moments of the prediction residual r
    level : moments of the state estimate x̂
    reconstruction : moments of the reconstruction residual e
    smoothed : moments of each EWMA vector w_λ of the whitened prediction residual (same order as lambdas)
    scale : (K,) per-statistic normaliser (held-out nominal ``base_quantile``)
    threshold : tau on ``max_k s_k / scale_k``
    dispersion : smoothing constant of the ``dispersion`` statistic (0 when unused)
    dispersion_start : nominal mean of ``d2(r)``, where its EWMA starts
    """

    statistics: tuple[str, ...]
    lambdas: tuple[float, ...]
    innovation: Moments
    level: Moments
    reconstruction: Moments
    smoothed: tuple[Moments, ...]
    scale: FloatArray
    threshold: float
    dispersion: float = 0.0
    dispersion_start: float = 0.0

    @property
    def n_statistics(self) -> int:
        """K."""
        return len(self.statistics)

    def with_calibration(self, scale: FloatArray, threshold: float) -> FamilyState:
        """The same moments with another scale and threshold."""
        return FamilyState(
            self.statistics,
            self.lambdas,
            self.innovation,
            self.level,
            self.reconstruction,
            self.smoothed,
            np.asarray(scale, dtype=np.float64).reshape(self.n_statistics),
            float(threshold),
            self.dispersion,
            self.dispersion_start,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form."""
        return {
            "statistics": list(self.statistics),
            "lambdas": list(self.lambdas),
            "innovation": self.innovation.to_dict(),
            "level": self.level.to_dict(),
            "reconstruction": self.reconstruction.to_dict(),
            "smoothed": [m.to_dict() for m in self.smoothed],
            "scale": self.scale.tolist(),
            "threshold": self.threshold,
            "dispersion": [self.dispersion, self.dispersion_start],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FamilyState:
        """Inverse of :meth:`to_dict`."""
        return cls(
            tuple(str(s) for s in data["statistics"]),
            tuple(float(v) for v in data["lambdas"]),
            Moments.from_dict(data["innovation"]),
            Moments.from_dict(data["level"]),
            Moments.from_dict(data["reconstruction"]),
            tuple(Moments.from_dict(m) for m in data["smoothed"]),
            np.asarray(data["scale"], dtype=np.float64),
            float(data["threshold"]),
            *(float(v) for v in data.get("dispersion", (0.0, 0.0))),
        )

    def to_arrays(self, prefix: str) -> dict[str, np.ndarray]:
        """Numeric arrays (for the parameter artifact); statistics coded by their index in :data:`STATISTICS`."""
        codes = [STATISTICS.index(_kind(s)) for s in self.statistics]
        out = {
            f"{prefix}.statistics": np.asarray(codes, dtype=np.int64),
            f"{prefix}.lambdas": np.asarray(self.lambdas, dtype=np.float64),
            f"{prefix}.scale": np.asarray(self.scale, dtype=np.float64),
            f"{prefix}.threshold": np.asarray(self.threshold, dtype=np.float64),
            f"{prefix}.dispersion": np.asarray([self.dispersion, self.dispersion_start], dtype=np.float64),
        }
        named = [("innovation", self.innovation), ("level", self.level), ("reconstruction", self.reconstruction)]
        named += [(f"smoothed{i}", m) for i, m in enumerate(self.smoothed)]
        for name, m in named:
            out[f"{prefix}.{name}.mean"] = np.asarray(m.mean, dtype=np.float64)
            out[f"{prefix}.{name}.whitening"] = np.asarray(m.whitening, dtype=np.float64)
        return out

    @classmethod
    def from_arrays(cls, arrays: Any, prefix: str) -> FamilyState:
        """Inverse of :meth:`to_arrays`."""
        lambdas = tuple(float(v) for v in np.asarray(arrays[f"{prefix}.lambdas"]).reshape(-1))
        kinds = [STATISTICS[int(c)] for c in np.asarray(arrays[f"{prefix}.statistics"]).reshape(-1)]
        labels = _labels(kinds, lambdas)

        def moments(name: str) -> Moments:
            return Moments(
                np.asarray(arrays[f"{prefix}.{name}.mean"], dtype=np.float64).copy(),
                np.asarray(arrays[f"{prefix}.{name}.whitening"], dtype=np.float64).copy(),
            )

        return cls(
            labels,
            lambdas,
            moments("innovation"),
            moments("level"),
            moments("reconstruction"),
            tuple(moments(f"smoothed{i}") for i in range(len(lambdas))),
            np.asarray(arrays[f"{prefix}.scale"], dtype=np.float64).copy(),
            float(arrays[f"{prefix}.threshold"]),
            *(float(v) for v in np.asarray(arrays.get(f"{prefix}.dispersion", (0.0, 0.0))).reshape(2)),
        )


def _kind(label: str) -> str:
    return label.split("@", 1)[0]


def _labels(kinds: Sequence[str], lambdas: Sequence[float]) -> tuple[str, ...]:
    """Column labels: each selected statistic once, ``mewma`` once per smoothing constant."""
    out: list[str] = []
    for kind in kinds:
        labels = [f"mewma@{lam:g}" for lam in lambdas] if kind == "mewma" else [kind]
        out.extend(label for label in labels if label not in out)
    return tuple(out)


def _check_statistics(statistics: Sequence[str], lambdas: Sequence[float]) -> None:
    unknown = [s for s in statistics if s not in STATISTICS]
    if unknown or not statistics:
        raise ModelError(f"statistics must be a non-empty subset of {', '.join(STATISTICS)}, got {list(statistics)}")
    if "mewma" in statistics and not lambdas:
        raise ModelError("the 'mewma' statistic needs at least one smoothing constant (ewma)")
    if any(not 0.0 < lam <= 1.0 for lam in lambdas):
        raise ModelError(f"ewma smoothing constants must be in (0, 1], got {list(lambdas)}")


def _ewma(W: FloatArray, lam: float, last: FloatArray | None) -> FloatArray:
    """``w(t) = λ W(t) + (1 - λ) w(t-1)`` per column, from ``w(-1) = last`` (zero = the nominal mean)."""
    start = np.zeros(W.shape[1]) if last is None else last
    from scipy.signal import lfilter  # at first use (a worker starts without it: fedrca.streams.app.warm_up)

    # one IIR filter in C for all columns
    out, _ = lfilter([lam], [1.0, -(1.0 - lam)], W, axis=0, zi=((1.0 - lam) * start)[None, :])
    return np.asarray(out)


def segment_lengths(n: int, segments: Sequence[int] | None) -> list[int]:
    """Lengths of the consecutive recordings in ``n`` rows (all one recording when None).

    Examples
    --------
    >>> segment_lengths(5, None), segment_lengths(5, [2, 3])
    ([5], [2, 3])
    """
    if segments is None:
        return [n]
    lengths = [int(v) for v in segments]
    if any(v < 1 for v in lengths) or sum(lengths) != n:
        raise DataError(f"segments must be positive lengths summing to the {n} rows, got {lengths}")
    return lengths


def keep_mask(lengths: Sequence[int], skip: int) -> BoolArray:
    """Rows kept (T,): all but the first ``skip`` of each recording (capped at half of it)."""
    keep = np.ones(sum(lengths), dtype=bool)
    start = 0
    for n in lengths:
        keep[start : start + min(skip, n // 2)] = False
        start += n
    return keep


def fit_family(
    r: FloatArray,
    x: FloatArray,
    e: FloatArray,
    statistics: Sequence[str] = STATISTICS,
    ewma: Sequence[float] = (0.1,),
    skip: int = 0,
    segments: Sequence[int] | None = None,
    dispersion: float = 0.2,
) -> FamilyState:
    """Fit the moments of every statistic on nominal streams (scale 1, threshold inf).

    Parameters
    ----------
    r : (T, D) prediction residuals; x : (T, P) state estimates; e : (T, D) reconstruction residuals
    statistics : which statistics the family scores (see :data:`STATISTICS`)
    ewma : the MEWMA smoothing constants
    skip : leading rows of each recording left out of the moments (the filter's start-up)
    segments : lengths of the consecutive recordings in the rows (None: one recording); each
        is a stream of its own (its EWMA starts afresh)
    dispersion : smoothing constant of the ``dispersion`` statistic
    """
    lambdas = tuple(float(v) for v in ewma) if "mewma" in statistics else ()
    _check_statistics(statistics, lambdas)
    r, x, e = (np.asarray(a, dtype=np.float64) for a in (r, x, e))
    lengths = segment_lengths(len(r), segments)
    keep = keep_mask(lengths, skip)
    innovation = Moments.fit(r[keep])
    W, d2 = _whitened(innovation, r)
    smoothed = []
    for lam in lambdas:
        # the EWMA vectors start at the nominal mean (zero) in each recording; their start-up is left out
        pieces, start = [], 0
        for n in lengths:
            piece = _ewma(W[start : start + n][keep[start : start + n]], lam, None)
            pieces.append(piece[min(int(3.0 / lam), len(piece) // 2) :])
            start += n
        smoothed.append(Moments.fit(np.concatenate(pieces)))
    labels = _labels(list(statistics), lambdas)
    use_dispersion = "dispersion" in statistics
    if use_dispersion and not 0.0 < dispersion <= 1.0:
        raise ModelError(f"the dispersion smoothing constant must be in (0, 1], got {dispersion}")
    return FamilyState(
        labels,
        lambdas,
        innovation,
        Moments.fit(x[keep]),
        Moments.fit(e[keep]),
        tuple(smoothed),
        np.ones(len(labels)),
        math.inf,
        float(dispersion) if use_dispersion else 0.0,
        float(d2[keep].mean()) if use_dispersion else 0.0,
    )


def segment_statistics(
    state: FamilyState, r: FloatArray, x: FloatArray, e: FloatArray, segments: Sequence[int] | None = None
) -> FloatArray:
    """Raw statistics (T, K) of rows made of consecutive recordings, each a fresh stream."""
    parts, start = [], 0
    for n in segment_lengths(len(r), segments):
        sl = slice(start, start + n)
        parts.append(family_statistics(state, r[sl], x[sl], e[sl])[0])
        start += n
    return np.concatenate(parts) if parts else np.empty((0, state.n_statistics))


def family_statistics(
    state: FamilyState,
    r: FloatArray,
    x: FloatArray,
    e: FloatArray,
    memory: Sequence[FloatArray | None] | None = None,
) -> tuple[FloatArray, list[FloatArray | None]]:
    """Raw statistics (T, K) in ``state.statistics`` order, continuing a stream.

    Parameters
    ----------
    state : fitted family
    r, x, e : (T, D), (T, P), (T, D) prediction residuals, state estimates, reconstruction residuals
    memory : the last EWMA vector of each smoothing constant (None: a fresh stream)

    Returns
    -------
    stats : (T, K) raw statistics (divide by ``state.scale`` to normalise)
    memory : the EWMA vectors after the last row (pass them to the next call)
    """
    T = len(r)
    slots = len(state.lambdas) + (1 if state.dispersion else 0)
    last: list[FloatArray | None] = list(memory) if memory is not None else [None] * slots
    cols: dict[str, FloatArray] = {}
    W, d2 = _innovation(state, r)
    if "innovation" in state.statistics:
        cols["innovation"] = d2
    if state.dispersion:
        # v(t) = λ_d d2(r(t)) + (1 - λ_d) v(t-1), from the nominal mean of d2
        start = np.array([state.dispersion_start]) if last[-1] is None else last[-1]
        v = _ewma(d2[:, None], state.dispersion, start)[:, 0]
        cols["dispersion"] = v
        if T:
            last[-1] = v[-1:].copy()
    for i, lam in enumerate(state.lambdas):
        # w(t) = λ L⁻¹(r(t) - μ) + (1 - λ) w(t-1) ;  mewma = d2(w) against the nominal moments of w
        Wl = _ewma(W, lam, last[i])
        cols[f"mewma@{lam:g}"] = state.smoothed[i].distance(Wl)
        if T:
            last[i] = Wl[-1].copy()
    if "level" in state.statistics:
        # level = d2(x̂)
        cols["level"] = state.level.distance(x)
    if "reconstruction" in state.statistics:
        # reconstruction = d2(y - h(x̂)), on the complete rows (a row with gaps: 0)
        cols["reconstruction"] = complete_rows_distance(state.reconstruction, e)
    stats = np.column_stack([cols[s] for s in state.statistics]) if T else np.empty((0, state.n_statistics))
    return np.asarray(stats, dtype=np.float64), last


def complete_rows_distance(moments: Moments, e: FloatArray) -> FloatArray:
    """The ``reconstruction`` statistic ``d2(e)`` (T,) of reconstruction residuals ``e`` (T, D): the distance
    of a complete row, 0 for a row with missing entries (it raises no alarm; the row is scored by the
    other statistics).

    A row with gaps has no reconstruction residual of the complete-data kind: its estimate ``x̂`` saw
    fewer sensors, so ``e_o = y_o - h_o(x̂)`` has other moments than the complete rows' ``e_o``, and no
    rule on the complete-data moments puts it on their scale. Scored on them anyway it raised false
    alarms: one dead tag of two collinear ones (a valve and its flow: the fault library's feed valves
    XMV(1) and XMV(2)) left the other's residual off the nominal relations between the sensors, and the
    plant was named a process root cause while its sensor fault was reported
    (``tests/detectors/test_missing_far.py::test_a_dead_collinear_sensor_raises_no_reconstruction_alarm``).
    Nothing of the row is lost: for a linear filter ``x̂ = x + K_o r_o``, so ``e_o = (I - C_o K_o) r_o`` is
    a function of the observed prediction residual ``r_o``, which the innovation statistic scores exactly
    and the MEWMA and the dispersion smooth.

    Examples
    --------
    >>> import numpy as np
    >>> m = Moments(np.zeros(2), np.eye(2))
    >>> complete_rows_distance(m, np.array([[3.0, 4.0], [3.0, np.nan]])).tolist()
    [25.0, 0.0]
    """
    complete = ~np.isnan(e).any(axis=1)
    if complete.all():
        return moments.distance(e)
    out = np.zeros(len(e))
    out[complete] = moments.distance(e[complete])
    return out


def _innovation(state: FamilyState, r: FloatArray) -> tuple[FloatArray, FloatArray]:
    """The whitened prediction residuals (T, D) and their distances d2(r) (T,) (missing entries: module docstring)."""
    return _whitened(state.innovation, r)


def _whitened(moments: Moments, r: FloatArray) -> tuple[FloatArray, FloatArray]:
    if np.isnan(r).any():
        # z* = E[L⁻¹ (r - μ) | r_o] ;  d2 = the observed entries' distance on the complete scale
        return moments.white_observed(r)
    W = moments.white(r)
    # d2(r) = ||L⁻¹ (r - μ)||²
    return W, np.einsum("td,td->t", W, W)


def stream_memory(
    state: FamilyState, r: FloatArray, memory: Sequence[FloatArray | None] | None = None
) -> list[FloatArray | None]:
    """The EWMA memory :func:`family_statistics` keeps after the rows ``r`` (T, D), without computing
    the statistics (the fit's held-out pass needs the memory at a block's start, not the rows before it).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> r, x, e = rng.normal(size=(300, 3)), rng.normal(size=(300, 2)), rng.normal(size=(300, 3))
    >>> state = fit_family(r, x, e, ewma=(0.1, 0.05))
    >>> _, full = family_statistics(state, r, x, e)
    >>> all(np.array_equal(a, b) for a, b in zip(stream_memory(state, r), full))
    True
    """
    slots = len(state.lambdas) + (1 if state.dispersion else 0)
    last: list[FloatArray | None] = list(memory) if memory is not None else [None] * slots
    if len(r) == 0:
        return last
    W, d2 = _innovation(state, r)
    if state.dispersion:
        # v(t) = λ_d d2(r(t)) + (1 - λ_d) v(t-1), from the nominal mean of d2
        start = np.array([state.dispersion_start]) if last[-1] is None else last[-1]
        last[-1] = _ewma(d2[:, None], state.dispersion, start)[-1:, 0].copy()
    for i, lam in enumerate(state.lambdas):
        # w(t) = λ L⁻¹(r(t) - μ) + (1 - λ) w(t-1)
        last[i] = _ewma(W, lam, last[i])[-1].copy()
    return last


def tail_quantile(score: FloatArray, alpha: float, tail: float = 0.1, confidence: float = 0.5) -> float:
    """The ``1 - alpha`` quantile of ``score`` from an exponential fit to its upper ``tail`` share.

    Peaks over threshold: above ``u`` = the ``1 - tail`` quantile, the excesses are
    taken as exponential with mean ``beta``, so ``P(s > x) = tail exp(-(x - u) / beta)``
    and the quantile is ``u + beta log(tail / alpha)``. An empirical quantile at
    alpha = 0.001 rests on one or two held-out samples when nominal data is short
    (500 rows); the fit uses the top ``tail`` share.

    ``beta`` is estimated from the k excesses; with ``confidence`` above 0.5 its upper
    confidence bound ``beta_hat (1 + z / sqrt(k))`` (z the standard normal quantile of
    ``confidence``; the estimate's relative standard error is ``1 / sqrt(k)``) is used,
    so the false-alarm rate stays at ``alpha`` with that confidence however short the
    nominal data: a 500-row record gets a wider margin than 3000 rows.

    Examples
    --------
    >>> import numpy as np
    >>> s = np.random.default_rng(0).exponential(size=200_000)
    >>> round(tail_quantile(s, 0.001), 1), round(float(np.log(1000)), 1)
    (6.9, 6.9)
    >>> short = s[:500]
    >>> tail_quantile(short, 0.001, confidence=0.95) > tail_quantile(short, 0.001)
    True
    """
    score = np.asarray(score, dtype=np.float64)
    if len(score) == 0:
        raise DataError("no held-out nominal scores to calibrate a threshold on")
    if not 0.0 < confidence < 1.0:
        raise ModelError(f"confidence must be in (0, 1), got {confidence}")
    if alpha >= tail:
        return float(np.quantile(score, 1.0 - alpha))
    u = float(np.quantile(score, 1.0 - tail))
    excess = score[score > u] - u
    if len(excess) == 0:
        return u
    from scipy.stats import norm  # at first use (a fit): a worker starts without it

    # beta = mean excess, raised to its upper confidence bound: beta (1 + z / sqrt(k))
    z = max(float(norm.ppf(confidence)), 0.0)
    beta = float(excess.mean()) * (1.0 + z / math.sqrt(len(excess)))
    # P(s > x) = tail exp(-(x - u) / beta) = alpha  =>  x = u + beta log(tail / alpha)
    return u + beta * float(np.log(tail / alpha))


def calibrate_family(
    state: FamilyState,
    held_out: FloatArray,
    alpha: float,
    base_quantile: float = 0.99,
    tail: float = 0.1,
    confidence: float = 0.5,
) -> FamilyState:
    """Scale and threshold from held-out nominal statistics (n, K): one family-wise ``alpha``."""
    H = np.asarray(held_out, dtype=np.float64)
    if H.ndim != 2 or H.shape[1] != state.n_statistics or len(H) < 10:
        raise DataError(f"need held-out nominal statistics of shape (n >= 10, {state.n_statistics}), got {H.shape}")
    # c_k = base quantile of s_k ;  tau = (1 - alpha) quantile of max_k s_k / c_k
    scale = np.maximum(np.quantile(H, base_quantile, axis=0), 1e-12)
    return state.with_calibration(scale, tail_quantile((H / scale).max(axis=1), alpha, tail, confidence))


class StatisticFamily:
    """A statistic family with streaming memory: fit on nominal evidence, then score streams.

    Parameters
    ----------
    statistics : subset of :data:`STATISTICS`
    ewma : MEWMA smoothing constants (one ``mewma@λ`` statistic each)
    alpha : family-wise false-alarm rate per sample
    base_quantile : quantile each statistic is normalised by
    tail : share of the held-out scores the exceedance tail is fitted to
    confidence : confidence of the threshold (see :func:`tail_quantile`; 0.5 = the plain estimate)
    dispersion : smoothing constant of the ``dispersion`` statistic
    """

    def __init__(
        self,
        statistics: Sequence[str] = STATISTICS,
        ewma: Sequence[float] = (0.1,),
        alpha: float = 0.001,
        base_quantile: float = 0.99,
        tail: float = 0.1,
        confidence: float = 0.5,
        dispersion: float = 0.2,
    ) -> None:
        if not 0.0 < alpha < 1.0:
            raise ModelError(f"alpha must be in (0, 1), got {alpha}")
        if not 0.0 < base_quantile < 1.0 or not 0.0 < tail < 1.0:
            raise ModelError("base_quantile and tail must be in (0, 1)")
        lambdas = tuple(float(v) for v in ewma)
        _check_statistics(list(statistics), lambdas if "mewma" in statistics else ())
        self.statistics_selected = tuple(statistics)
        self.ewma = lambdas
        self.alpha = alpha
        self.base_quantile = base_quantile
        self.tail = tail
        self.confidence = confidence
        self.dispersion = dispersion
        self._state: FamilyState | None = None
        self._memory: list[FloatArray | None] | None = None

    # -- fitting ------------------------------------------------------------------------
    def fit(
        self,
        r: FloatArray,
        x: FloatArray,
        e: FloatArray,
        held_out: FloatArray | None = None,
        skip: int = 0,
        segments: Sequence[int] | None = None,
    ) -> StatisticFamily:
        """Moments on the nominal evidence (``segments``: lengths of its consecutive recordings,
        ``skip`` leading rows of each left out); scale and threshold on ``held_out`` statistics
        (n, K) when given, else on the in-sample ones."""
        state = fit_family(r, x, e, self.statistics_selected, self.ewma, skip, segments, self.dispersion)
        if held_out is None:
            lengths = segment_lengths(len(r), segments)
            held_out = segment_statistics(state, r, x, e, lengths)[keep_mask(lengths, skip)]
        self._state = calibrate_family(state, held_out, self.alpha, self.base_quantile, self.tail, self.confidence)
        self.reset()
        return self

    @property
    def state(self) -> FamilyState:
        """The fitted statistics; NotFittedError before :meth:`fit`."""
        if self._state is None:
            raise NotFittedError("StatisticFamily is not fitted; call fit(nominal evidence) first")
        return self._state

    @state.setter
    def state(self, value: FamilyState) -> None:
        self._state = value
        self.reset()

    @property
    def statistics(self) -> tuple[str, ...]:
        """Column labels of :meth:`normalised`."""
        return self.state.statistics

    @property
    def threshold_value(self) -> float:
        """tau on the normalised score."""
        return self.state.threshold

    # -- streaming ------------------------------------------------------------------------
    def reset(self) -> None:
        """Restart the EWMA vectors at the nominal mean."""
        self._memory = None

    def get_state(self) -> dict[str, Any]:
        """Mutable streaming state (the EWMA vectors)."""
        memory = self._memory or []
        return {"memory": [None if m is None else np.asarray(m).tolist() for m in memory]}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`get_state` output."""
        memory = state.get("memory") or []
        self._memory = [None if m is None else np.asarray(m, dtype=np.float64) for m in memory] or None

    @property
    def memory(self) -> list[FloatArray | None] | None:
        """The EWMA vectors after the last sample (None: a fresh stream), as :func:`family_statistics` keeps them."""
        return self._memory

    @memory.setter
    def memory(self, value: list[FloatArray | None] | None) -> None:
        self._memory = value

    def normalised(self, r: FloatArray, x: FloatArray, e: FloatArray) -> FloatArray:
        """Normalised statistics ``s_k / c_k`` (T, K); advances the stream."""
        stats, self._memory = family_statistics(self.state, r, x, e, self._memory)
        return np.asarray(stats / self.state.scale)

    def score(self, r: FloatArray, x: FloatArray, e: FloatArray) -> FloatArray:
        """Family score ``max_k s_k / c_k`` (T,); advances the stream."""
        return score_of(self.normalised(r, x, e))

    def flags(self, score: FloatArray) -> BoolArray:
        """Z = score > tau."""
        return np.asarray(score > self.state.threshold)


def score_of(normalised: FloatArray) -> FloatArray:
    """``max_k`` over the normalised statistics (T, K) -> (T,) (0 for no statistic)."""
    if normalised.shape[1] == 0:
        return np.zeros(len(normalised))
    return np.asarray(normalised.max(axis=1))
