"""The refresh maths: a plant's statistics re-fitted on its recent nominal evidence, moved a bounded step.

A plant's *baseline* is what its scores are measured against: the means and covariances
(:class:`~fedrca.detectors.statistics.Moments`) of its statistic family, for the proprietary
model and for the augmented one (:class:`~fedrca.detectors.statistics.FamilyState`; the
residual scorer's :class:`~fedrca.detectors.scoring.ScorerState` likewise). A refresh keeps
everything else: the fixed filter, Theta, and the scales and threshold, which are quantiles
of *normalised* statistics and keep their meaning when the moments follow the plant
(re-estimating a 0.3 % tail on a few days of rows with the alarms cut out would bias it low,
and the next refresh lower still).

:func:`refit_family` re-fits the moments on the evidence (r, x̂, e) of the rows a refresh may
read (the MEWMA's moments, set by the residual's autocorrelation, are kept);
:func:`limit_moments` moves each moment from the old baseline toward the re-fitted one
by at most ``max_shift`` standard deviations of the old distribution (the mean) and
``max_scale`` in log-eigenvalue (the covariance, along the geodesic of positive-definite
matrices); :func:`transfer_memory` carries the streaming EWMA vectors into the new
whitening exactly, so a refresh between two samples changes no statistic but through the
new moments.

Examples
--------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> old = Moments.fit(rng.normal(size=(2000, 3)))
>>> new = Moments.fit(rng.normal(size=(2000, 3)) + [3.0, 0.0, 0.0])
>>> step = limit_moments(old, new, max_shift=0.5, max_scale=0.2)
>>> round(step.shift, 1), round(step.applied, 2) <= 0.5
(3.1, True)
>>> round(float(mean_shift(old, step.moments)), 2)
0.5
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg
from numpy.typing import NDArray

from fedrca.detectors.scoring import ScorerState
from fedrca.detectors.statistics import FamilyState, Moments
from fedrca.exceptions import DataError

__all__ = [
    "FamilyStep",
    "MomentStep",
    "covariance",
    "covariance_change",
    "limit_family",
    "limit_moments",
    "lower_inverse",
    "mean_shift",
    "refit_family",
    "refit_residual",
    "transfer_memory",
    "trend_mean",
]

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]


def lower_inverse(W: NDArray[np.floating[Any]]) -> FloatArray:
    """The inverse of a lower-triangular ``W`` (D, D), lower-triangular too: ``L = W⁻¹``.

    LAPACK's ``trtri``: a triangular solve against the identity, with its argument checks, is many
    times longer for a plant's D x D, and a refresh inverts about ten.

    Raises
    ------
    numpy.linalg.LinAlgError
        When ``W`` is singular (a zero on its diagonal).
    """
    lower = np.asarray(W, dtype=np.float64)
    if lower.size == 0:
        return lower.copy()
    L, info = scipy.linalg.lapack.dtrtri(lower, lower=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"a whitening is singular (trtri info {info})")
    return np.asarray(np.tril(L))


def covariance(m: Moments) -> FloatArray:
    """The covariance ``S = L L'`` behind a whitening ``L⁻¹`` (D, D)."""
    L = lower_inverse(m.whitening)
    return np.asarray(L @ L.T)


def mean_shift(old: Moments, new: Moments) -> float:
    """How far the mean moved, in standard deviations of the old distribution: ``||L_old⁻¹ (mu_new - mu_old)||``."""
    return float(np.linalg.norm(old.whitening @ (new.mean - old.mean)))


def _relative_eigen(old: Moments, new: Moments) -> tuple[FloatArray, FloatArray]:
    """Eigen-decomposition of ``M = L_old⁻¹ S_new L_old⁻ᵀ`` (the new covariance in the old whitened units)."""
    M = old.whitening @ covariance(new) @ old.whitening.T
    lam, V = np.linalg.eigh((M + M.T) / 2.0)
    return np.maximum(lam, 1e-300), V


def covariance_change(old: Moments, new: Moments) -> float:
    """How much the covariance changed: ``max_i |log lambda_i|`` of ``L_old⁻¹ S_new L_old⁻ᵀ`` (0 = the same)."""
    lam, _ = _relative_eigen(old, new)
    return float(np.max(np.abs(np.log(lam)))) if len(lam) else 0.0


@dataclass(frozen=True)
class MomentStep:
    """One moment's step: the moments it ends at, the re-fit's full move and the share applied.

    Attributes
    ----------
    moments : the moments after the step
    shift : the re-fit mean's distance from the old one (old standard deviations)
    scale : the re-fit covariance's change, ``max |log eigenvalue|``
    applied : t in [0, 1], the share of the way from old to re-fit the step went (1: all of it)
    """

    moments: Moments
    shift: float
    scale: float
    applied: float


def _moments_between(
    old: Moments, new: Moments, t: float, eigen: tuple[FloatArray, FloatArray] | None = None
) -> Moments:
    """The point ``t`` of the way from ``old`` to ``new``: the mean on the straight line, the covariance on
    the geodesic of positive-definite matrices ``S(t) = L_old V diag(lambda^t) V' L_old'`` (``eigen``: the
    pair's :func:`_relative_eigen`, when the caller has it)."""
    if t >= 1.0:
        return new
    if t <= 0.0:
        return old
    lam, V = _relative_eigen(old, new) if eigen is None else eigen
    L_old = lower_inverse(old.whitening)
    # S(t) = L_old V diag(lambda^t) V' L_old'
    root = L_old @ V * np.sqrt(lam**t)
    S = root @ root.T
    L = np.linalg.cholesky((S + S.T) / 2.0)
    # mu(t) = mu_old + t (mu_new - mu_old)
    mean = old.mean + t * (new.mean - old.mean)
    return Moments(mean, lower_inverse(L))


def limit_moments(old: Moments, new: Moments, max_shift: float, max_scale: float) -> MomentStep:
    """Move from ``old`` toward ``new`` by at most ``max_shift`` (mean) and ``max_scale`` (covariance).

    One share ``t = min(1, max_shift / shift, max_scale / scale)`` of the way for the mean and the
    covariance together, so a limited step is a point of the same path whatever bound binds.
    """
    eigen = _relative_eigen(old, new)
    # shift = ||L_old⁻¹ (mu_new - mu_old)|| ;  scale = max |log lambda| (covariance_change)
    shift = mean_shift(old, new)
    scale = float(np.max(np.abs(np.log(eigen[0])))) if len(eigen[0]) else 0.0
    t = 1.0
    if shift > max_shift:
        t = min(t, max_shift / shift)
    if scale > max_scale:
        t = min(t, max_scale / scale)
    return MomentStep(_moments_between(old, new, t, eigen), shift, scale, t)


def trend_mean(rows: FloatArray, times: FloatArray | None, end: float | None = None) -> tuple[FloatArray, FloatArray]:
    """The rows' mean now, and the rows about their mean or trend: ``(mu (D,), rows - fit (T, D))``.

    Without ``times`` ``mu`` is the rows' average. With them (T,) it is the value at ``end`` of the
    least-squares line ``mu + b (t - end)`` through the rows: a window's average lags a drift by half
    the window (a mean moving ``v`` per row is ``v W / 2`` behind at the end of a ``W``-row window),
    the line's value at the end does not
    (``tests/drift/test_follow.py::test_a_trend_follows_drift_closer_than_an_average``).

    Examples
    --------
    >>> t = np.arange(100.0)
    >>> rows = np.column_stack([0.01 * t, np.ones(100)])
    >>> [round(float(v), 3) for v in trend_mean(rows, None)[0]]
    [0.495, 1.0]
    >>> [round(float(v), 3) for v in trend_mean(rows, t, 100.0)[0]]
    [1.0, 1.0]
    """
    rows = np.asarray(rows, dtype=np.float64)
    if times is None or len(rows) < 3:
        mean = rows.mean(axis=0)
        return mean, rows - mean
    t = np.asarray(times, dtype=np.float64)
    t = t - (t[-1] if end is None else float(end))
    # the least-squares line through the rows, in closed form about the times' average (its normal
    # equations are then diagonal): b = sum (t - tbar)(x - xbar) / sum (t - tbar)^2, mu = xbar - b tbar
    tbar = t.mean()
    dt = t - tbar
    xbar = rows.mean(axis=0)
    about = rows - xbar
    spread = float(dt @ dt)
    if spread == 0.0:  # every row at one time: no slope to fit
        return xbar, about
    slope = (dt @ about) / spread
    # rows - (mu + b t) = (rows - xbar) - b (t - tbar)   (in place: the same numbers, one array fewer)
    about -= np.outer(dt, slope)
    return xbar - slope * tbar, about


def _stacked_rows(parts: Sequence[FloatArray], use: BoolArray) -> FloatArray:
    """``np.concatenate(parts, axis=1)[use]`` (T', sum of widths): one copy of the kept rows when they are one
    run (a refresh's: the start-up and the rows near an alarm at the window's ends left out), not two."""
    kept = np.flatnonzero(use)
    if len(kept) and kept[-1] - kept[0] + 1 == len(kept):
        lo, hi = int(kept[0]), int(kept[-1]) + 1
        return np.concatenate([p[lo:hi] for p in parts], axis=1)
    return np.concatenate(parts, axis=1)[use]


def refit_family(
    state: FamilyState,
    r: FloatArray,
    x: FloatArray,
    e: FloatArray,
    use: BoolArray,
    segments: Sequence[int] | None = None,
    covariances: bool = True,
    times: FloatArray | None = None,
    end: float | None = None,
) -> FamilyState:
    """The family's moments re-fitted on the rows ``use`` of the evidence; scales and threshold kept.

    Parameters
    ----------
    state : the baseline in use (its statistics, smoothing constants, scales and threshold are kept)
    r, x, e : (T, D), (T, P), (T, D) prediction residuals, state estimates and reconstruction residuals of
        the history's rows under the fixed filter (each contiguous run a stream of its own)
    use : (T,) rows the refresh may read (no alarm near them, the filter's start-up left out)
    segments : lengths of the contiguous runs the rows are made of (None: one); unused, the moments are
        those of single rows
    covariances : re-fit the covariances too (else only the means move: the spreads stay those of
        commissioning)
    times : (T,) the rows' seqs, for a trend (None: each mean is the rows' average)
    end : the seq the trend is evaluated at (the refresh's); None with ``times``: the last row's

    The smoothed (MEWMA) moments are kept: they describe the EWMA of the residual *whitened by the
    innovation moments*, whose mean is zero once the innovation mean is re-fitted and whose spread is
    set by the residual's autocorrelation, a property of the plant's dynamics and the filter. A few
    days of rows hold too few independent EWMA values (about ``T lambda``) to re-estimate it.
    """
    use = np.asarray(use, dtype=bool)
    if int(use.sum()) < 2:
        raise DataError(f"a refresh needs at least 2 usable rows, got {int(use.sum())}")
    at = None if times is None else np.asarray(times, dtype=np.float64)[use]
    old = (state.innovation, state.level, state.reconstruction)
    widths = [r.shape[1], x.shape[1], e.shape[1]]
    # the three moments' rows side by side: one trend, one Gram matrix, one pass for the fourth moments
    rows = _stacked_rows((r, x, e), use)
    mean, centred = trend_mean(rows, at, end)
    starts = np.cumsum([0, *widths[:-1]]).tolist()
    if covariances:
        if not np.isfinite(centred).all():
            raise DataError("the refresh's rows hold an infinite value; moments need finite rows")
        # sum_t c_t c_t' (each moment's block on the diagonal)
        gram = centred.T @ centred
        squares = centred * centred
    moments = []
    for k, (o, d) in enumerate(zip(starts, widths, strict=True)):
        mu = mean[o : o + d].copy()
        if covariances:
            # sum_t ||c_t||^4 of the moment's columns; its Ledoit-Wolf covariance about the line (or average)
            norms = np.sum(squares[:, o : o + d], axis=1)
            fourth = float(np.sum(norms * norms))
            moments.append(Moments.from_sums(mu, gram[o : o + d, o : o + d], fourth, len(rows)))
        else:
            # mu = the rows' mean (or the trend's value at the end); the old whitening (spread) kept
            moments.append(Moments(mu, old[k].whitening))
    innovation, level, reconstruction = moments

    return FamilyState(
        state.statistics,
        state.lambdas,
        innovation,
        level,
        reconstruction,
        state.smoothed,
        state.scale,
        state.threshold,
        state.dispersion,
        state.dispersion_start,
    )


@dataclass(frozen=True)
class FamilyStep:
    """A family's bounded step: the baseline it ends at and each moment's step (innovation, level,
    reconstruction; the smoothed moments follow the innovation's whitening)."""

    state: FamilyState
    steps: dict[str, MomentStep]

    @property
    def shift(self) -> float:
        """The largest re-fit mean shift over the moments (old standard deviations)."""
        return max((s.shift for s in self.steps.values()), default=0.0)

    @property
    def scale(self) -> float:
        """The largest re-fit covariance change over the moments."""
        return max((s.scale for s in self.steps.values()), default=0.0)

    @property
    def limited(self) -> bool:
        """Whether a bound held any moment back."""
        return any(s.applied < 1.0 for s in self.steps.values())


def limit_family(old: FamilyState, refit: FamilyState, max_shift: float, max_scale: float) -> FamilyStep:
    """Step from ``old`` toward ``refit`` within the bounds (:func:`limit_moments` per moment).

    The innovation, level and reconstruction moments each take their own bounded step; the smoothed
    (MEWMA) moments are the re-fit's (the old ones, :func:`refit_family`): when the innovation mean is
    held back, the MEWMA of the residual whitened by the stepped moments keeps seeing the part of the
    shift that was not absorbed.
    """
    steps = {
        "innovation": limit_moments(old.innovation, refit.innovation, max_shift, max_scale),
        "level": limit_moments(old.level, refit.level, max_shift, max_scale),
        "reconstruction": limit_moments(old.reconstruction, refit.reconstruction, max_shift, max_scale),
    }
    state = FamilyState(
        old.statistics,
        old.lambdas,
        steps["innovation"].moments,
        steps["level"].moments,
        steps["reconstruction"].moments,
        refit.smoothed,
        old.scale,
        old.threshold,
        old.dispersion,
        old.dispersion_start,
    )
    return FamilyStep(state, steps)


def refit_residual(state: ScorerState, r: FloatArray, use: BoolArray) -> ScorerState:
    """The residual scorer's mean and whitening re-fitted on the rows ``use`` of ``r``; threshold kept."""
    use = np.asarray(use, dtype=bool)
    m = Moments.fit(r[use])
    return ScorerState(m.mean, m.whitening, state.threshold, state.ewma_start)


def transfer_memory(
    old: FamilyState, new: FamilyState, memory: Sequence[FloatArray | None] | None
) -> list[FloatArray | None] | None:
    """The streaming memory of ``old`` as ``new`` would have it: exact for the MEWMA vectors.

    ``w = L_old⁻¹ (EWMA(r) - mu_old)``, so ``w_new = L_new⁻¹ (L_old w_old + mu_old - mu_new)``: the
    recursion then continues as if the stream had always been whitened by ``new``
    (``tests/drift/test_baseline.py::test_transferred_memory_continues_the_stream``). The dispersion
    statistic's memory (an EWMA of d2, not linear in the whitening) is kept as it is: it forgets in
    a few rows.
    """
    if memory is None:
        return None
    L_old = lower_inverse(old.innovation.whitening)
    out: list[FloatArray | None] = list(memory)
    for i in range(len(old.lambdas)):
        w = out[i]
        if w is None:
            continue
        # w_new = L_new⁻¹ (L_old w_old + mu_old - mu_new)
        raw = L_old @ np.asarray(w, dtype=np.float64) + old.innovation.mean - new.innovation.mean
        out[i] = np.asarray(new.innovation.whitening @ raw)
    return out


def finite_or(value: float, default: float) -> float:
    """``value`` when finite, else ``default`` (a report never carries NaN)."""
    return value if math.isfinite(value) else default
