"""Nonlinear server model: additive random features of every plant's state.

``x_s,m(t) = x_c,m(t) + c_m + sum_n W_mn phi_n(x̂_c,n(t-1))`` where ``phi_n`` are
seeded random Fourier features of plant n's standardised state (centred on the
training data), so f_s is linear in its parameters W and fitted in closed form by
ridge regression of what the proprietary prediction misses, ``x̃_m(t) - x_c,m(t)``,
on the features of *all* plants. The whole prediction (own block included) is the
server's target for the client: leaving the own block out would leave the cross
blocks, fitted jointly with a collinear own block, as a biased correction. The
additive form keeps one block W_mn per ordered plant pair, so ``||W_mn||`` (n != m)
is a nonlinear Granger statistic of the edge n -> m.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from fedrca.exceptions import ModelError

__all__ = ["RandomFeatureCrossModel", "StateFeatures"]

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class StateFeatures:
    """Per-plant random Fourier features ``sqrt(2/F) cos(Omega_n (x - mean_n) / scale_n + b_n) - centre_n``.

    Attributes
    ----------
    dims : state dimension of each plant
    omega : per plant (F, P_n) frequencies ~ N(0, 1/lengthscale^2)
    phase : per plant (F,) phases ~ U(0, 2 pi)
    mean, scale : per plant (P_n,) standardisation of the state
    centre : per plant (F,) training mean of the features
    """

    dims: tuple[int, ...]
    omega: tuple[FloatArray, ...]
    phase: tuple[FloatArray, ...]
    mean: tuple[FloatArray, ...]
    scale: tuple[FloatArray, ...]
    centre: tuple[FloatArray, ...]

    @property
    def n_features(self) -> int:
        """F per plant."""
        return int(self.omega[0].shape[0])

    @classmethod
    def fit(cls, X: FloatArray, dims: tuple[int, ...], n_features: int, lengthscale: float, seed: int) -> StateFeatures:
        """Draw the features and standardise/centre them on states X (T, sum P)."""
        if n_features < 1 or lengthscale <= 0:
            raise ModelError("server random features need n_features >= 1 and lengthscale > 0")
        rng = np.random.default_rng(seed)
        offsets = np.cumsum((0, *dims))
        omega, phase, mean, scale, centre = [], [], [], [], []
        for n, P in enumerate(dims):
            Xn = X[:, offsets[n] : offsets[n + 1]]
            mu = Xn.mean(axis=0)
            # one scale per plant keeps the state's geometry (the features are isotropic)
            s = float(np.sqrt(np.mean((Xn - mu) ** 2))) or 1.0
            om = rng.normal(0.0, 1.0 / lengthscale, (n_features, P))
            ph = rng.uniform(0.0, 2.0 * np.pi, n_features)
            feats = np.sqrt(2.0 / n_features) * np.cos(((Xn - mu) / s) @ om.T + ph)
            omega.append(om)
            phase.append(ph)
            mean.append(mu)
            scale.append(np.full(P, s))
            centre.append(feats.mean(axis=0))
        return cls(tuple(dims), tuple(omega), tuple(phase), tuple(mean), tuple(scale), tuple(centre))

    def transform_plant(self, n: int, Xn: FloatArray) -> FloatArray:
        """Features of plant n's states (T, P_n) -> (T, F)."""
        # phi = sqrt(2/F) cos(Omega (x - mean)/scale + b) - centre
        z = ((Xn - self.mean[n]) / self.scale[n]) @ self.omega[n].T + self.phase[n]
        return np.asarray(np.sqrt(2.0 / self.n_features) * np.cos(z) - self.centre[n])

    def transform(self, X: FloatArray) -> FloatArray:
        """Features of all plants side by side, (T, sum P) -> (T, M F)."""
        offsets = np.cumsum((0, *self.dims))
        return np.hstack([self.transform_plant(n, X[:, offsets[n] : offsets[n + 1]]) for n in range(len(self.dims))])

    def to_arrays(self, prefix: str) -> dict[str, np.ndarray]:
        """Arrays for an artifact (per plant index)."""
        out: dict[str, np.ndarray] = {}
        for n in range(len(self.dims)):
            for name in ("omega", "phase", "mean", "scale", "centre"):
                out[f"{prefix}.{n}.{name}"] = np.asarray(getattr(self, name)[n])
        return out

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], prefix: str, dims: tuple[int, ...]) -> StateFeatures:
        """Inverse of :meth:`to_arrays`."""
        parts = {
            name: tuple(np.asarray(arrays[f"{prefix}.{n}.{name}"], dtype=np.float64) for n in range(len(dims)))
            for name in ("omega", "phase", "mean", "scale", "centre")
        }
        return cls(tuple(dims), **parts)


class RandomFeatureCrossModel:
    """Ridge regression of the proprietary miss on additive state features; predicts cross-plant effects.

    Parameters
    ----------
    dims : state dimension per plant
    n_features, lengthscale, seed : random features per plant
    ridge : penalty relative to the mean feature energy

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(2000, 2))                       # plant 0 (1 state), plant 1 (1 state)
    >>> miss = np.column_stack([np.zeros(2000), np.tanh(2 * X[:, 0])])   # plant 0 drives plant 1
    >>> model = RandomFeatureCrossModel((1, 1), n_features=32, lengthscale=1.0, seed=0).fit(X, miss)
    >>> cross = model.cross(X, 1)
    >>> bool(np.mean((cross[:, 0] - miss[:, 1]) ** 2) < 0.05 * np.var(miss[:, 1]))
    True
    """

    def __init__(
        self, dims: tuple[int, ...], n_features: int = 64, lengthscale: float = 1.0, seed: int = 0, ridge: float = 1e-2
    ) -> None:
        self.dims = tuple(int(d) for d in dims)
        self.n_features = n_features
        self.lengthscale = lengthscale
        self.seed = seed
        self.ridge = ridge
        self._features: StateFeatures | None = None
        self._W: FloatArray | None = None  # (S, M F)
        self._intercept: FloatArray | None = None  # (S,)

    @property
    def fitted(self) -> bool:
        """True after :meth:`fit`."""
        return self._W is not None

    @property
    def features(self) -> StateFeatures:
        """The fitted feature map."""
        if self._features is None:
            raise ModelError("the random-feature server model is not fitted")
        return self._features

    @property
    def weights(self) -> FloatArray:
        """W (S, M F)."""
        if self._W is None:
            raise ModelError("the random-feature server model is not fitted")
        return self._W

    def fit(self, X_prev: FloatArray, miss: FloatArray) -> RandomFeatureCrossModel:
        """Fit on states x̂_c(t-1) (T, S) and targets x̃(t) - x_c(t) (T, S)."""
        self._features = StateFeatures.fit(X_prev, self.dims, self.n_features, self.lengthscale, self.seed)
        Phi = np.column_stack([np.ones(len(X_prev)), self._features.transform(X_prev)])
        gram = Phi.T @ Phi
        penalty = self.ridge * np.trace(gram[1:, 1:]) / max(gram.shape[0] - 1, 1)
        reg = penalty * np.eye(len(gram))
        reg[0, 0] = 0.0  # the intercept is not penalised
        # (Phi'Phi + ridge) W' = Phi' miss
        coef = np.linalg.solve(gram + reg, Phi.T @ miss)
        self._W = np.ascontiguousarray(coef[1:].T)
        self._intercept = np.asarray(coef[0]).copy()
        return self

    def predict(self, X_prev: FloatArray, m: int) -> FloatArray:
        """Predicted miss of plant m from every plant's state (own block and intercept included), (T, P_m)."""
        offsets = np.cumsum((0, *self.dims))
        rows = slice(int(offsets[m]), int(offsets[m + 1]))
        if self._intercept is None:
            raise ModelError("the random-feature server model is not fitted")
        return np.asarray(self.features.transform(X_prev) @ self.weights[rows].T + self._intercept[rows])

    def cross(self, X_prev: FloatArray, m: int) -> FloatArray:
        """Cross-plant effect on plant m, sum_{n != m} W_mn phi_n(x̂_n(t-1)); (T, S) -> (T, P_m)."""
        offsets = np.cumsum((0, *self.dims))
        F = self.n_features
        W = self.weights[offsets[m] : offsets[m + 1]]
        out = np.zeros((len(X_prev), self.dims[m]))
        for n in range(len(self.dims)):
            if n == m:
                continue
            phi = self.features.transform_plant(n, X_prev[:, offsets[n] : offsets[n + 1]])
            out += phi @ W[:, n * F : (n + 1) * F].T
        return out

    def block_norms(self) -> FloatArray:
        """(M, M) Frobenius norms of W_mn (diagonal: the own-plant control block)."""
        offsets = np.cumsum((0, *self.dims))
        F = self.n_features
        M = len(self.dims)
        W = self.weights
        return np.array(
            [[np.linalg.norm(W[offsets[m] : offsets[m + 1], n * F : (n + 1) * F]) for n in range(M)] for m in range(M)]
        )

    def get_state(self) -> dict[str, np.ndarray]:
        """Arrays of the fitted model (for checkpoints and artifacts)."""
        if self._features is None or self._W is None or self._intercept is None:
            return {}
        return {"rff.W": self._W, "rff.intercept": self._intercept, **self._features.to_arrays("rff")}

    def set_state(self, arrays: dict[str, np.ndarray]) -> None:
        """Restore :meth:`get_state` output (empty = unfitted)."""
        if "rff.W" not in arrays:
            self._features, self._W, self._intercept = None, None, None
            return
        self._W = np.asarray(arrays["rff.W"], dtype=np.float64)
        self._intercept = np.asarray(arrays["rff.intercept"], dtype=np.float64)
        self._features = StateFeatures.from_arrays(arrays, "rff", self.dims)
