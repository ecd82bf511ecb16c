"""Extended Kalman filter for a fixed nonlinear proprietary model.

``x(t) = f(x(t-1), u) + w``, ``y(t) = h(x(t)) + v``. Jacobians are taken from the
user when given, else by central finite differences (vectorised over the state
directions). A sample with missing values (NaN) is corrected on its observed sensors:
the rows of the measurement Jacobian H and of R that belong to them, exactly as
:func:`fedrca.detectors.kalman.kf_update` does for the linear filter (docs/missing.md).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.linalg
from numpy.typing import ArrayLike, NDArray

from fedrca.detectors.kalman import FilterOutput, GaussianFilter, StepOutput
from fedrca.exceptions import DataError, ModelError

__all__ = ["ExtendedKalmanFilter", "batched_jacobian"]

FloatArray = NDArray[np.float64]
TransitionFn = Callable[..., FloatArray]


def batched_jacobian(fn: Callable[[FloatArray], FloatArray], X: FloatArray, eps: float = 1e-6) -> FloatArray:
    """Jacobians of ``fn`` (rows (N, P) -> (N, K)) at every row of X (T, P) -> (T, K, P).

    One batched central difference with step ``eps * max(1, |x_i|)``: fn is called
    twice on T*P rows, no Python loop over samples.

    Examples
    --------
    >>> import numpy as np
    >>> J = batched_jacobian(np.sin, np.zeros((3, 2)))
    >>> J.shape, bool(np.allclose(J, np.eye(2)))
    ((3, 2, 2), True)
    """
    T, P = X.shape
    steps = eps * np.maximum(1.0, np.abs(X))  # (T, P)
    shifts = steps[:, :, None] * np.eye(P)[None, :, :]  # (T, direction, P)
    plus = np.asarray(fn((X[:, None, :] + shifts).reshape(T * P, P))).reshape(T, P, -1)
    minus = np.asarray(fn((X[:, None, :] - shifts).reshape(T * P, P))).reshape(T, P, -1)
    # J[t, k, i] = (fn_k(x + h e_i) - fn_k(x - h e_i)) / 2h ; plus is indexed [t, i, k]
    return np.asarray(np.swapaxes((plus - minus) / (2.0 * steps[:, :, None]), 1, 2))


class ExtendedKalmanFilter(GaussianFilter):
    """EKF over user functions ``f(x, u)`` and ``h(x)``.

    Parameters
    ----------
    f : callable (x (P,) or (T, P), u or None) -> same shape; state transition
    h : callable x (P,) or (T, P) -> (D,) or (T, D); measurement
    Q : (P, P) process-noise covariance
    R : (D, D) measurement-noise covariance
    F_jacobian : callable (x, u) -> (P, P), optional; finite differences when omitted
    H_jacobian : callable x -> (D, P), optional; finite differences when omitted
    x0 : (P,) initial estimate, zeros by default
    P0 : (P, P) initial covariance, Q by default

    ``step`` takes NaN for a missing value (:attr:`handles_missing`).

    Examples
    --------
    >>> import numpy as np
    >>> ekf = ExtendedKalmanFilter(lambda x, u=None: 0.9 * np.sin(x), lambda x: x,
    ...                            Q=[[0.01]], R=[[0.1]])
    >>> ekf.step([0.3]).x_est.shape
    (1,)
    """

    #: ``step`` corrects on the observed subset of a sample with NaN (plug-in protocol)
    handles_missing = True

    def __init__(
        self,
        f: TransitionFn,
        h: Callable[[FloatArray], FloatArray],
        Q: ArrayLike,
        R: ArrayLike,
        F_jacobian: Callable[..., FloatArray] | None = None,
        H_jacobian: Callable[[FloatArray], FloatArray] | None = None,
        x0: ArrayLike | None = None,
        P0: ArrayLike | None = None,
    ) -> None:
        self.f = f
        self.h = h
        self.Q = np.atleast_2d(np.asarray(Q, dtype=np.float64))
        self.R = np.atleast_2d(np.asarray(R, dtype=np.float64))
        n = self.Q.shape[0]
        if self.Q.shape != (n, n) or self.R.shape[0] != self.R.shape[1]:
            raise ModelError(f"Q and R must be square, got {self.Q.shape} and {self.R.shape}")
        self.F_jacobian = F_jacobian
        self.H_jacobian = H_jacobian
        self._x0 = np.zeros(n) if x0 is None else np.asarray(x0, dtype=np.float64).reshape(n)
        self._P0 = self.Q.copy() if P0 is None else np.asarray(P0, dtype=np.float64).reshape(n, n)
        self.reset()

    @property
    def output_dim(self) -> int:
        """Measurement dimension D."""
        return int(self.R.shape[0])

    def predict(self, x: FloatArray, u: FloatArray | None = None) -> FloatArray:
        """Pure transition f(x, u), (P,) or (T, P)."""
        return np.asarray(self.f(x, u), dtype=np.float64)

    def measure(self, x: FloatArray) -> FloatArray:
        """Pure measurement h(x), (P,) -> (D,) or (T, P) -> (T, D)."""
        return np.asarray(self.h(x), dtype=np.float64)

    def transition_jacobian(self, x: FloatArray, u: FloatArray | None = None) -> FloatArray:
        """df/dx at x, (P, P)."""
        if self.F_jacobian is not None:
            return np.asarray(self.F_jacobian(x, u), dtype=np.float64)
        u_rows = None if u is None else u[None, :]
        return batched_jacobian(
            lambda z: self.predict(z, None if u_rows is None else np.repeat(u_rows, len(z), axis=0)), x[None, :]
        )[0]

    def measurement_jacobian(self, x: FloatArray) -> FloatArray:
        """dh/dx at x, (D, P)."""
        if self.H_jacobian is not None:
            return np.asarray(self.H_jacobian(x), dtype=np.float64)
        return batched_jacobian(self.measure, x[None, :])[0]

    def step(self, y: ArrayLike, u: ArrayLike | None = None) -> StepOutput:
        """Filter one sample ``y`` (D,); NaN entries are missing (corrected on the observed ones)."""
        y_arr = np.asarray(y, dtype=np.float64).reshape(-1)
        if y_arr.shape[0] != self.output_dim or np.isinf(y_arr).any():
            raise DataError(f"measurement must be {self.output_dim} values, finite or NaN (missing), got {y_arr}")
        u_arr = None if u is None else np.asarray(u, dtype=np.float64).reshape(-1)
        F = self.transition_jacobian(self._x, u_arr)
        # x(t|t-1) = f(x(t-1|t-1), u)
        x_pred = self.predict(self._x, u_arr)
        # P(t|t-1) = F P F' + Q
        P_pred = F @ self._P @ F.T + self.Q
        H = self.measurement_jacobian(x_pred)
        # r = y - h(x(t|t-1))   (NaN where y is missing)
        residual = y_arr - self.measure(x_pred)
        # S = H P H' + R
        S = H @ P_pred @ H.T + self.R
        observed = ~np.isnan(y_arr)
        K = np.zeros((self.state_dim, self.output_dim))
        if not observed.any():
            # nothing observed: x(t|t) = x(t|t-1), P(t|t) = P(t|t-1)
            self._x, self._P = x_pred, P_pred
            return StepOutput(x_pred, x_pred.copy(), residual, S, K, 0.0)
        o = np.flatnonzero(observed)
        H_o, R_oo, S_oo, r_o = H[o], self.R[np.ix_(o, o)], S[np.ix_(o, o)], residual[o]
        # K_o = P H_o' S_oo^-1
        K_o = scipy.linalg.solve(S_oo, H_o @ P_pred, assume_a="pos").T
        K[:, o] = K_o
        # x(t|t) = x(t|t-1) + K_o r_o
        x_est = x_pred + K_o @ r_o
        # P(t|t) = (I - K_o H_o) P (I - K_o H_o)' + K_o R_oo K_o'
        I_KH = np.eye(self.state_dim) - K_o @ H_o
        self._P = I_KH @ P_pred @ I_KH.T + K_o @ R_oo @ K_o.T
        self._x = x_est
        # d2 = r_o' S_oo^-1 r_o
        mahalanobis = float(r_o @ scipy.linalg.solve(S_oo, r_o, assume_a="pos"))
        return StepOutput(x_pred, x_est, residual, S, K, mahalanobis)

    def filter(self, Y: ArrayLike, U: ArrayLike | None = None) -> FilterOutput:
        """Filter a batch (the EKF is inherently sequential: one step per sample)."""
        Y_arr = np.asarray(Y, dtype=np.float64)
        if Y_arr.ndim != 2 or Y_arr.shape[1] != self.output_dim:
            raise DataError(f"Y must have shape (T, {self.output_dim}), got {Y_arr.shape}")
        U_arr = None if U is None else np.asarray(U, dtype=np.float64).reshape(len(Y_arr), -1)
        x_pred = np.empty((len(Y_arr), self.state_dim))
        x_est = np.empty_like(x_pred)
        residuals = np.empty_like(Y_arr)
        for t in range(len(Y_arr)):
            out = self.step(Y_arr[t], None if U_arr is None else U_arr[t])
            x_pred[t], x_est[t], residuals[t] = out.x_pred, out.x_est, out.residual
        return FilterOutput(x_pred, x_est, residuals)
