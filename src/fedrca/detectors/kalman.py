"""Linear Kalman filter: per-step class, pure-function twin and a vectorised batch path.

Conventions (time index t, one sample per step)::

    x(t|t-1) = A x(t-1|t-1) + B u(t-1)          prediction ("x_c" in the papers)
    r(t)     = y(t) - C x(t|t-1)                 innovation (the residual RCA scores)
    x(t|t)   = x(t|t-1) + K r(t)                 correction

The caller passes, with ``y(t)``, the input ``u`` that drives the transition into
``t`` (for a VAR(1) identified as ``x(t) = A x(t-1) + B u(t-1)`` that is the
previous input; :class:`fedrca.detectors.plant.PlantDetector` does the shift).

With the steady-state gain (default) the filter is a linear time-invariant
recursion ``x(t|t) = F x(t-1|t-1) + w(t)`` with ``F = (I - K C) A``; the batch
path solves it for all samples at once with the real Schur decomposition of F and
one first-order IIR filter (``scipy.signal.lfilter``, in C) per real eigenvalue or
complex pair, so the cost is O(T P^2) in vectorised numpy instead of T Python
iterations.

Missing values (NaN in ``y``, docs/missing.md): the correction uses the observed
subset ``o`` of the sensors, the rows of C and the rows and columns of R that belong
to them (Shumway & Stoffer, *Time Series Analysis and Its Applications*, 6.4)::

    S_o = C_o P(t|t-1) C_o' + R_oo        K_o = P(t|t-1) C_o' S_o⁻¹
    x(t|t) = x(t|t-1) + K_o r_o(t)        P(t|t) = (I - K_o C_o) P(t|t-1) (I - K_o C_o)' + K_o R_oo K_o'

(:func:`kf_update`); a row with nothing observed is a prediction only. A missing entry's
innovation is NaN. The steady-state filter runs these exact, time-varying steps from the
first row with a missing value until its covariance is back at the steady-state one
(within :data:`STEADY_RTOL`), then returns to the steady-state recursion: complete rows
at the steady state keep the vectorised path.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import scipy.linalg
from numpy.typing import ArrayLike, NDArray

from fedrca.exceptions import DataError, ModelError

__all__ = [
    "FilterOutput",
    "GaussianFilter",
    "LinearKalmanFilter",
    "StepOutput",
    "kf_predict",
    "kf_update",
    "lti_recursion",
    "steady_state_gain",
]

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class StepOutput:
    """Evidence of one filter step.

    Attributes
    ----------
    x_pred : (P,) predicted state x(t|t-1)
    x_est : (P,) corrected state x(t|t)
    residual : (D,) innovation y(t) - C x(t|t-1)
    S : (D, D) innovation covariance C P(t|t-1) C' + R
    K : (P, D) Kalman gain used
    mahalanobis : float, squared Mahalanobis distance r' S^-1 r of the innovation
    """

    x_pred: FloatArray
    x_est: FloatArray
    residual: FloatArray
    S: FloatArray
    K: FloatArray
    mahalanobis: float


@dataclass(frozen=True)
class FilterOutput:
    """Result of filtering a batch of T samples.

    Attributes
    ----------
    x_pred : (T, P) predicted states x(t|t-1)
    x_est : (T, P) corrected states x(t|t)
    residuals : (T, D) innovations y(t) - C x(t|t-1)
    """

    x_pred: FloatArray
    x_est: FloatArray
    residuals: FloatArray


def _as_matrix(name: str, value: ArrayLike, shape: tuple[int, int] | None = None) -> FloatArray:
    array = np.atleast_2d(np.asarray(value, dtype=np.float64))
    if array.ndim != 2:
        raise ModelError(f"{name} must be a 2-D matrix, got shape {array.shape}")
    if shape is not None and array.shape != shape:
        raise ModelError(f"{name} must have shape {shape}, got {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ModelError(f"{name} contains NaN or inf; pass finite model matrices")
    return array


def kf_predict(
    x: FloatArray,
    P: FloatArray,
    A: FloatArray,
    Q: FloatArray,
    B: FloatArray | None = None,
    u: FloatArray | None = None,
) -> tuple[FloatArray, FloatArray]:
    """Pure Kalman prediction step; returns ``(x(t|t-1), P(t|t-1))``.

    Examples
    --------
    >>> import numpy as np
    >>> x, P = kf_predict(np.ones(2), np.eye(2), 0.5 * np.eye(2), np.eye(2))
    >>> x.tolist(), P.diagonal().tolist()
    ([0.5, 0.5], [1.25, 1.25])
    """
    # x(t|t-1) = A x(t-1|t-1) + B u
    x_pred = A @ x
    if B is not None and u is not None:
        x_pred = x_pred + B @ u
    # P(t|t-1) = A P A' + Q
    P_pred = A @ P @ A.T + Q
    return x_pred, P_pred


def kf_update(
    x_pred: FloatArray, P_pred: FloatArray, y: FloatArray, C: FloatArray, R: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    """Pure Kalman correction step (Joseph form) on the observed entries of ``y`` (NaN = missing).

    Returns
    -------
    x_est, P_est : (P,), (P, P) the corrected state and covariance
    residual : (D,) innovation, NaN where ``y`` is missing
    S : (D, D) innovation covariance of every sensor, C P C' + R
    K : (P, D) gain; its columns of missing sensors are zero

    Examples
    --------
    >>> import numpy as np
    >>> x, P, r, S, K = kf_update(np.zeros(1), np.eye(1), np.array([1.0, np.nan]), np.ones((2, 1)), np.eye(2))
    >>> x.round(3).tolist(), np.isnan(r).tolist(), K.round(3).tolist()
    ([0.5], [False, True], [[0.5, 0.0]])
    """
    return _update(x_pred, P_pred, y, C, R)[:5]


def _update(
    x_pred: FloatArray, P_pred: FloatArray, y: FloatArray, C: FloatArray, R: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, float]:
    """:func:`kf_update` and the innovation's squared Mahalanobis distance ``r_o' S_oo⁻¹ r_o`` (one solve)."""
    # r = y - C x(t|t-1)
    residual = y - C @ x_pred
    # S = C P C' + R
    S = C @ P_pred @ C.T + R
    observed = ~np.isnan(y)
    n = P_pred.shape[0]
    K = np.zeros((n, len(y)))
    if not observed.any():
        # nothing observed: x(t|t) = x(t|t-1), P(t|t) = P(t|t-1)
        return x_pred.copy(), P_pred.copy(), residual, S, K, 0.0
    if observed.all():
        C_o, R_oo, S_oo, r_o = C, R, S, residual
    else:
        o = np.flatnonzero(observed)
        C_o, R_oo, S_oo, r_o = C[o], R[np.ix_(o, o)], S[np.ix_(o, o)], residual[o]
    # [K_o' | S_oo^-1 r_o] = S_oo^-1 [C_o P | r_o]   (one solve for the gain and the distance)
    G = np.linalg.solve(S_oo, np.column_stack([C_o @ P_pred, r_o]))
    K_o = G[:, :n].T
    K[:, observed] = K_o
    # x(t|t) = x(t|t-1) + K_o r_o
    x_est = x_pred + K_o @ r_o
    # P(t|t) = (I - K_o C_o) P (I - K_o C_o)' + K_o R_oo K_o'   (Joseph form keeps P symmetric PSD)
    I_KC = np.eye(n) - K_o @ C_o
    P_est = I_KC @ P_pred @ I_KC.T + K_o @ R_oo @ K_o.T
    # d2 = r_o' S_oo^-1 r_o
    return x_est, P_est, residual, S, K, float(r_o @ G[:, n])


def steady_state_gain(
    A: FloatArray, C: FloatArray, Q: FloatArray, R: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Steady-state prior covariance, gain and innovation covariance.

    Solves the discrete algebraic Riccati equation
    ``P = A P A' - A P C' (C P C' + R)^-1 C P A' + Q`` for the prior covariance P.

    Returns
    -------
    P_pred : (P, P) steady-state P(t|t-1)
    K : (P, D) gain P C' S^-1
    S : (D, D) innovation covariance C P C' + R

    Raises
    ------
    ModelError
        When the Riccati equation has no stabilising solution ((A, C) not detectable
        or (A, Q) not stabilisable); pass ``steady_state=False`` to use the
        time-varying gain instead.
    """
    try:
        P_pred = _prior_covariance(A, C, Q, R)
    except (np.linalg.LinAlgError, ValueError) as exc:
        raise ModelError(
            f"no steady-state Kalman gain for this model ({exc}); use steady_state=False for the time-varying gain"
        ) from None
    P_pred = 0.5 * (P_pred + P_pred.T)
    # S = C P C' + R
    S = C @ P_pred @ C.T + R
    # K = P C' S^-1
    K = scipy.linalg.solve(S, C @ P_pred, assume_a="pos").T
    return P_pred, K, S


#: batches of at most this many rows run the recursion row by row (cheaper than the filters' set-up)
_LOOP_ROWS = 8


@dataclass(frozen=True)
class _Mode:
    """One diagonal block of a real Schur form: a real eigenvalue (``size`` 1) or a complex pair (2).

    A pair's block ``B = S diag(mu, conj(mu)) S⁻¹`` with ``S = [s, conj(s)]``: for a real drive its
    second mode is the conjugate of the first, so one complex recursion gives both rows.
    """

    start: int
    size: int
    mu: complex = 0j
    s: NDArray[np.complex128] | None = None  # (2,) the eigenvector of mu
    s_inv: NDArray[np.complex128] | None = None  # (2,) the first row of S⁻¹


def _prior_covariance(A: FloatArray, C: FloatArray, Q: FloatArray, R: FloatArray) -> FloatArray:
    """The stabilising solution P of the filter's Riccati equation (see :func:`steady_state_gain`).

    ``scipy.linalg.solve_discrete_are(A', C', Q, R)`` works on a matrix pencil of size
    ``2P + D``: for an identified model of a 1,000-sensor plant that is a QZ decomposition of
    a 1,300 x 1,300 pencil, repeated for every cross-validation fold. The measurements enter
    the equation only through ``H = C' R^-1 C`` (P x P): by the matrix inversion lemma
    ``C' (C P C' + R)^-1 C = (P^-1 + H)^-1 = L (I + L' P L)^-1 L'`` for ``H = L L'``, so the
    same P solves the equation with ``b = L`` and ``r = I``, a pencil of size ``3P``. Used when
    that is smaller (D > P) and H is positive definite, else the direct form.
    """
    P, D = A.shape[0], C.shape[0]
    if D > P:
        # H = C' R^-1 C ;  H = L L'
        H = C.T @ scipy.linalg.solve(R, C, assume_a="pos")
        try:
            L = np.linalg.cholesky(0.5 * (H + H.T))
        except np.linalg.LinAlgError:
            L = None
        if L is not None:
            return np.asarray(scipy.linalg.solve_discrete_are(A.T, L, Q, np.eye(P)))
    return np.asarray(scipy.linalg.solve_discrete_are(A.T, C.T, Q, R))


#: Batches of at most this many samples run the steady-state recursion sample by sample.
SMALL_BATCH = 4

#: After rows with missing values the steady-state filter returns to its constant gain once
#: ``||P(t|t) - P_ss||_F <= STEADY_RTOL ||P_ss||_F`` (P converges geometrically back to P_ss).
STEADY_RTOL = 1e-8


@lru_cache(maxsize=64)
def _real_schur(F_bytes: bytes, P: int) -> tuple[FloatArray, FloatArray, tuple[_Mode, ...]]:
    # A filter's F is fixed between parameter updates while the stream runs it batch after
    # batch (a few samples each): decompose it once, not per batch.
    F = np.frombuffer(F_bytes, dtype=np.float64).reshape(P, P)
    T_mat, Z = scipy.linalg.schur(F, output="real")
    modes, i = [], 0
    while i < P:
        if i + 1 < P and T_mat[i + 1, i] != 0.0:
            mu, vectors = np.linalg.eig(T_mat[i : i + 2, i : i + 2])
            s = vectors[:, 0].astype(np.complex128)
            S = np.column_stack([s, s.conj()])
            modes.append(_Mode(i, 2, complex(mu[0]), s, np.linalg.inv(S)[0]))
            i += 2
        else:
            modes.append(_Mode(i, 1))
            i += 1
    T_mat.setflags(write=False)
    Z.setflags(write=False)
    return T_mat, Z, tuple(modes)


def lti_recursion(F: FloatArray, W: FloatArray, x0: FloatArray) -> FloatArray:
    """All states of ``x(t) = F x(t-1) + W[t]`` for t = 0..T-1, with ``x(-1) = x0``.

    Vectorised through the real Schur form ``F = Z T Z'`` (orthogonal Z, so it is
    numerically stable; T quasi-upper-triangular): the last block is a first-order IIR
    filter, and each earlier block is one too once the later blocks are known. A real
    eigenvalue is a real filter; a complex pair one complex filter whose conjugate is the
    pair's other mode (``tests/detectors/test_kalman.py`` checks it against the loop).

    Parameters
    ----------
    F : (P, P) transition
    W : (T, P) driving terms
    x0 : (P,) state before the first sample

    Returns
    -------
    (T, P) states

    Examples
    --------
    >>> import numpy as np
    >>> lti_recursion(np.array([[0.5]]), np.ones((3, 1)), np.zeros(1)).ravel().tolist()
    [1.0, 1.5, 1.75]
    """
    T_len, P = W.shape
    if T_len == 0:
        return np.empty((0, P))
    if T_len <= _LOOP_ROWS:
        # a few rows (a stream's small batches): the recursion itself costs less than one IIR filter call
        out = np.empty((T_len, P))
        x = np.asarray(x0, dtype=np.float64)
        for t in range(T_len):
            # x(t) = F x(t-1) + w(t)
            x = out[t] = F @ x + W[t]
        return out
    from scipy.signal import lfilter  # at first use (a worker starts without it: fedrca.streams.app.warm_up)

    T_mat, Z, blocks = _real_schur(np.ascontiguousarray(F, dtype=np.float64).tobytes(), P)
    # Mode-major layout (P, T): each mode's time series is contiguous for the IIR filter.
    # v(t) = Z' w(t) ;  z(-1) = Z' x0
    V = Z.T @ np.asarray(W, dtype=np.float64).T
    z0 = Z.T @ np.asarray(x0, dtype=np.float64)
    modes = np.empty_like(V)
    for block in reversed(blocks):
        i, end = block.start, block.start + block.size
        drive = V[i:end]
        if end < P:
            # Coupling to later (already solved) modes uses their value at t-1.
            coupling = T_mat[i:end, end:]
            drive[:, 0] += coupling @ z0[end:]
            drive[:, 1:] += coupling @ modes[end:, :-1]
        if block.size == 1:
            # z_i(t) = T_ii z_i(t-1) + d_i(t)
            lam = T_mat[i, i]
            modes[i] = lfilter([1.0], [1.0, -lam], drive[0], zi=np.array([lam * z0[i]]))[0]
        else:
            assert block.s is not None and block.s_inv is not None
            # u(t) = mu u(t-1) + (S⁻¹ d(t))_1 ;  [z_i; z_i+1](t) = 2 Re(s u(t))
            mu = block.mu
            g = block.s_inv @ drive
            u0 = complex(block.s_inv @ z0[i:end])
            u = lfilter([1.0], [1.0, -mu], g, zi=np.array([mu * u0]))[0]
            modes[i:end] = 2.0 * np.real(block.s[:, None] * u[None, :])
    return np.ascontiguousarray((Z @ modes).T)


def _stacked(steps: list[StepOutput]) -> FilterOutput:
    """The batch output of consecutive steps (at least one)."""
    return FilterOutput(
        np.array([s.x_pred for s in steps]),
        np.array([s.x_est for s in steps]),
        np.array([s.residual for s in steps]),
    )


class GaussianFilter:
    """The state every Kalman-type filter keeps: the estimate x(t|t) and its covariance P(t|t).

    Shared by :class:`LinearKalmanFilter` and
    :class:`~fedrca.detectors.ekf.ExtendedKalmanFilter`: the initial estimate, reset,
    the JSON-friendly state of a checkpoint, and the plug-in protocol's dimensions
    (subclasses set ``_x0`` (P,) and ``_P0`` (P, P) and give ``output_dim``).
    """

    _x0: FloatArray
    _P0: FloatArray
    _x: FloatArray
    _P: FloatArray

    @property
    def state_dim(self) -> int:
        """State dimension P."""
        return int(self._x0.shape[0])

    @property
    def output_dim(self) -> int:
        """Measurement dimension D."""
        raise NotImplementedError

    def reset(self) -> None:
        """Return to the initial estimate."""
        self._x = self._x0.copy()
        self._P = self._P0.copy()

    def get_state(self) -> dict[str, Any]:
        """The mutable filter state (for checkpoints/tables); plain lists."""
        return {"x": self._x.tolist(), "P": self._P.tolist()}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a state produced by :meth:`get_state`."""
        self._x = np.asarray(state["x"], dtype=np.float64).reshape(self.state_dim)
        self._P = np.asarray(state["P"], dtype=np.float64).reshape(self.state_dim, self.state_dim)

    @property
    def x(self) -> FloatArray:
        """Current estimate x(t|t) (copy)."""
        return self._x.copy()


class LinearKalmanFilter(GaussianFilter):
    """Linear Gaussian Kalman filter of a fixed (proprietary) state-space model.

    ``x(t) = A x(t-1) + B u + w``, ``y(t) = C x(t) + v``, ``w ~ N(0, Q)``, ``v ~ N(0, R)``.

    Parameters
    ----------
    A : (P, P) state transition
    C : (D, P) measurement matrix
    Q : (P, P) process-noise covariance
    R : (D, D) measurement-noise covariance
    B : (P, U) input matrix, optional
    x0 : (P,) initial estimate x(-1|-1); zeros by default
    P0 : (P, P) initial covariance; the steady-state posterior by default
    steady_state : bool
        Use the constant gain from the discrete algebraic Riccati equation (default);
        ``False`` runs the time-varying gain, which the batch path then loops over.

    Missing values (NaN in ``y``) are corrected on the observed subset (module docstring);
    :attr:`handles_missing` tells :func:`~fedrca.detectors.plugin.filter_batch` so.

    Examples
    --------
    >>> import numpy as np
    >>> kf = LinearKalmanFilter(A=[[0.9]], C=[[1.0]], Q=[[0.1]], R=[[0.5]])
    >>> out = kf.filter(np.array([[1.0], [0.5], [0.2]]))
    >>> out.residuals.shape
    (3, 1)
    """

    #: ``step`` and ``filter`` correct on the observed subset of a sample with NaN (plug-in protocol)
    handles_missing = True

    def __init__(
        self,
        A: ArrayLike,
        C: ArrayLike,
        Q: ArrayLike,
        R: ArrayLike,
        B: ArrayLike | None = None,
        x0: ArrayLike | None = None,
        P0: ArrayLike | None = None,
        steady_state: bool = True,
    ) -> None:
        self.A = _as_matrix("A", A)
        n = self.A.shape[0]
        if self.A.shape != (n, n):
            raise ModelError(f"A must be square, got shape {self.A.shape}")
        self.C = _as_matrix("C", C)
        if self.C.shape[1] != n:
            raise ModelError(f"C must have {n} columns (the state dimension), got {self.C.shape}")
        d = self.C.shape[0]
        self.Q = _as_matrix("Q", Q, (n, n))
        self.R = _as_matrix("R", R, (d, d))
        self.B = None if B is None else _as_matrix("B", B)
        if self.B is not None and self.B.shape[0] != n:
            raise ModelError(f"B must have {n} rows (the state dimension), got {self.B.shape}")
        self.steady_state = steady_state
        self._info: tuple[FloatArray, FloatArray] | None = None  # _information(), built on first use
        self._info_checked = False
        self._x0 = np.zeros(n) if x0 is None else np.asarray(x0, dtype=np.float64).reshape(n)
        self._P_pred_ss: FloatArray | None = None
        self._K_ss: FloatArray | None = None
        self._S_ss: FloatArray | None = None
        if steady_state:
            self._P_pred_ss, self._K_ss, self._S_ss = steady_state_gain(self.A, self.C, self.Q, self.R)
        # the steady-state recursion's fixed maps, built once: per batch they would cost a
        # (P, D) x (D, P) product, which at batch size 1 and 1,000 sensors is most of the step
        self._I_KC: FloatArray | None = None
        self._F: FloatArray | None = None
        self._P_post: FloatArray | None = None
        if self._K_ss is not None and self._P_pred_ss is not None:
            self._I_KC = np.eye(n) - self._K_ss @ self.C
            # F = (I - K C) A
            self._F = self._I_KC @ self.A
            self._P_post = self._I_KC @ self._P_pred_ss
        if P0 is not None:
            self._P0 = _as_matrix("P0", P0, (n, n))
        elif self._P_pred_ss is not None and self._K_ss is not None:
            self._P0 = (np.eye(n) - self._K_ss @ self.C) @ self._P_pred_ss
        else:
            self._P0 = np.eye(n)
        self.reset()

    # -- properties -----------------------------------------------------------------
    @property
    def output_dim(self) -> int:
        """Measurement dimension D."""
        return int(self.C.shape[0])

    def reset(self) -> None:
        """Return to the initial estimate; a steady-state filter starts at its constant gain."""
        super().reset()
        self._steady = self._K_ss is not None

    @property
    def steady(self) -> bool:
        """True while the constant gain applies: steady-state filter and P(t|t) = the steady-state one."""
        return self._steady

    def get_state(self) -> dict[str, Any]:
        """The mutable filter state; at the steady state only x (P(t|t) is the steady-state one).

        A plant worker writes it with every batch: a (P, P) covariance that is the same every
        time would be most of it. After rows with missing values, until P is back at the steady
        state, P is in the state too.
        """
        if self._K_ss is not None and self._steady:
            return {"x": self._x.tolist()}
        return super().get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`get_state` output (a state without P is at the steady state)."""
        self._x = np.asarray(state["x"], dtype=np.float64).reshape(self.state_dim)
        if "P" in state:
            self._P = np.asarray(state["P"], dtype=np.float64).reshape(self.state_dim, self.state_dim)
            self._steady = self._P_post is not None and bool(np.array_equal(self._P, self._P_post))
        elif self._P_post is not None:
            self._P = self._P_post
            self._steady = True

    @property
    def transition_matrix(self) -> FloatArray:
        """A; lets the augmentation use closed-form gradients (:class:`~fedrca.detectors.plugin.LinearModel`)."""
        return self.A

    @property
    def gain(self) -> FloatArray | None:
        """The steady-state gain K (P, D), or None for the time-varying filter."""
        return self._K_ss

    # -- plug-in protocol (pure transition and measurement) ------------------------------
    def predict(self, x: FloatArray, u: FloatArray | None = None) -> FloatArray:
        """Pure transition f(x, u) = A x + B u; ``x`` may be (P,) or (T, P)."""
        out = x @ self.A.T
        if self.B is not None and u is not None:
            out = out + u @ self.B.T
        return np.asarray(out, dtype=np.float64)

    def measure(self, x: FloatArray) -> FloatArray:
        """Pure measurement h(x) = C x; ``x`` may be (P,) or (T, P)."""
        return np.asarray(x @ self.C.T, dtype=np.float64)

    # -- filtering ------------------------------------------------------------------------
    def step(self, y: ArrayLike, u: ArrayLike | None = None) -> StepOutput:
        """Filter one sample ``y`` (D,) (NaN = missing) with the input ``u`` driving this transition."""
        y_arr = self._check_y(np.asarray(y, dtype=np.float64).reshape(-1))
        u_arr = None if u is None else np.asarray(u, dtype=np.float64).reshape(-1)
        if self._steady and self._K_ss is not None and self._S_ss is not None and not np.isnan(y_arr).any():
            # x(t|t-1) = A x(t-1|t-1) + B u
            x_pred = self.A @ self._x
            if self.B is not None and u_arr is not None:
                x_pred = x_pred + self.B @ u_arr
            # r = y - C x(t|t-1)
            residual = y_arr - self.C @ x_pred
            # x(t|t) = x(t|t-1) + K r   (steady-state K)
            x_est = x_pred + self._K_ss @ residual
            S, K = self._S_ss, self._K_ss
            self._x = x_est
            # d2 = r' S^-1 r
            mahalanobis = float(residual @ scipy.linalg.solve(S, residual, assume_a="pos"))
            return StepOutput(x_pred, x_est, residual, S, K, mahalanobis)
        return self._exact_step(y_arr, u_arr)

    def _exact_step(self, y: FloatArray, u: FloatArray | None) -> StepOutput:
        """One time-varying step (:func:`kf_predict`, :func:`kf_update` on the observed subset); a
        steady-state filter returns to its constant gain once P is back at the steady state."""
        P_before = self._P_post if self._steady and self._P_post is not None else self._P
        x_pred, P_pred = kf_predict(self._x, P_before, self.A, self.Q, self.B, u)
        x_est, P_est, residual, S, K, mahalanobis = _update(x_pred, P_pred, y, self.C, self.R)
        self._x = x_est
        self._P = P_est
        P_ss = self._P_post
        if P_ss is not None:
            # ||P - P_ss||_F <= rtol ||P_ss||_F: the constant gain applies again
            self._steady = bool(np.linalg.norm(P_est - P_ss) <= STEADY_RTOL * np.linalg.norm(P_ss))
            if self._steady:
                self._P = P_ss
        return StepOutput(x_pred, x_est, residual, S, K, mahalanobis)

    def filter(self, Y: ArrayLike, U: ArrayLike | None = None) -> FilterOutput:
        """Filter a batch ``Y`` (T, D) (NaN = missing) with inputs ``U`` (T, U); continues from the
        current state and leaves the filter at the last sample, exactly like T calls of :meth:`step`.

        With the steady-state gain, the runs of complete rows at the steady state take the
        vectorised path; the rows from a missing value until P is back at the steady state
        take exact steps.
        """
        Y_arr = np.asarray(Y, dtype=np.float64)
        if Y_arr.ndim != 2 or Y_arr.shape[1] != self.output_dim:
            raise DataError(f"Y must have shape (T, {self.output_dim}), got {Y_arr.shape}")
        self._check_y(Y_arr)
        U_arr = None if U is None else np.asarray(U, dtype=np.float64).reshape(len(Y_arr), -1)
        gaps = np.asarray(np.isnan(Y_arr).any(axis=1))
        if self._steady and not gaps.any():
            return self._steady_rows(Y_arr, U_arr)
        if len(Y_arr) == 0:
            empty_p = np.empty((0, self.state_dim))
            return FilterOutput(empty_p, empty_p.copy(), np.empty((0, self.output_dim)))
        parts: list[FilterOutput] = []
        t, T = 0, len(Y_arr)
        while t < T:
            if self._steady and not gaps[t]:
                # the run of complete rows from t: the vectorised path
                rest = np.flatnonzero(gaps[t:])
                end = T if len(rest) == 0 else t + int(rest[0])
                parts.append(self._steady_rows(Y_arr[t:end], None if U_arr is None else U_arr[t:end]))
                t = end
                continue
            # exact steps until the filter is back at the steady state and the next row is complete
            out, t = self._exact_run(Y_arr, U_arr, gaps, t)
            parts.append(out)
        if len(parts) == 1:
            return parts[0]
        return FilterOutput(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("x_pred", "x_est", "residuals")))

    def _exact_run(
        self, Y: FloatArray, U: FloatArray | None, gaps: NDArray[np.bool_], t: int
    ) -> tuple[FilterOutput, int]:
        """Exact steps from row ``t`` until the filter is at the steady state and the next row is
        complete (or the batch ends); returns their output and the next row.

        With a diagonal R (every identified model's) and more sensors than states, the steps run
        in information form, ``P(t|t) = (P(t|t-1)⁻¹ + C_o' R_oo⁻¹ C_o)⁻¹`` and
        ``x(t|t) = x(t|t-1) + P(t|t) C_o' R_oo⁻¹ r_o``: the numbers of :func:`kf_update` (its
        twin; ``tests/detectors/test_kalman.py`` compares them) with one P x P solve instead of a
        D x D one per row.
        """
        info = self._information()
        if info is None:
            steps = []
            while t < len(Y) and not (self._steady and not gaps[t]):
                steps.append(self._exact_step(Y[t], None if U is None else U[t]))
                t += 1
            return _stacked(steps), t
        CtRi, H = info
        A, C, Q, B = self.A, self.C, self.Q, self.B
        At = A.T
        I = np.eye(len(A))
        missing = np.isnan(Y)
        P_ss = self._P_post
        tol2 = -1.0 if P_ss is None else (STEADY_RTOL * float(np.linalg.norm(P_ss))) ** 2
        x = self._x
        P = P_ss if self._steady and P_ss is not None else self._P
        x_pred, x_est = [], []
        steady = self._steady
        start = t
        while t < len(Y) and not (steady and not gaps[t]):
            # x(t|t-1) = A x(t-1|t-1) + B u ;  P(t|t-1) = A P A' + Q
            xp = A @ x
            if B is not None and U is not None:
                xp = xp + B @ U[t]
            Pp = A @ P @ At + Q
            m = missing[t]
            if gaps[t] and m.all():
                # nothing observed: x(t|t) = x(t|t-1), P(t|t) = P(t|t-1)
                x, P = xp, Pp
            else:
                if gaps[t]:
                    o = ~m
                    # C_o' R_oo^-1 C_o ;  C_o' R_oo^-1 r_o   (r with 0 for the missing entries)
                    H_o, g = CtRi[:, o] @ C[o], CtRi @ np.where(m, 0.0, Y[t] - C @ xp)
                else:
                    # C' R^-1 C ;  C' R^-1 (y - C x(t|t-1))
                    H_o, g = H, CtRi @ (Y[t] - C @ xp)
                # P(t|t) = (P(t|t-1)^-1 + C_o' R_oo^-1 C_o)^-1 = (I + P(t|t-1) C_o' R_oo^-1 C_o)^-1 P(t|t-1)
                J = np.linalg.solve(I + Pp @ H_o, Pp)
                P = 0.5 * (J + J.T)
                # x(t|t) = x(t|t-1) + P(t|t) C_o' R_oo^-1 r_o
                x = xp + P @ g
            x_pred.append(xp)
            x_est.append(x)
            t += 1
            # ||P - P_ss||_F <= rtol ||P_ss||_F on a complete row: the constant gain applies again
            if P_ss is not None and not gaps[t - 1]:
                D = P - P_ss
                steady = bool(np.einsum("ij,ij->", D, D) <= tol2)
                if steady:
                    P = P_ss
            else:
                steady = False
        X_pred = np.array(x_pred)
        # r = y - C x(t|t-1)   (NaN where y is missing)
        residuals = Y[start:t] - X_pred @ C.T
        self._x, self._P, self._steady = x, P, steady
        return FilterOutput(X_pred, np.array(x_est), residuals), t

    def _information(self) -> tuple[FloatArray, FloatArray] | None:
        """``(C' R⁻¹, C' R⁻¹ C)`` when R is diagonal and there are more sensors than states, else None."""
        if not self._info_checked:
            R, C = self.R, self.C
            if C.shape[0] > C.shape[1] and not np.count_nonzero(R - np.diag(np.diag(R))):
                CtRi = C.T / np.diag(R)
                self._info = (CtRi, CtRi @ C)
            self._info_checked = True
        return self._info

    def _exact_rows(self, Y: FloatArray, U: FloatArray | None) -> FilterOutput:
        if len(Y) == 0:
            empty_p = np.empty((0, self.state_dim))
            return FilterOutput(empty_p, empty_p.copy(), np.empty((0, self.output_dim)))
        return self._exact_run(Y, U, np.asarray(np.isnan(Y).any(axis=1)), 0)[0]

    def _steady_rows(self, Y: FloatArray, U: FloatArray | None) -> FilterOutput:
        """Complete rows at the steady state: the vectorised recursion."""
        x_before = self._x
        x_est = self._steady_estimates(Y, U)
        x_prev = np.vstack([x_before[None, :], x_est[:-1]])
        # x(t|t-1) = A x(t-1|t-1) + B u
        x_pred = self.predict(x_prev, U)
        # r = y - C x(t|t-1)
        residuals = Y - x_pred @ self.C.T
        return FilterOutput(x_pred, x_est, residuals)

    def estimates(self, Y: FloatArray) -> FloatArray:
        """The corrected states x(t|t) (T, P) of a batch ``Y`` (T, D) of complete rows without inputs,
        advancing the filter as :meth:`filter` does (steady-state gain at the steady state only:
        the detector's fused path)."""
        if self._K_ss is None or not self._steady:
            raise ModelError("estimates needs the steady-state gain at the steady state; use filter()")
        return self._steady_estimates(Y, None)

    def _steady_estimates(self, Y: FloatArray, U: FloatArray | None) -> FloatArray:
        assert self._K_ss is not None and self._I_KC is not None and self._F is not None
        K, I_KC, F = self._K_ss, self._I_KC, self._F
        # x(t|t) = (I - K C) A x(t-1|t-1) + (I - K C) B u + K y(t)
        W = Y @ K.T
        if self.B is not None and U is not None:
            W += U @ (I_KC @ self.B).T
        if len(W) <= SMALL_BATCH:
            # a few samples (a 1 Hz plant's batch): the recursion itself, one product per sample,
            # is cheaper than setting up the modal solution (equal to rounding; test_plant's
            # batch-equals-streaming test runs both)
            x_est = np.empty_like(W)
            x = self._x
            for t in range(len(W)):
                x = F @ x + W[t]
                x_est[t] = x
        else:
            x_est = lti_recursion(F, W, self._x)
        if len(x_est):
            self._x = x_est[-1].copy()
            self._P = self._P_post if self._P_post is not None else self._P
        return x_est

    def _check_y(self, y: FloatArray) -> FloatArray:
        if y.shape[-1] != self.output_dim:
            raise DataError(f"measurement has {y.shape[-1]} values, the model expects {self.output_dim}")
        if np.isinf(y).any():
            raise DataError("measurement contains inf; a value that is not usable is NaN (missing)")
        return y
