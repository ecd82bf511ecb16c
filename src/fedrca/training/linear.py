"""Linear (Granger) server estimators of the block transition over the plants' states.

The server sees, per plant and time step, noisy *estimates* of the state, never the
state. Regressing the proprietary filter estimates ``x̂_c(t)`` on ``x̂_c(t-1)``
(:func:`ordinary_least_squares`) is attenuated twice: the driven plant's filter does
not know the cross-plant input, so its gain shrinks the very effect being estimated,
and the regressors carry estimation (and DP) noise. :func:`instrumental_variables`
instead regresses the *measurement states* ``x̃(t)`` (the state that explains y(t)
alone, unbiased with noise that is white in time) on ``x̃(t-1)``, instrumented by
``x̃(t-2), ..., x̃(t-1-k)``: the regression error ``w(t) + n(t) - A n(t-1)`` is
uncorrelated with states two or more steps back, so the estimate is consistent even
when the measurement and DP noise are large (they only cost precision).

Standard errors use a Newey-West (HAC) sandwich, because that error is MA(1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from fedrca.exceptions import DataError

__all__ = [
    "RegressionResult",
    "instrumental_variables",
    "lagged_design",
    "lagged_design_with_inputs",
    "ordinary_least_squares",
    "ridge_regression",
]

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class RegressionResult:
    """``Y(t) ≈ intercept + coef X(t)`` with standard errors.

    Attributes
    ----------
    coef : (K_y, K_x)
    stderr : (K_y, K_x) standard errors of ``coef`` (HAC)
    intercept : (K_y,)
    residual_var : (K_y,) residual variance per output
    n_obs : rows used
    """

    coef: FloatArray
    stderr: FloatArray
    intercept: FloatArray
    residual_var: FloatArray
    n_obs: int


def lagged_design(Z: FloatArray, n_instruments: int) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(target Z(t), regressors Z(t-1), instruments [Z(t-2) .. Z(t-1-k)]) for every t with all lags.

    Examples
    --------
    >>> y, x, w = lagged_design(np.arange(10.0)[:, None], 2)
    >>> float(y[0, 0]), float(x[0, 0]), w[0].tolist()
    (3.0, 2.0, [1.0, 0.0])
    """
    k = n_instruments
    T = len(Z)
    if k + 3 > T:
        raise DataError(f"need at least {k + 3} time steps for {k} instrument lag(s), got {T}")
    target = Z[k + 1 :]
    regressors = Z[k : T - 1]
    instruments = np.hstack([Z[k - j : T - 1 - j] for j in range(1, k + 1)])
    return target, regressors, instruments


def lagged_design_with_inputs(
    Z: FloatArray, U_prev: FloatArray, n_instruments: int, inputs: str = "exogenous"
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """:func:`lagged_design` with inputs: regressors ``[Z(t-1), u(t-1)]`` for the target Z(t).

    ``U_prev`` row t is u(t-1), the input that drives the transition into t (the
    protocol's convention). ``inputs="exogenous"`` makes u(t-1) its own instrument
    (inputs set independently of the noises, open loop); ``"lagged"`` instruments it
    by ``u(t-2) .. u(t-1-k)`` instead, which stays valid when a controller sets u(t-1)
    from the measurements at t-1 (feedback makes u(t-1) correlated with the
    measurement noise n(t-1) in the regression error).

    Examples
    --------
    >>> Z, U = np.arange(10.0)[:, None], 100 + np.arange(10.0)[:, None]
    >>> y, x, w = lagged_design_with_inputs(Z, U, 2)
    >>> float(y[0, 0]), x[0].tolist(), w[0].tolist()
    (3.0, [2.0, 103.0], [1.0, 0.0, 103.0])
    >>> lagged_design_with_inputs(Z, U, 2, "lagged")[2][0].tolist()
    [1.0, 0.0, 102.0, 101.0]
    """
    if inputs not in ("exogenous", "lagged"):
        raise DataError(f"inputs must be 'exogenous' or 'lagged', got {inputs!r}")
    if len(U_prev) != len(Z):
        raise DataError(f"inputs have {len(U_prev)} rows, the states {len(Z)}")
    target, regressors, instruments = lagged_design(Z, n_instruments)
    k, T = n_instruments, len(Z)
    u_now = U_prev[k + 1 :]
    lags = [U_prev[k + 1 - j : T - j] for j in range(1, k + 1)]
    extra = u_now if inputs == "exogenous" else np.hstack(lags)
    return target, np.hstack([regressors, u_now]), np.hstack([instruments, extra])


def _with_constant(X: FloatArray) -> FloatArray:
    return np.column_stack([np.ones(len(X)), X])


def _hac_stderr(Q: FloatArray, U: FloatArray, lags: int) -> FloatArray:
    """sqrt of diag of the sandwich B Omega_i B for every output i; Q = Xh B (T, k), U residuals (T, K_y).

    se[i, j]^2 = sum_l w_l sum_t Q[t, j] U[t, i] Q[t-l, j] U[t-l, i]  (w_0 = 1, w_l = 2 (1 - l/(L+1)))
    """
    var = (Q * Q).T @ (U * U)  # (k, K_y), lag 0
    for lag in range(1, lags + 1):
        weight = 2.0 * (1.0 - lag / (lags + 1.0))
        var += weight * ((Q[lag:] * Q[:-lag]).T @ (U[lag:] * U[:-lag]))
    return np.sqrt(np.maximum(var, 0.0)).T  # (K_y, k)


def instrumental_variables(Y: FloatArray, X: FloatArray, W: FloatArray, hac_lags: int = 2) -> RegressionResult:
    """Two-stage least squares of Y (T, K_y) on X (T, K_x) with instruments W (T, K_w >= K_x), all with a constant.

    ``X̂ = P_W X``; ``[c, B] = (X̂'X̂)^-1 X̂'Y``; residuals use X, not X̂.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(4000, 1)); y = 2.0 * x + rng.normal(size=(4000, 1))
    >>> noisy = x + rng.normal(size=x.shape)             # errors in the regressor ...
    >>> instrument = x + rng.normal(size=x.shape)        # ... and an independent noisy copy
    >>> ols = ordinary_least_squares(y, noisy).coef[0, 0]
    >>> iv = instrumental_variables(y, noisy, instrument).coef[0, 0]
    >>> bool(abs(ols - 1.0) < 0.1 and abs(iv - 2.0) < 0.1)   # OLS attenuated to half, IV consistent
    True
    """
    Xc, Wc = _with_constant(X), _with_constant(W)
    n, k = Xc.shape
    if Wc.shape[1] < k:
        raise DataError(f"need at least as many instruments ({Wc.shape[1] - 1}) as regressors ({k - 1})")
    if n <= k:
        raise DataError(f"need more than {k} observations for {k - 1} regressors, got {n}")
    # first stage: X̂ = W (W'W)^-1 W'X
    Xh = Wc @ np.linalg.lstsq(Wc, Xc, rcond=None)[0]
    gram = Xh.T @ Xh
    B = np.linalg.pinv(gram)
    # second stage: beta = (X̂'X̂)^-1 X̂'Y
    beta = B @ (Xh.T @ Y)
    U = Y - Xc @ beta
    stderr = _hac_stderr(Xh @ B, U, hac_lags) * np.sqrt(n / (n - k))
    return RegressionResult(
        coef=beta[1:].T.copy(),
        stderr=stderr[:, 1:].copy(),
        intercept=beta[0].copy(),
        residual_var=U.var(axis=0, ddof=k),
        n_obs=n,
    )


def ordinary_least_squares(Y: FloatArray, X: FloatArray, hac_lags: int = 2) -> RegressionResult:
    """Least squares of Y on X with a constant (instrumental variables with W = X)."""
    return instrumental_variables(Y, X, X, hac_lags)


def ridge_regression(Y: FloatArray, X: FloatArray, ridge: float = 1e-2) -> tuple[FloatArray, FloatArray]:
    """(coef (K_y, K_x), intercept (K_y,)) of ``min ||Y - c - X B'||^2 + ridge' ||B||^2``.

    ``ridge`` is relative to the mean regressor energy (``ridge' = ridge tr(X_c'X_c) / K_x`` on
    centred X), so it is scale free; the intercept is not penalised.

    Examples
    --------
    >>> X = np.arange(10.0)[:, None]; coef, c = ridge_regression(3.0 * X + 1.0, X, ridge=0.0)
    >>> round(float(coef[0, 0]), 6), round(float(c[0]), 6)
    (3.0, 1.0)
    """
    mean_x, mean_y = X.mean(axis=0), Y.mean(axis=0)
    Xc, Yc = X - mean_x, Y - mean_y
    gram = Xc.T @ Xc
    penalty = ridge * np.trace(gram) / max(len(gram), 1)
    # (X'X + ridge I) B' = X'Y
    coef = np.linalg.solve(gram + penalty * np.eye(len(gram)) + 1e-12 * np.eye(len(gram)), Xc.T @ Yc).T
    return np.ascontiguousarray(coef), mean_y - coef @ mean_x
