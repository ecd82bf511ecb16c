"""Residual scoring: Mahalanobis distance, nominal thresholds, optional EWMA smoothing.

All statistics (mean, shrinkage covariance, threshold) come from nominal
residuals only; fault data is never used for calibration.

Missing values (NaN entries of a residual, docs/missing.md): ``d2`` is the distance of
the observed entries on the complete-data scale
(:func:`fedrca.detectors.missing.observed_distance`), so the threshold holds whatever the
pattern; the MEWMA (``smooth="residual"``) smooths the residual completed with the
conditional mean of its missing entries (:func:`~fedrca.detectors.missing.conditional_fill`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import scipy.linalg
from numpy.typing import NDArray

from fedrca.detectors.missing import conditional_fill, observed_distance
from fedrca.exceptions import DataError, ModelError, NotFittedError

__all__ = ["ResidualScorer", "ScorerState"]

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class ScorerState:
    """Everything a fitted scorer needs to score (serialisable to an artifact).

    Attributes
    ----------
    mean : (D,) nominal residual mean
    whitening : (D, D) inverse Cholesky factor L^-1 of the shrunk covariance
    threshold : float, tau on (smoothed) d2
    ewma_start : float, nominal mean of d2, where the EWMA starts
    """

    mean: FloatArray
    whitening: FloatArray
    threshold: float
    ewma_start: float

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form."""
        return {
            "mean": self.mean.tolist(),
            "whitening": self.whitening.tolist(),
            "threshold": self.threshold,
            "ewma_start": self.ewma_start,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScorerState:
        """Inverse of :meth:`to_dict`."""
        return cls(
            np.asarray(data["mean"], dtype=np.float64),
            np.asarray(data["whitening"], dtype=np.float64),
            float(data["threshold"]),
            float(data["ewma_start"]),
        )


class ResidualScorer:
    """Mahalanobis distance of residuals with a nominal threshold.

    ``d2(t) = (r(t) - mu)' S^-1 (r(t) - mu)`` with mu and the Ledoit-Wolf shrunk
    covariance S of nominal residuals; optionally smoothed by an EWMA
    ``s(t) = lam d2(t) + (1 - lam) s(t-1)`` (a standard multivariate-SPC
    improvement for small persistent shifts); flag ``Z = s > tau``.

    Parameters
    ----------
    threshold : "percentile" (tau = that percentile of nominal d2) or "chi2"
        (tau = chi-square quantile with D degrees of freedom at 1 - alpha; only
        meaningful without smoothing)
    percentile : float in (0, 100), default 99
    alpha : float in (0, 1), default 0.01
    ewma : float in (0, 1] or None (off, default); the smoothing weight lam
    smooth : "d2" (EWMA of the distance) or "residual" (MEWMA, Lowry et al. 1992: the
        residual vector is smoothed and scored against its asymptotic covariance
        lam / (2 - lam) S; far more sensitive to small persistent shifts)
    shrinkage : "ledoit-wolf" or a fixed shrinkage intensity in [0, 1]
    margin : float >= 1, multiplies tau (extra headroom for heavier tails on new data)

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> scorer = ResidualScorer(percentile=99).fit(rng.normal(size=(2000, 3)))
    >>> float(np.mean(scorer.flags(scorer.score(rng.normal(size=(2000, 3)))))) < 0.03
    True
    """

    def __init__(
        self,
        threshold: Literal["percentile", "chi2"] = "percentile",
        percentile: float = 99.0,
        alpha: float = 0.01,
        ewma: float | None = None,
        shrinkage: str | float = "ledoit-wolf",
        margin: float = 1.0,
        smooth: Literal["d2", "residual"] = "d2",
    ) -> None:
        if threshold not in ("percentile", "chi2"):
            raise ModelError(f"threshold must be 'percentile' or 'chi2', got {threshold!r}")
        if not 0.0 < percentile < 100.0:
            raise ModelError(f"percentile must be in (0, 100), got {percentile}")
        if not 0.0 < alpha < 1.0:
            raise ModelError(f"alpha must be in (0, 1), got {alpha}")
        if ewma is not None and not 0.0 < ewma <= 1.0:
            raise ModelError(f"ewma must be in (0, 1] or None, got {ewma}")
        if isinstance(shrinkage, str) and shrinkage != "ledoit-wolf":
            raise ModelError(f"shrinkage must be 'ledoit-wolf' or a number in [0, 1], got {shrinkage!r}")
        if not isinstance(shrinkage, str) and not 0.0 <= float(shrinkage) <= 1.0:
            raise ModelError(f"shrinkage must be in [0, 1], got {shrinkage}")
        if smooth not in ("d2", "residual"):
            raise ModelError(f"smooth must be 'd2' or 'residual', got {smooth!r}")
        if margin < 1.0:
            raise ModelError(f"margin must be >= 1, got {margin}")
        self.threshold = threshold
        self.percentile = percentile
        self.alpha = alpha
        self.ewma = ewma
        self.shrinkage = shrinkage
        self.margin = margin
        self.smooth = smooth
        self._state: ScorerState | None = None
        self._last: FloatArray | None = None

    # -- fitting ------------------------------------------------------------------------
    def fit(self, residuals: FloatArray, calibration_residuals: list[FloatArray] | None = None) -> ResidualScorer:
        """Fit mean, shrunk covariance and threshold on nominal residuals (T, D).

        Parameters
        ----------
        residuals : (T, D) nominal residuals; mean and covariance come from them
        calibration_residuals : list of (T_k, D) held-out nominal residual segments,
            optional; when given, the percentile threshold is taken on their d2
            (each segment smoothed on its own) instead of on ``residuals``
        """
        R_all = np.asarray(residuals, dtype=np.float64)
        if R_all.ndim != 2:
            raise DataError(f"need nominal residuals of shape (T >= 2, D), got {R_all.shape}")
        if np.isinf(R_all).any():
            raise DataError("nominal residuals contain inf")
        # the moments on the complete rows (a row with a missing entry is scored, not fitted on)
        R = R_all[~np.isnan(R_all).any(axis=1)]
        if len(R) < 2:
            raise DataError(f"need at least 2 complete nominal residual rows, got {len(R)} of {len(R_all)}")
        mean = R.mean(axis=0)
        centered = R - mean
        if isinstance(self.shrinkage, str):
            from sklearn.covariance import ledoit_wolf  # when fitting only (start-up of a scoring worker)

            cov, _ = ledoit_wolf(centered, assume_centered=True)
        else:
            sample = centered.T @ centered / len(R)
            target = np.trace(sample) / sample.shape[0] * np.eye(sample.shape[0])
            cov = (1.0 - float(self.shrinkage)) * sample + float(self.shrinkage) * target
        cov = np.atleast_2d(cov) + 1e-12 * np.eye(R.shape[1])
        try:
            L = np.linalg.cholesky(cov)
        except np.linalg.LinAlgError:
            raise ModelError("residual covariance is not positive definite; use more nominal data") from None
        whitening = scipy.linalg.solve_triangular(L, np.eye(len(L)), lower=True)
        ewma_start = float(self._mahalanobis(R, mean, whitening).mean())
        probe = ScorerState(mean, whitening, np.inf, ewma_start)
        segments = calibration_residuals if calibration_residuals else [R_all]
        smoothed = np.concatenate([self._distances(np.asarray(seg), probe, None)[0] for seg in segments])
        if self.threshold == "chi2":
            from scipy.stats import chi2  # at first use (a fit): a worker starts without it

            tau = float(chi2.ppf(1.0 - self.alpha, R.shape[1]))
        else:
            tau = float(np.percentile(smoothed, self.percentile))
        self._state = ScorerState(mean, whitening, tau * self.margin, ewma_start)
        self.reset()
        return self

    @property
    def state(self) -> ScorerState:
        """The fitted statistics; raises NotFittedError before :meth:`fit`."""
        if self._state is None:
            raise NotFittedError("ResidualScorer is not fitted; call fit(nominal_residuals) first")
        return self._state

    @state.setter
    def state(self, value: ScorerState) -> None:
        self._state = value
        self.reset()

    @property
    def threshold_value(self) -> float:
        """tau."""
        return self.state.threshold

    # -- scoring ------------------------------------------------------------------------
    def reset(self) -> None:
        """Restart the EWMA at its nominal starting value."""
        self._last = None

    def get_state(self) -> dict[str, Any]:
        """Mutable streaming state (the EWMA memory)."""
        return {"last": None if self._last is None else np.asarray(self._last).tolist()}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`get_state` output."""
        last = state["last"]
        self._last = None if last is None else np.asarray(last, dtype=np.float64)

    def score(self, residuals: FloatArray) -> FloatArray:
        """d2 (smoothed if configured) of residuals (T, D) -> (T,); advances the EWMA."""
        R = np.atleast_2d(np.asarray(residuals, dtype=np.float64))
        d2, self._last = self._distances(R, self.state, self._last)
        return d2

    def flags(self, d2: FloatArray) -> NDArray[np.bool_]:
        """Z = d2 > tau."""
        return np.asarray(d2 > self.state.threshold)

    # -- helpers ------------------------------------------------------------------------
    @staticmethod
    def _mahalanobis(R: FloatArray, mean: FloatArray, whitening: FloatArray) -> FloatArray:
        if np.isnan(R).any():
            # the observed entries' distance on the complete scale
            return observed_distance(mean, whitening, R)
        # d2 = ||L^-1 (r - mu)||^2 with S = L L'
        white = (R - mean) @ whitening.T
        return np.asarray(np.einsum("td,td->t", white, white))

    def _distances(
        self, R: FloatArray, st: ScorerState, last: FloatArray | None
    ) -> tuple[FloatArray, FloatArray | None]:
        """(smoothed) d2 of R (T, D) continuing from the EWMA memory ``last``; returns the new memory."""
        if self.ewma is None or len(R) == 0:
            return self._mahalanobis(R, st.mean, st.whitening), last
        from scipy.signal import lfilter  # at first use (a worker starts without it: fedrca.streams.app.warm_up)

        lam = self.ewma
        if self.smooth == "d2":
            start = np.array([st.ewma_start]) if last is None else last
            raw = self._mahalanobis(R, st.mean, st.whitening)
            # s(t) = lam d2(t) + (1 - lam) s(t-1) ; one IIR filter in C
            out, _ = lfilter([lam], [1.0, -(1.0 - lam)], raw, zi=(1.0 - lam) * start)
            return np.asarray(out), np.asarray(out[-1:])
        start_vec = st.mean if last is None else last
        if np.isnan(R).any():
            # a missing entry: its conditional mean given the row's observed ones
            R = conditional_fill(st.mean, st.whitening, R)[0]
        # e(t) = lam r(t) + (1 - lam) e(t-1), per column
        smoothed, _ = lfilter([lam], [1.0, -(1.0 - lam)], R, axis=0, zi=((1.0 - lam) * start_vec)[None, :])
        # d2 = (e - mu)' (lam / (2 - lam) S)^-1 (e - mu)
        d2 = self._mahalanobis(smoothed, st.mean, st.whitening) * ((2.0 - lam) / lam)
        return d2, np.asarray(smoothed[-1])
