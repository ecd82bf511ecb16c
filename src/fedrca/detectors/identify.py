"""Identification of a proprietary linear state-space model from nominal data.

Used when a plant does not bring its own filter (P2's procedure for real data):

1. standardise y (and u) with the nominal mean and standard deviation;
2. SVD of the standardised data; the first P right singular vectors form C,
   with P fixed or the smallest one that keeps a given energy fraction;
3. states x = C' z (projections), least-squares VAR(1) with inputs
   ``x(t) = A x(t-1) + B u(t-1)``;
4. Q = covariance of the VAR residuals, R = variance of what the state subspace
   does not explain (diagonal, floored so the filter stays well posed).

Deterministic given the data (the SVD sign is fixed by making the largest
loading of each vector positive).

Nominal data with gaps (NaN, ``dataset.missing: allow``; docs/missing.md): the means and
standard deviations and R come from the observed entries only; for the SVD and the VAR, a
gap is bridged by linear interpolation in time of its standardised column
(:func:`bridge_gaps`), so a row with a gap contributes through its neighbours.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedrca.detectors.kalman import LinearKalmanFilter
from fedrca.exceptions import DataError, ModelError

__all__ = ["IdentifiedModel", "Standardizer", "bridge_gaps", "identify_linear_model", "principal_axes"]

FloatArray = NDArray[np.float64]

#: Variance floor (in standardised units) for Q and R, so S stays positive definite.
VARIANCE_FLOOR = 1e-4


@dataclass(frozen=True)
class Standardizer:
    """Per-column affine map to zero mean, unit variance on nominal data.

    Attributes
    ----------
    mean : (D,) nominal mean, in the column's units
    std : (D,) nominal standard deviation (constant columns get 1)
    """

    mean: FloatArray
    std: FloatArray

    @classmethod
    def fit(cls, Y: FloatArray) -> Standardizer:
        """Fit on nominal data ``Y`` (T, D); missing entries (NaN) are left out of each column's moments."""
        if np.isnan(Y).any():
            counts = (~np.isnan(Y)).sum(axis=0)
            mean = np.where(counts > 0, np.nansum(Y, axis=0) / np.maximum(counts, 1), 0.0)
            # the sample variance of each column's observed entries (ddof = 1)
            spread = np.nansum((Y - mean) ** 2, axis=0) / np.maximum(counts - 1, 1)
            std = np.where(counts > 1, np.sqrt(spread), 1.0)
            return cls(mean=mean, std=np.where(std > 1e-12, std, 1.0))
        std = Y.std(axis=0, ddof=1) if len(Y) > 1 else np.ones(Y.shape[1])
        return cls(mean=Y.mean(axis=0), std=np.where(std > 1e-12, std, 1.0))

    def transform(self, Y: FloatArray) -> FloatArray:
        """(Y - mean) / std, any leading shape."""
        return np.asarray((Y - self.mean) / self.std, dtype=np.float64)

    def inverse(self, Z: FloatArray) -> FloatArray:
        """Z * std + mean."""
        return np.asarray(Z * self.std + self.mean, dtype=np.float64)


@dataclass(frozen=True)
class IdentifiedModel:
    """A linear state-space model identified from nominal data (standardised units).

    Attributes
    ----------
    A : (P, P), B : (P, U) or None, C : (D, P), Q : (P, P), R : (D, D)
    y_scaler : Standardizer of the sensors; u_scaler : Standardizer of the inputs or None
    energy : float, fraction of the standardised data's energy the P states keep
    """

    A: FloatArray
    B: FloatArray | None
    C: FloatArray
    Q: FloatArray
    R: FloatArray
    y_scaler: Standardizer
    u_scaler: Standardizer | None
    energy: float

    @property
    def n_states(self) -> int:
        """State dimension P."""
        return int(self.A.shape[0])

    def kalman_filter(self, steady_state: bool = True) -> LinearKalmanFilter:
        """A fresh Kalman filter of this model (in standardised units)."""
        return LinearKalmanFilter(self.A, self.C, self.Q, self.R, B=self.B, steady_state=steady_state)


#: From this many sensors on, the principal axes come from the Gram matrix (see principal_axes).
GRAM_FROM = 64


def bridge_gaps(Z: FloatArray) -> FloatArray:
    """``Z`` (T, D) with each NaN replaced by the linear interpolation in time of its column's observed
    neighbours (held at the ends; 0, the standardised mean, for a column with nothing observed).

    Examples
    --------
    >>> import numpy as np
    >>> bridge_gaps(np.array([[np.nan], [1.0], [np.nan], [3.0], [np.nan]])).ravel().tolist()
    [1.0, 1.0, 2.0, 3.0, 3.0]
    """
    out = np.array(Z, dtype=np.float64)
    t = np.arange(len(out))
    for j in np.flatnonzero(np.isnan(out).any(axis=0)):
        seen = ~np.isnan(out[:, j])
        out[:, j] = np.interp(t, t[seen], out[seen, j]) if seen.any() else 0.0
    return out


def principal_axes(Z: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Squared singular values (descending) and right singular vectors (rows) of ``Z`` (T, D).

    With many sensors (``D >= GRAM_FROM``) and more rows than sensors, from the eigenvectors of
    ``Z' Z`` (D, D): the same axes for a third of the SVD's cost (a 5,000 x 1,000 SVD is most of
    the identification of a 1,000-sensor plant, done once per cross-validation fold and once
    more). The leading axes the model keeps are as accurate as the SVD's; only directions of
    near-zero energy, which no model keeps, lose digits. Small plants keep the SVD.

    Examples
    --------
    >>> import numpy as np
    >>> Z = np.random.default_rng(0).normal(size=(400, 70))
    >>> e, Vt = principal_axes(Z)
    >>> s = np.linalg.svd(Z, compute_uv=False)
    >>> bool(np.allclose(e, s**2)), Vt.shape
    (True, (70, 70))
    """
    T, D = Z.shape
    if D >= GRAM_FROM and T > D:
        # Z' Z = V diag(s^2) V'
        w, V = np.linalg.eigh(Z.T @ Z)
        return np.maximum(w[::-1], 0.0), np.ascontiguousarray(V[:, ::-1].T)
    _, sing, Vt = np.linalg.svd(Z, full_matrices=False)
    return sing**2, Vt


def identify_linear_model(
    Y: ArrayLike,
    U: ArrayLike | None = None,
    n_states: int | None = None,
    energy: float = 0.9,
    ridge: float = 1e-6,
) -> IdentifiedModel:
    """Identify (A, B, C, Q, R) from nominal data by SVD + least-squares VAR(1).

    Parameters
    ----------
    Y : (T, D) nominal sensor data, raw units
    U : (T, U) nominal inputs (control moves), optional
    n_states : fixed state dimension P; when None, the smallest P whose singular
        values keep ``energy`` of the total energy
    energy : float in (0, 1], used when ``n_states`` is None
    ridge : Tikhonov weight of the VAR regression (relative to the regressor energy)

    Returns
    -------
    IdentifiedModel

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> Y = np.cumsum(rng.normal(size=(300, 4)), axis=0) * 0.01 + rng.normal(size=(300, 4))
    >>> identify_linear_model(Y, n_states=2).C.shape
    (4, 2)
    """
    Y_arr = np.asarray(Y, dtype=np.float64)
    if Y_arr.ndim != 2:
        raise DataError(f"nominal data must be 2-D (samples, sensors), got shape {Y_arr.shape}")
    T, D = Y_arr.shape
    if T < 3:
        raise DataError(f"need at least 3 nominal samples to identify a model, got {T}")
    if np.isinf(Y_arr).any():
        raise DataError("nominal data contains inf; clean it before fitting")
    empty = np.isnan(Y_arr).all(axis=0)
    if empty.any():
        raise DataError(f"sensor {int(np.argmax(empty))} has no observed value in the nominal data; leave it out")
    if n_states is not None and not 1 <= n_states <= D:
        raise ModelError(f"n_states must be between 1 and {D} (the sensor count), got {n_states}")
    if n_states is None and not 0.0 < energy <= 1.0:
        raise ModelError(f"energy must be in (0, 1], got {energy}")

    y_scaler = Standardizer.fit(Y_arr)
    Z_observed = y_scaler.transform(Y_arr)
    # gaps (NaN) bridged in time for the SVD and the VAR; R below uses the observed entries only
    Z = bridge_gaps(Z_observed) if np.isnan(Z_observed).any() else Z_observed
    energies, Vt = principal_axes(Z)
    cumulative = np.cumsum(energies) / np.sum(energies)
    P = n_states if n_states is not None else int(np.searchsorted(cumulative, energy - 1e-12) + 1)
    P = min(P, D)
    C = Vt[:P].T.copy()
    # Fix the SVD's sign ambiguity so identification is deterministic across LAPACKs.
    signs = np.sign(C[np.argmax(np.abs(C), axis=0), np.arange(P)])
    C *= np.where(signs == 0, 1.0, signs)
    X = Z @ C  # (T, P) state trajectories

    u_scaler: Standardizer | None = None
    regressors = X[:-1]
    if U is not None:
        U_arr = np.asarray(U, dtype=np.float64).reshape(T, -1)
        if np.isinf(U_arr).any():
            raise DataError("nominal inputs contain inf; clean them before fitting")
        u_scaler = Standardizer.fit(U_arr)
        regressors = np.hstack([regressors, bridge_gaps(u_scaler.transform(U_arr))[:-1]])
    targets = X[1:]
    # min ||targets - regressors Theta'||^2 + ridge ||Theta||^2 (normal equations)
    gram = regressors.T @ regressors
    gram += ridge * np.trace(gram) / gram.shape[0] * np.eye(gram.shape[0])
    coef = np.asarray(np.linalg.solve(gram, regressors.T @ targets).T, dtype=np.float64)  # (P, P + U)
    A = coef[:, :P]
    B = coef[:, P:] if U is not None else None

    state_noise = targets - regressors @ coef.T
    Q = np.atleast_2d(np.cov(state_noise, rowvar=False)) + VARIANCE_FLOOR * np.eye(P)
    out_of_subspace = Z_observed - X @ C.T
    if np.isnan(out_of_subspace).any():
        spread = np.nanvar(out_of_subspace, axis=0, ddof=1)
        spread = np.where(np.isfinite(spread), spread, VARIANCE_FLOOR)
    else:
        spread = out_of_subspace.var(axis=0, ddof=1)
    R = np.diag(np.maximum(spread, VARIANCE_FLOOR))
    return IdentifiedModel(
        A=A, B=B, C=C, Q=Q, R=R, y_scaler=y_scaler, u_scaler=u_scaler, energy=float(cumulative[P - 1])
    )
