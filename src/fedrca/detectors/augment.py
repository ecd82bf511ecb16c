"""Learned augmentation of a fixed proprietary filter.

``phi(y; Theta) = Theta psi(y)`` is linear in its parameters over a feature map
psi of the standardised measurements: the identity (linear / Granger, P2) or
seeded random Fourier features (nonlinear, P1). The augmented model is::

    x̂_a(t-1) = x̂_c(t-1) + Theta psi(y(t-1))
    x_a(t)   = f(x̂_a(t-1), u)
    r_a(t)   = y(t) - h(x_a(t))

so with Theta = 0 it is exactly the proprietary prediction. Because phi is linear
in Theta, the gradient of any loss with respect to Theta is closed-form:
``dL/dTheta = sum_t J_f(t)' g_t psi_t'`` with ``g_t = dL/dx_a(t)`` and J_f the
transition Jacobian (the constant A for a linear model).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from fedrca.detectors.ekf import batched_jacobian
from fedrca.detectors.plugin import LinearModel, ProprietaryFilter
from fedrca.exceptions import ModelError, NotFittedError

__all__ = [
    "Augmentation",
    "FeatureMap",
    "IdentityFeatures",
    "RandomFourierFeatures",
    "batched_jacobian",
    "make_feature_map",
    "transition_jacobians",
]

FloatArray = NDArray[np.float64]


class FeatureMap(Protocol):
    """psi: (T, D) standardised measurements -> (T, F) features."""

    @property
    def n_features(self) -> int: ...

    def transform(self, Yz: FloatArray) -> FloatArray: ...


@dataclass(frozen=True)
class IdentityFeatures:
    """psi(y) = y: the linear (Granger) augmentation of P2.

    Examples
    --------
    >>> import numpy as np
    >>> IdentityFeatures(3).transform(np.ones((2, 3))).shape
    (2, 3)
    """

    input_dim: int

    @property
    def n_features(self) -> int:
        """F = D."""
        return self.input_dim

    def transform(self, Yz: FloatArray) -> FloatArray:
        """Return the input unchanged (as float64)."""
        return np.asarray(Yz, dtype=np.float64)


@dataclass(frozen=True)
class RandomFourierFeatures:
    """psi(y) = sqrt(2/F) cos(W y + b), W ~ N(0, 1/lengthscale^2), b ~ U(0, 2 pi); seeded.

    Approximates an RBF kernel of the given length scale (Rahimi & Recht 2007).

    Examples
    --------
    >>> import numpy as np
    >>> rff = RandomFourierFeatures(input_dim=4, n_features=16, seed=1)
    >>> np.array_equal(rff.transform(np.ones((1, 4))),
    ...                RandomFourierFeatures(4, 16, seed=1).transform(np.ones((1, 4))))
    True
    """

    input_dim: int
    n_features: int = 64
    lengthscale: float = 1.0
    seed: int = 0
    _W: FloatArray = field(init=False, repr=False, compare=False)
    _b: FloatArray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.n_features < 1 or self.lengthscale <= 0:
            raise ModelError("random features need n_features >= 1 and lengthscale > 0")
        rng = np.random.default_rng(self.seed)
        object.__setattr__(self, "_W", rng.normal(0.0, 1.0 / self.lengthscale, (self.n_features, self.input_dim)))
        object.__setattr__(self, "_b", rng.uniform(0.0, 2.0 * np.pi, self.n_features))

    @property
    def weights(self) -> FloatArray:
        """W (F, D), read-only."""
        return self._W

    @property
    def phases(self) -> FloatArray:
        """b (F,), read-only."""
        return self._b

    def transform(self, Yz: FloatArray) -> FloatArray:
        """(T, D) -> (T, F)."""
        # psi = sqrt(2/F) cos(W y + b)
        return np.sqrt(2.0 / self.n_features) * np.cos(np.asarray(Yz) @ self._W.T + self._b)


def make_feature_map(
    kind: str, input_dim: int, n_features: int = 64, lengthscale: float = 1.0, seed: int = 0
) -> FeatureMap:
    """Build a feature map by name: ``"identity"`` or ``"rff"``."""
    if kind == "identity":
        return IdentityFeatures(input_dim)
    if kind == "rff":
        return RandomFourierFeatures(input_dim, n_features, lengthscale, seed)
    raise ModelError(f"unknown feature map '{kind}'; use 'identity' or 'rff'")


def transition_jacobians(model: ProprietaryFilter, X: FloatArray, U: FloatArray | None = None) -> FloatArray:
    """df/dx at every row of X (T, P) -> (T, P, P).

    Linear models (with ``transition_matrix``) return A broadcast without evaluating f.
    """
    T, P = X.shape
    if isinstance(model, LinearModel):
        return np.broadcast_to(np.asarray(model.transition_matrix), (T, P, P))
    U_rep = None if U is None else np.repeat(U, P, axis=0)
    return batched_jacobian(lambda Z: model.predict(Z, U_rep), X)


class Augmentation:
    """phi(y; Theta) = Theta psi(y) added to the proprietary estimate.

    Parameters
    ----------
    feature_map : FeatureMap over standardised measurements
    state_dim : P
    theta : (P, F) initial parameters; zeros (= the proprietary model) by default

    Examples
    --------
    >>> import numpy as np
    >>> aug = Augmentation(IdentityFeatures(2), state_dim=1)
    >>> aug.phi(np.ones((3, 2))).tolist()
    [[0.0], [0.0], [0.0]]
    """

    def __init__(self, feature_map: FeatureMap, state_dim: int, theta: FloatArray | None = None) -> None:
        self.feature_map = feature_map
        self.state_dim = state_dim
        self.theta = (
            np.zeros((state_dim, feature_map.n_features)) if theta is None else np.asarray(theta, dtype=np.float64)
        )

    @property
    def theta(self) -> FloatArray:
        """Parameters Theta, (P, F)."""
        return self._theta

    @theta.setter
    def theta(self, value: FloatArray) -> None:
        expected = (self.state_dim, self.feature_map.n_features)
        value = np.asarray(value, dtype=np.float64)
        if value.shape != expected:
            raise ModelError(f"Theta must have shape {expected}, got {value.shape}")
        if not np.all(np.isfinite(value)):
            raise ModelError("Theta contains NaN or inf")
        self._theta = value.copy()

    @property
    def is_zero(self) -> bool:
        """True when the augmentation is the identity (Theta = 0)."""
        return not np.any(self._theta)

    def phi(self, Yz: FloatArray) -> FloatArray:
        """phi(y) = Theta psi(y); (T, D) -> (T, P)."""
        return np.asarray(self.feature_map.transform(Yz) @ self._theta.T)

    def augment(
        self, model: ProprietaryFilter, xhat_c_prev: FloatArray, yz_prev: FloatArray, u: FloatArray | None = None
    ) -> tuple[FloatArray, FloatArray]:
        """Augmented estimate and prediction for T aligned samples.

        Parameters
        ----------
        model : the fixed proprietary filter (its pure ``predict``)
        xhat_c_prev : (T, P) proprietary estimates x̂_c(t-1)
        yz_prev : (T, D) standardised measurements y(t-1)
        u : (T, U) inputs driving the transition into t, optional

        Returns
        -------
        xhat_a_prev : (T, P) x̂_a(t-1) = x̂_c(t-1) + phi(y(t-1))
        x_a : (T, P) x_a(t) = f(x̂_a(t-1), u)
        """
        xhat_a_prev = xhat_c_prev + self.phi(yz_prev)
        return xhat_a_prev, np.asarray(model.predict(xhat_a_prev, u))

    def gradient(
        self,
        model: ProprietaryFilter,
        xhat_a_prev: FloatArray,
        yz_prev: FloatArray,
        upstream: FloatArray,
        u: FloatArray | None = None,
    ) -> FloatArray:
        """dL/dTheta from an upstream gradient ``dL/dx_a`` (T, P) (e.g. the server's).

        ``dL/dTheta = sum_t J_f(x̂_a(t-1))' g_t psi(y(t-1))'``, shape (P, F).
        """
        Psi = self.feature_map.transform(yz_prev)
        if isinstance(model, LinearModel):
            # dL/dTheta = A' (G' Psi)  (one matmul for all t)
            return np.asarray(np.asarray(model.transition_matrix).T @ (upstream.T @ Psi))
        J = transition_jacobians(model, xhat_a_prev, u)
        # dL/dTheta[q, f] = sum_t sum_k J[t, k, q] g[t, k] psi[t, f]
        return np.asarray(np.einsum("tkq,tk,tf->qf", J, upstream, Psi, optimize=True))

    def local_loss_gradient(
        self,
        model: ProprietaryFilter,
        xhat_c_prev: FloatArray,
        yz_prev: FloatArray,
        y_target: FloatArray,
        u: FloatArray | None = None,
    ) -> tuple[float, FloatArray, FloatArray]:
        """Mean reconstruction loss ``(1/T) sum_t ||y(t) - h(x_a(t))||^2`` and its gradients.

        ``y_target`` must be in the units ``model.measure`` returns (standardised for
        identified models).

        Returns
        -------
        loss : float
        dL/dTheta : (P, F)
        dL/dx_a : (T, P), reusable to add an upstream term before chaining
        """
        if len(y_target) == 0:
            raise NotFittedError("no samples to compute a loss on")
        xhat_a_prev, x_a = self.augment(model, xhat_c_prev, yz_prev, u)
        residual = y_target - model.measure(x_a)
        T = len(residual)
        loss = float(np.sum(residual**2) / T)
        if isinstance(model, LinearModel):
            # dL/dx_a(t) = -(2/T) C' r(t)
            g = -(2.0 / T) * residual @ np.asarray(model.C)
        else:
            H = batched_jacobian(model.measure, x_a)
            # dL/dx_a(t) = -(2/T) H_t' r(t)
            g = -(2.0 / T) * np.einsum("tdp,td->tp", H, residual)
        return loss, self.gradient(model, xhat_a_prev, yz_prev, g, u), g
